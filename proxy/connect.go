package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/egressd/egressd/policy"
)

// HelloTimeout bounds how long a client may take to send its ClientHello
// (and finish an inspected handshake) after the tunnel is up: the longest
// a silent tunnel stays open (the self-test probes it).
const HelloTimeout = 5 * time.Second

// extECH is the TLS encrypted_client_hello extension (RFC 9849).
const extECH = 0xfe0d

var errSNIMismatch = errors.New("TLS SNI does not name the CONNECT host")

// serveConnect decides a CONNECT and runs the tunnel: deny with a status,
// splice a host-only rule after the SNI check, or inspect (terminate TLS
// with egressd's CA and serve the requests inside). egressd handles CONNECT
// itself rather than through goproxy: the hijacked connection keeps the
// bytes a client sent with the CONNECT line, and every state of the tunnel
// has a deadline and a bounded head.
func (x *Proxy) serveConnect(w http.ResponseWriter, r *http.Request, rq *request) {
	t, err := policy.ParseAuthority(r.RequestURI)
	if err != nil {
		x.writeDeny(w, r, rq, policy.ReasonBadTarget, "", err.Error())
		return
	}
	rq.target = t
	p := x.policyFor(r.RemoteAddr)
	rq.d, rq.pol = p.DecideTargetAs(&t, rq.identity), p
	x.m.decisionLatency.Observe(time.Since(rq.start).Seconds())
	if h := x.honeyInName(rq, "connect host"); h != nil {
		writeResponse(w, x.denyHoneytoken(r, rq, h))
		return
	}
	if !rq.d.Allow {
		writeResponse(w, x.denyDecision(r, rq))
		return
	}
	if reason, detail := x.refusal(p, r.RemoteAddr); reason.Denies() {
		x.writeDeny(w, r, rq, reason, rq.d.RuleName(), detail)
		return
	}
	var up net.Conn
	if rq.d.Inspect {
		if x.ca == nil {
			x.writeDeny(w, r, rq, policy.ReasonInspectionUnavailable, rq.d.RuleName(), "this rule needs TLS inspection and egressd has no CA")
			return
		}
		// Decide at CONNECT what can be decided: a name that resolves
		// only to refused addresses gets its 403 now, not after a TLS
		// handshake with egressd's CA. Each inner request dials (and
		// checks) again.
		if _, err := x.dialer.check(r.Context(), p, &rq.d, t.Port); err != nil {
			x.writeDialError(w, r, rq, err)
			return
		}
	} else {
		// Dial first, so that a failure gets its status on the CONNECT.
		if up, rq.upAddr, err = x.dialer.dial(r.Context(), p, &rq.d, t.Port); err != nil {
			x.writeDialError(w, r, rq, err)
			return
		}
	}
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		if up != nil {
			up.Close()
		}
		x.logDecisionReason(r.Context(), rq, 0, policy.ReasonInternal, "hijack: "+err.Error(), 0, 0)
		return
	}
	sc, ok := c.(*scanConn)
	if !ok { // every listener of serveHTTP wraps its connections
		c.Close()
		if up != nil {
			up.Close()
		}
		return
	}
	// Bytes the client sent right after the CONNECT head (a ClientHello in
	// the same write) are in net/http's buffer, not on the socket.
	var pre []byte
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n)
		pre = slices.Clone(b)
	}
	sc.SetDeadline(time.Time{}) // net/http's deadlines end with the hijack
	x.holdTunnel(sc, rq)
	if _, err := io.WriteString(sc, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		sc.Close()
		if up != nil {
			up.Close()
		}
		return
	}
	ctx := context.WithoutCancel(r.Context()) // net/http cancels it when ServeHTTP returns
	closed := x.tunnelOpened(ctx, rq)
	// The tunnel can stay open for hours: it runs on a fresh goroutine and
	// net/http's connection goroutine ends, with its deep stack and buffers.
	if rq.d.Inspect {
		go func() { defer closed(); x.inspect(ctx, sc, pre, rq, t.Port) }()
	} else {
		go func() { defer closed(); x.splice(ctx, sc, up, pre, rq) }()
	}
}

// writeDialError answers a CONNECT whose target failed the address checks
// or the dial.
func (x *Proxy) writeDialError(w http.ResponseWriter, r *http.Request, rq *request, err error) {
	reason := reasonFor(err)
	detail := err.Error()
	var de *DenyError
	if errors.As(err, &de) {
		rq.d.HighRisk = de.HighRisk
		detail = de.Detail
	}
	x.writeDeny(w, r, rq, reason, rq.d.RuleName(), detail)
}

// writeDeny answers a refusal through the ResponseWriter and logs it.
func (x *Proxy) writeDeny(w http.ResponseWriter, r *http.Request, rq *request, reason policy.Reason, rule, detail string) {
	writeResponse(w, x.deny(r, rq, reason, rule, detail))
}

