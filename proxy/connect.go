package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/elazarl/goproxy"

	"github.com/egressd/egressd/policy"
)

// helloTimeout bounds how long a client may take to send its ClientHello
// after the tunnel is up.
const helloTimeout = 10 * time.Second

var errSNIMismatch = errors.New("TLS SNI does not name the CONNECT host")

// onConnect decides a CONNECT: deny with a status, splice a host-only rule
// after the SNI check, or inspect (terminate TLS with egressd's CA).
func (x *Proxy) onConnect(host string, ctx *goproxy.ProxyCtx) (*goproxy.ConnectAction, string) {
	r := ctx.Req
	rq, _ := r.Context().Value(keyDecision).(*request)
	if rq == nil {
		rq = &request{start: time.Now(), method: r.Method}
		ctx.Resp = x.deny(r, rq, policy.ReasonInternal, "", "CONNECT without proxy state")
		return goproxy.RejectConnect, host
	}
	t, err := policy.ParseAuthority(r.RequestURI)
	if err != nil {
		ctx.Resp = x.deny(r, rq, policy.ReasonBadTarget, "", err.Error())
		return goproxy.RejectConnect, host
	}
	rq.target = t
	p := x.Policy()
	rq.d = p.DecideTarget(&t)
	x.m.decisionLatency.Observe(time.Since(rq.start).Seconds())
	if !rq.d.Allow {
		ctx.Resp = x.denyDecision(r, rq)
		return goproxy.RejectConnect, host
	}
	if reason, detail := x.refusal(p, r.RemoteAddr); reason.Denies() {
		ctx.Resp = x.deny(r, rq, reason, rq.d.RuleName(), detail)
		return goproxy.RejectConnect, host
	}
	if rq.d.Inspect {
		if x.ca == nil {
			ctx.Resp = x.deny(r, rq, policy.ReasonInspectionUnavailable, rq.d.RuleName(), "this rule needs TLS inspection and egressd has no CA")
			return goproxy.RejectConnect, host
		}
		x.holdTunnel(r, rq, true)
		rq.conn, _ = r.Context().Value(keyConn).(*scanConn)
		ctx.UserData = rq
		x.logDecision(r.Context(), rq, http.StatusOK, "tunnel inspected", 0, 0)
		return &goproxy.ConnectAction{Action: goproxy.ConnectMitm, TLSConfig: x.mitmTLS(rq)}, host
	}
	return &goproxy.ConnectAction{Action: goproxy.ConnectHijack, Hijack: func(req *http.Request, client net.Conn, _ *goproxy.ProxyCtx) {
		x.splice(req, client, rq, p)
	}}, host
}

// holdTunnel ties a tunnel to its client connection: the identity's
// connection slot is released and the tunnel forgotten only when the
// connection closes, and a quarantine can close it at once.
func (x *Proxy) holdTunnel(r *http.Request, rq *request, takeSlot bool) bool {
	sc, _ := r.Context().Value(keyConn).(*scanConn)
	if sc == nil {
		return false
	}
	release := func() {}
	if takeSlot && rq.release != nil {
		// The tunnel outlives ServeHTTP: it takes over ServeHTTP's slot
		// (on ServeHTTP's goroutine, before it returns), so the identity
		// never counts one connection twice.
		release, rq.release = rq.release, nil
	}
	x.m.tunnels.Inc()
	x.ids.addTunnel(rq.identity, sc)
	sc.setOnClose(func() {
		x.ids.removeTunnel(rq.identity, sc)
		x.m.tunnels.Dec()
		release()
	})
	return true
}

// mitmTLS returns the TLS config for the client side of an inspected
// tunnel; the handshake fails unless the SNI names the CONNECT host.
func (x *Proxy) mitmTLS(rq *request) func(string, *goproxy.ProxyCtx) (*tls.Config, error) {
	return func(string, *goproxy.ProxyCtx) (*tls.Config, error) {
		base, err := x.ca.ServerConfig(rq.target.Host())
		if err != nil {
			return nil, fmt.Errorf("issue certificate for %s: %w", rq.target.Host(), err)
		}
		if rq.conn != nil {
			// Runs after the hijack, when net/http's background read is
			// gone: goproxy's MITM handshake has no deadline of its own.
			rq.conn.idle.Store(int64(helloTimeout))
		}
		cfg := base.Clone()
		cfg.GetConfigForClient = func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			if !sniMatches(&rq.target, h.ServerName) {
				x.logDecisionReason(context.Background(), rq, 0, policy.ReasonSNIMismatch, fmt.Sprintf("SNI %q in a tunnel to %s", h.ServerName, rq.target.Host()), 0, 0)
				return nil, errSNIMismatch
			}
			return nil, nil
		}
		cfg.VerifyConnection = func(tls.ConnectionState) error {
			if rq.conn != nil { // handshake done: from now on the idle timeout
				rq.conn.idle.Store(int64(x.Policy().Limits.IdleTimeout))
			}
			return nil
		}
		return cfg, nil
	}
}