// writeResponse copies a built response (a refusal) to w and closes the
// connection after it.
func writeResponse(w http.ResponseWriter, resp *http.Response) {
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.Header().Set("Connection", "close")
	w.WriteHeader(resp.StatusCode)
	if resp.Body != nil {
		io.Copy(w, resp.Body)
		resp.Body.Close()
	}
}

// holdTunnel ties a tunnel to its client connection: the identity's
// connection slot (taken over from ServeHTTP, which returns while the
// tunnel runs) is released and the tunnel forgotten only when the
// connection closes, and a quarantine or a reload can close it at once.
func (x *Proxy) holdTunnel(sc *scanConn, rq *request) {
	release := func() {}
	if rq.release != nil {
		release, rq.release = rq.release, nil
	}
	x.m.tunnels.Inc()
	ids := rq.names()
	for _, id := range ids {
		x.ids.addTunnel(id, sc, rq)
	}
	sc.setOnClose(func() {
		for _, id := range ids {
			x.ids.removeTunnel(id, sc)
		}
		x.m.tunnels.Dec()
		release()
	})
}

// cut ends a tunnel egressd refuses after the 200: it is a denial, logged,
// counted and hash-chained as one, with its reason.
func (x *Proxy) cut(ctx context.Context, rq *request, reason policy.Reason, detail string) {
	rq.d.Allow = false
	x.logDecisionReason(ctx, rq, 0, reason, detail, 0, 0)
}

// splice runs a host-only tunnel: check the ClientHello's SNI (and refuse
// ECH, which would hide the real host), replay it upstream and copy both
// ways (relay: read and write with a buffer held only while data flows).
func (x *Proxy) splice(ctx context.Context, sc *scanConn, up net.Conn, pre []byte, rq *request) {
	defer sc.Close()
	defer up.Close()
	client := &replayConn{Conn: sc.Conn, pre: pre}
	if rq.d.Rule.TLS {
		hello, raw, err := peekClientHello(client, x.helloTimeout)
		if reason, detail := x.checkHello(rq, hello, err); reason != policy.ReasonAllowed {
			x.cut(ctx, rq, reason, detail)
			return
		}
		pre = append(raw, client.pre...) // the hello, and anything after it already read
	}
	if len(pre) > 0 {
		if _, err := up.Write(pre); err != nil {
			return
		}
	}
	sent := int64(len(pre))
	pre = nil // an idle tunnel keeps nothing it does not need
	idle := x.Policy().Limits.IdleTimeout
	out, in, idled := pipe(sc.Conn, up, idle) // the raw socket: relay reads it directly
	out += sent
	x.m.bytesOut.Add(float64(out))
	x.m.bytesIn.Add(float64(in))
	if ci := rq.cutBy.Load(); ci != nil {
		rq.d.Allow = false
		x.logDecisionReason(ctx, rq, 0, ci.reason, ci.detail, in, out)
		return
	}
	x.logDecisionReason(ctx, rq, http.StatusOK, policy.ReasonTunnel, idleDetail(idled, idle), in, out)
}

// checkHello decides a spliced tunnel's ClientHello: the reason to cut it,
// or ReasonAllowed to let it through.
func (x *Proxy) checkHello(rq *request, hello *tls.ClientHelloInfo, err error) (reason policy.Reason, detail string) {
	switch {
	case errors.Is(err, ErrNotTLS):
		return policy.ReasonNotTLS, policy.ReasonNotTLS.Help()
	case err != nil:
		return policy.ReasonNoClientHello, err.Error()
	case !sniMatches(&rq.target, hello.ServerName):
		return policy.ReasonSNIMismatch, fmt.Sprintf("SNI %q in a tunnel to %s", hello.ServerName, rq.target.Host())
	case slices.Contains(hello.Extensions, extECH):
		return policy.ReasonECH, policy.ReasonECH.Help()
	}
	return policy.ReasonAllowed, ""
}

// inspect runs an inspected tunnel: a TLS handshake with egressd's CA
// (SNI checked), then the requests inside served one by one with the
// proxy's limits: the head bounded by limits.header_bytes, a deadline on
// every wait (the ClientHello, each head, the idle time between requests).
func (x *Proxy) inspect(ctx context.Context, sc *scanConn, pre []byte, rq *request, port uint16) {
	defer sc.Close()
	client := &replayConn{Conn: sc.Conn, pre: pre}
	client.SetReadDeadline(time.Now().Add(x.helloTimeout))
	first := make([]byte, 1)
	if _, err := io.ReadFull(client, first); err != nil {
		x.cut(ctx, rq, policy.ReasonNoClientHello, err.Error())
		return
	}
	client.pre = append(first, client.pre...)
	if first[0] != 0x16 {
		// Cleartext inside a CONNECT to a TLS rule would be decided as
		// https and then sent in cleartext to the TLS port: refuse it.
		x.cut(ctx, rq, policy.ReasonNotTLS, "an inspected tunnel carries TLS only")
		io.WriteString(client, "HTTP/1.1 400 Bad Request\r\nX-Egressd-Deny: not-tls\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
		return
	}
	cfg, err := x.mitmTLS(ctx, rq)
	if err != nil {
		x.cut(ctx, rq, policy.ReasonInspectionUnavailable, err.Error())
		return
	}
	tc := tls.Server(client, cfg)
	tc.SetDeadline(time.Now().Add(x.helloTimeout))
	if err := tc.Handshake(); err != nil {
		if !errors.Is(err, errSNIMismatch) { // logged by the SNI check
			x.cut(ctx, rq, policy.ReasonTLSHandshake, err.Error())
		}
		return
	}
	tc.SetDeadline(time.Time{})
	x.serveInner(tc, rq, func(w http.ResponseWriter, r *http.Request, isc *scanConn) {
		x.serveTunnelRequest(w, r, rq, isc)
	})
}

// serveInner serves the HTTP/1.1 requests on a terminated TLS connection
// with the limits of the proxy listener: the head bounded by
// limits.header_bytes (431 or 414 from the scanner, with X-Egressd-Deny),
// limits.request_header_timeout for each head, limits.idle_timeout
// between requests.
func (x *Proxy) serveInner(tc net.Conn, tun *request, h func(http.ResponseWriter, *http.Request, *scanConn)) {
	lim := x.Policy().Limits
	isc := x.newScanConn(tc, lim.HeaderBytes, tun)
	inner := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h(w, r, isc) }),
		ReadHeaderTimeout: lim.RequestHeaderTimeout,
		IdleTimeout:       lim.IdleTimeout,
		MaxHeaderBytes:    lim.HeaderBytes,
		ErrorLog:          x.errorLog,
		ConnContext: func(ctx context.Context, _ net.Conn) context.Context {
			return context.WithValue(ctx, keyConn, isc) // the scanner, not the listener's wrapper
		},
	}
	inner.Serve(newOneConnListener(isc))
}

// serveTunnelRequest runs one request of an inspected CONNECT tunnel
// through the request hygiene and into the proxy path, with the tunnel's
// state in its context.
func (x *Proxy) serveTunnelRequest(w http.ResponseWriter, r *http.Request, tun *request, isc *scanConn) {
	head, _ := isc.next()
	rq := &request{start: time.Now(), identity: tun.identity, source: tun.source, probe: tun.probe, method: r.Method, tunnel: tun, headBytes: head.size}
	rq.target = tun.target
	if head.bad != "" {
		x.refuse(w, r, rq, policy.ReasonBadRequest, head.bad)
		return
	}
	if !r.URL.IsAbs() {
		r.URL.Host = r.Host // checked against the tunnel's host by innerTarget
	}
	r.URL.Scheme = "https"
	if bd := x.limitBody(r, isc.Conn); bd != nil {
		defer bd.finish()
	}
	if upgradeOf(r) != "" {
		x.serveUpgrade(w, r, rq)
		return
	}
	x.gp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), keyDecision, rq)))
}

// mitmTLS returns the TLS config for the client side of an inspected
// tunnel; the handshake fails unless the SNI names the CONNECT host.
func (x *Proxy) mitmTLS(ctx context.Context, rq *request) (*tls.Config, error) {
	base, err := x.ca.ServerConfig(rq.target.Host())
	if err != nil {
		return nil, fmt.Errorf("issue certificate for %s: %w", rq.target.Host(), err)
	}
	cfg := base.Clone()
	cfg.NextProtos = []string{"http/1.1"}
	cfg.GetConfigForClient = func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		if !sniMatches(&rq.target, h.ServerName) {
			x.cut(ctx, rq, policy.ReasonSNIMismatch, fmt.Sprintf("SNI %q in a tunnel to %s", h.ServerName, rq.target.Host()))
			return nil, errSNIMismatch
		}
		return nil, nil
	}
	return cfg, nil
}

// sniMatches: a CONNECT to a name needs SNI equal to that name (compared
// as hosts are: case and a trailing dot do not matter); a CONNECT to an
// address needs no SNI or the address itself. Anything else is domain
// fronting.
func sniMatches(t *policy.Target, sni string) bool {
	if t.Addr.IsValid() {
		if sni == "" {
			return true
		}
		a, err := netip.ParseAddr(strings.Trim(sni, "[]"))
		return err == nil && a.Unmap() == t.Addr.Unmap()
	}
	if sni == "" {
		return false
	}
	name, addr, err := policy.NormalizeHost(sni)
	return err == nil && !addr.IsValid() && name == t.Name
}

// pipe copies both ways until both directions end, half-closing as each
// side finishes, and returns the byte counts (client→upstream, back). It
// closes both connections when neither carried a byte for idle (<= 0: no
// limit) and then reports idled.
func pipe(client, up net.Conn, idle time.Duration) (out, in int64, idled bool) {
	w := newIdleWatch(idle, func() { client.Close(); up.Close() })
	done := make(chan struct{})
	go func() {
		defer close(done)
		out, _ = relay(up, client, w)
		closeWrite(up)
	}()
	in, _ = relay(client, up, w)
	closeWrite(client)
	<-done
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