// sniMatches: a CONNECT to a name needs SNI equal to that name; a CONNECT
// to an address needs no SNI or the address itself. Anything else is
// domain fronting.
func sniMatches(t *policy.Target, sni string) bool {
	if t.Addr.IsValid() {
		return sni == "" || strings.EqualFold(sni, t.Addr.String())
	}
	if sni == "" {
		return false
	}
	name, addr, err := policy.NormalizeHost(sni)
	return err == nil && !addr.IsValid() && name == t.Name
}

// splice runs a host-only tunnel: dial first (so failures get a proper
// status), answer 200, check the ClientHello's SNI, replay it upstream and
// copy both ways (relay: read and write with a buffer held only while data
// flows).
func (x *Proxy) splice(req *http.Request, client net.Conn, rq *request, p *policy.Policy) {
	var up net.Conn
	handedOff := false // the relay closes both connections from then on
	defer func() {
		if !handedOff {
			client.Close()
			if up != nil {
				up.Close()
			}
		}
	}()
	up, _, err := x.dialer.dial(req.Context(), p, &rq.d, rq.target.Port)
	if err != nil {
		reason := reasonFor(err)
		var de *DenyError
		detail := err.Error()
		if errors.As(err, &de) {
			rq.d.HighRisk = de.HighRisk
			detail = de.Detail
		}
		resp := x.deny(req, rq, reason, rq.d.RuleName(), detail)
		resp.Close = true
		resp.Write(client)
		return
	}
	// The relay below outlives ServeHTTP and its connection slot, so the
	// tunnel takes a slot of its own (ServeHTTP checked the limit).
	sc, _ := client.(*scanConn)
	held := sc != nil && x.holdTunnel(req, rq, true)
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	var pre []byte
	if rq.d.Rule.TLS {
		hello, raw, err := peekClientHello(client, helloTimeout)
		switch {
		case errors.Is(err, ErrNotTLS):
			x.logDecisionReason(req.Context(), rq, 0, policy.ReasonNotTLS, "rule expects TLS; declare tls: false for raw TCP", 0, 0)
			return
		case err != nil:
			x.logDecisionReason(req.Context(), rq, 0, policy.ReasonNoClientHello, err.Error(), 0, 0)
			return
		case !sniMatches(&rq.target, hello.ServerName):
			rq.d.Allow = false
			x.logDecisionReason(req.Context(), rq, 0, policy.ReasonSNIMismatch, fmt.Sprintf("SNI %q in a tunnel to %s", hello.ServerName, rq.target.Host()), 0, 0)
			return
		}
		pre = raw
	}
	if len(pre) > 0 {
		if _, err := up.Write(pre); err != nil {
			return
		}
	}
	var src net.Conn = client
	if sc != nil {
		src = sc.Conn // the raw TCP socket: relay reads it directly
	}
	ctx := context.WithoutCancel(req.Context()) // net/http cancels it when ServeHTTP returns
	sent := int64(len(pre))                     // not pre itself: an idle tunnel keeps nothing it does not need
	tunnel := func() {
		defer client.Close()
		defer up.Close()
		idle := x.Policy().Limits.IdleTimeout
		out, in, idled := pipe(src, up, idle)
		out += sent
		x.m.bytesOut.Add(float64(out))
		x.m.bytesIn.Add(float64(in))
		x.logDecisionReason(ctx, rq, http.StatusOK, policy.ReasonTunnel, idleDetail(idled, idle), in, out)
	}
	handedOff = true
	if !held {
		tunnel() // no slot of its own: stay inside ServeHTTP, which holds one
		return
	}
	// A tunnel can stay open for hours: relay on a fresh goroutine and let
	// net/http's connection goroutine end, with its deep stack and its
	// buffers, which a hijacked connection keeps until the handler returns.
	go tunnel()
}

// pipe copies both ways until both directions end, half-closing as each
// side finishes, and returns the byte counts (client→upstream, back). It
// closes both connections when neither carried a byte for idle (<= 0: no
// limit) and then reports idled.
func pipe(client, up net.Conn, idle time.Duration) (out, in int64, idled bool) {
	w := newIdleWatch(idle, func() { client.Close(); up.Close() })
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		out, _ = relay(up, client, w)
		closeWrite(up)
	}()
	in, _ = relay(client, up, w)
	closeWrite(client)
	wg.Wait()
	return out, in, w.stop()
}

// idleDetail is the log detail of a tunnel the idle timeout closed.
func idleDetail(idled bool, idle time.Duration) string {
	if !idled {
		return ""
	}
	return fmt.Sprintf("closed after %s without traffic (limits.idle_timeout)", idle)
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	} else {
		c.Close()
	}
}
