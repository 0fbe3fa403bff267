package proxy

import (
	"cmp"
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
	"sync"
	"sync/atomic"
	"time"

	"github.com/egressd/egressd/policy"
)

// The tunnel pipeline, one for both fronts that open tunnels: a CONNECT
// (serveConnect, after its 200) and a transparent TLS connection
// (transparentTLS, after the SNI decided it). Each front decides the
// target its own way; from openTunnel on, every step is here and the same
// for both: tracking (a quarantine or reload can close the tunnel),
// the ClientHello checks (not TLS, no hello, SNI, ECH), the choice to
// splice or inspect, the deadlines of each state, byte accounting and the
// closing decision line. A check added to a tunnel is added here, once.

// extECH is the TLS encrypted_client_hello extension (RFC 9849).
const extECH = 0xfe0d

var errSNIMismatch = errors.New("TLS SNI does not name the CONNECT host")

// tunnel is one allowed tunnel from openTunnel to closeTunnel.
type tunnel struct {
	rq *request
	// client is the connection the tracker holds and closeTunnel closes
	// (a CONNECT's scanConn, whose close gives back its listener slot);
	// raw is the socket under it, which the relay reads directly.
	client, raw net.Conn
	// pre are client bytes read before the tunnel ran and not yet
	// forwarded: sent with the CONNECT head, or the ClientHello a
	// transparent front peeked.
	pre []byte
	// hello is the ClientHello when the front already read it; nil: the
	// pipeline reads it (a TLS rule's CONNECT).
	hello *tls.ClientHelloInfo
	// up is the upstream a front dialed before the tunnel opened (a
	// spliced CONNECT, so a failure gets its status on the CONNECT); nil:
	// the pipeline dials.
	up net.Conn
	// transparent marks a tunnel opened by the transparent TLS front:
	// its inner requests are origin-form and its end is logged as
	// "transparent tunnel".
	transparent bool
	// admitted: admitHello ran (and passed).
	admitted bool

	release func() // the identity's connection slot, given back on close
	// recordClose writes the tunnel's close record (tunnelrec.go), last.
	recordClose func()
	ids         []string
	once        sync.Once
	// tracked is what the tracker holds: closing it closes client and,
	// once splice set it, runs cut (closes the upstream, or the loop's
	// sockets); stopped tells a splice that had not set cut yet.
	tracked *trackedConn
	cut     atomic.Pointer[func()]
	stopped atomic.Bool
}

// trackedConn is a tunnel as the tracker holds it: a quarantine, a
// reload's re-decision and the drain close it.
type trackedConn struct {
	net.Conn // the tunnel's client connection
	tn       *tunnel
}

func (c *trackedConn) Close() error {
	c.tn.stopped.Store(true)
	err := c.Conn.Close()
	if cut := c.tn.cut.Load(); cut != nil {
		(*cut)()
	}
	return err
}

// onCut makes f what a close by the tracker runs, and reports false
// (having run f) when the tracker closed the tunnel already. Paired with
// Close's store-then-load, f runs at least once for any close: a relay
// never waits on an upstream the tracker meant to close. f may run twice.
func (tn *tunnel) onCut(f func()) bool {
	tn.cut.Store(&f)
	if tn.stopped.Load() {
		f()
		return false
	}
	return true
}

// openTunnel is where every tunnel opens: it is tracked under each of
// its identities (a quarantine or a reload finds and closes it there),
// counted in egressd_open_tunnels, and takes over the identity's
// connection slot from the request that opened it until closeTunnel.
func (x *Proxy) openTunnel(tn *tunnel) {
	rq := tn.rq
	tn.release, rq.release = rq.release, nil
	// The tunnel outlives its CONNECT request and keeps nothing of
	// net/http's: the ResponseWriter holds the connection's buffers
	// (8 KiB per idle tunnel when it was kept).
	rq.w = nil
	tn.ids = rq.names()
	x.m.tunnels.Inc()
	x.mem.opened()
	tn.tracked = &trackedConn{Conn: tn.client, tn: tn}
	tn.recordClose = x.tunnelOpened(context.Background(), rq)
	x.trackTunnel(tn.ids, tn.tracked, rq)
	if tn.up != nil || rq.d.Inspect {
		rq.pol = nil // see splice
	}
}

// unrun ends a tunnel that never reached its relay (its client gone, or
// cut as it opened) with its decision line, then closes it.
func (x *Proxy) unrun(ctx context.Context, tn *tunnel) {
	if !tn.rq.d.Inspect { // an inspected tunnel's cut is logged by cutTunnel
		x.spliced(ctx, tn, 0, 0, false, 0)
	}
	x.closeTunnel(tn)
}

// closeTunnel is where every tunnel closes, once: both connections, the
// tracker's entries, the gauge, the connection slot, and the memory a
// closed wave of tunnels held (memoryReleaser).
func (x *Proxy) closeTunnel(tn *tunnel) {
	tn.once.Do(func() {
		tn.client.Close()
		if tn.up != nil {
			tn.up.Close()
		}
		for _, id := range tn.ids {
			x.ids.removeTunnel(id, tn.tracked)
		}
		x.m.tunnels.Dec()
		if tn.release != nil {
			tn.release()
		}
		x.mem.closed()
		if tn.recordClose != nil { // after the tunnel's own last line
			tn.recordClose()
		}
	})
}

// runTunnel runs an open tunnel to its end: splice a host-only rule after
// the ClientHello checks, or inspect (terminate TLS with egressd's CA and
// serve the requests inside). The CONNECT front runs it on a fresh
// goroutine: a tunnel can stay open for hours, and net/http's goroutine,
// with its deep stack and buffers, ends. A transparent connection's
// goroutine is its tunnel's from the start.
func (x *Proxy) runTunnel(ctx context.Context, tn *tunnel) {
	if tn.rq.d.Inspect {
		x.inspect(ctx, tn)
	} else if x.admitHello(ctx, tn) && x.splice(ctx, tn) {
		return // a loop relays it and closes it at its end
	}
	x.closeTunnel(tn)
}

// admitHello runs a spliced tunnel's ClientHello checks, once: on a TLS
// rule's tunnel and on any whose front read a hello. It reports false
// when it cut the tunnel (logged). A front may call it before handing the
// tunnel to runTunnel's goroutine: the CONNECT front does, on net/http's
// goroutine, whose stack the decision and the dial have grown already —
// on the tunnel's fresh goroutine crypto/tls's parser grew (and copied)
// a new stack several times per tunnel.
func (x *Proxy) admitHello(ctx context.Context, tn *tunnel) bool {
	if tn.admitted || tn.rq.d.Inspect || (tn.hello == nil && !tn.rq.d.Rule.TLS) {
		return true
	}
	tn.admitted = true
	if reason, detail := x.tunnelHello(tn); reason != policy.ReasonAllowed {
		x.cut(ctx, tn.rq, reason, detail)
		return false
	}
	return true
}

// cut ends a tunnel egressd refuses after the 200: it is a denial, logged,
// counted and hash-chained as one, with its reason. A tunnel is cut once:
// after a cut from the tracker (cutTunnel) its own checks fail on the
// closed socket, and the line is the tracker's cut, logged here for a
// spliced tunnel (its relay, which would log it, never runs) and by
// cutTunnel for an inspected one.
func (x *Proxy) cut(ctx context.Context, rq *request, reason policy.Reason, detail string) {
	if !rq.cutBy.CompareAndSwap(nil, &cutInfo{reason, detail}) {
		if rq.d.Inspect {
			return
		}
		ci := rq.cutBy.Load()
		reason, detail = ci.reason, ci.detail
	}
	rq.d.Allow = false
	x.logDecisionReason(ctx, rq, 0, reason, detail, 0, 0)
}

// splice runs a host-only tunnel whose ClientHello passed admitHello:
// dial unless the front did, replay the bytes already read upstream and
// copy both ways: in a loop while the tunnel is quiet (loop_linux.go),
// and by the goroutine relay (relay: read and write with a buffer held
// only while data flows, splice while it streams) otherwise. looped
// reports a tunnel a loop took: it logs and closes the tunnel at its end.
func (x *Proxy) splice(ctx context.Context, tn *tunnel) (looped bool) {
	rq := tn.rq
	if x.beforeRelay != nil {
		x.beforeRelay()
	}
	if tn.up == nil {
		if tn.stopped.Load() { // cut as it opened: no dial for it
			x.spliced(ctx, tn, 0, 0, false, 0)
			return false
		}
		decidedBy := cmp.Or(rq.pol, x.Policy())
		dctx := context.WithValue(ctx, keyDecision, rq) // the dial's name budget is per identity
		up, upAddr, err := x.dialer.dial(dctx, decidedBy, &rq.d, rq.target.Port)
		if err != nil {
			reason, detail := dialRefusal(rq, err)
			rq.d.Allow = false
			x.logDecisionReason(ctx, rq, reason.Status(), reason, detail, 0, 0)
			return false
		}
		tn.up = up
		x.ids.setUpAddr(rq, upAddr)
		// A reload between the decision and the dial re-decided the
		// tunnel without its address: check it under the policy in
		// force now (the reload wrote the policy before it read the
		// address; here the address is written before the policy is).
		if p := x.Policy(); decidedBy != p && decidedBy != x.cand.Load() {
			x.redecide(p, tn.tracked, rq)
		}
	}
	// An open tunnel does not keep the policy that decided it: a reload
	// retires that policy (and its host lists) while tunnels stay open.
	rq.pol = nil
	idle := x.Policy().Limits.IdleTimeout
	// From here a close by the tracker (a quarantine, a reload's
	// re-decision, the drain) closes the upstream too: closing the
	// client alone would leave the relay waiting on a silent upstream.
	up := tn.up
	closeUp := func() { up.Close() }
	if !tn.onCut(closeUp) {
		x.spliced(ctx, tn, 0, 0, false, idle)
		return false
	}
	if len(tn.pre) > 0 {
		if _, err := tn.up.Write(tn.pre); err != nil {
			x.spliced(ctx, tn, 0, 0, false, idle) // a cut, or the upstream gone
			return false
		}
	}
	sent := int64(len(tn.pre))
	tn.pre, tn.hello = nil, nil // an idle tunnel keeps nothing it does not need
	if p := x.loops.pair(idle, func(out, in int64, idled bool) {
		x.spliced(ctx, tn, out+sent, in, idled, idle)
		x.closeTunnel(tn)
	}, x.m.streamed.Inc); p != nil {
		// The loop's cut is in place before the sockets move: a close
		// from the tracker while they do is not lost (loopPair.cut).
		if tn.onCut(p.cut) && p.adopt(tn.raw, tn.up) {
			return true
		}
		if !tn.onCut(closeUp) { // adopt failed, maybe on a closed client
			x.spliced(ctx, tn, sent, 0, false, idle)
			return false
		}
	}
	out, in, idled := pipe(tn.raw, tn.up, idle) // the raw socket: relay reads it directly
	x.spliced(ctx, tn, out+sent, in, idled, idle)
	return false
}

// spliced counts and logs the end of a spliced tunnel.
func (x *Proxy) spliced(ctx context.Context, tn *tunnel, out, in int64, idled bool, idle time.Duration) {
	rq := tn.rq
	x.m.bytesOut.Add(float64(out))
	x.m.bytesIn.Add(float64(in))
	if ci := rq.cutBy.Load(); ci != nil {
		rq.d.Allow = false
		x.logDecisionReason(ctx, rq, 0, ci.reason, ci.detail, in, out)
		return
	}
	reason := policy.ReasonTunnel
	if tn.transparent {
		reason = policy.ReasonTransparentTunnel
	}
	x.logDecisionReason(ctx, rq, http.StatusOK, reason, idleDetail(idled, idle), in, out)
}

// tunnelHello reads the ClientHello unless the front did (within
// policy.DefaultHelloTimeout) and decides it: the reason to cut the tunnel, or
// ReasonAllowed.
func (x *Proxy) tunnelHello(tn *tunnel) (policy.Reason, string) {
	if tn.hello == nil {
		client := &replayConn{Conn: tn.raw, pre: tn.pre}
		hello, raw, err := peekClientHello(client, x.helloDeadline(tn.rq))
		if err != nil {
			return x.checkHello(tn.rq, nil, err)
		}
		tn.hello, tn.pre = hello, append(raw, client.pre...) // the hello, and anything after it already read
	}
	return x.checkHello(tn.rq, tn.hello, nil)
}

// helloDeadline is how long rq's tunnel waits for a ClientHello (and an
// inspected handshake): the proxy's, or the shorter one its CONNECT asked
// for (HelloDeadlineHeader).
func (x *Proxy) helloDeadline(rq *request) time.Duration { return cmp.Or(rq.hello, x.helloTimeout) }

// checkHello decides a tunnel's ClientHello: the reason to cut it, or
// ReasonAllowed to let it through.
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
func (x *Proxy) inspect(ctx context.Context, tn *tunnel) {
	rq := tn.rq
	client := &replayConn{Conn: tn.raw, pre: tn.pre}
	tn.pre = nil
	if tn.hello == nil { // a transparent front read it, so it is TLS
		client.SetReadDeadline(time.Now().Add(x.helloDeadline(rq)))
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
	}
	tn.hello = nil
	cfg, err := x.mitmTLS(ctx, rq)
	if err != nil {
		x.cut(ctx, rq, policy.ReasonInspectionUnavailable, err.Error())
		return
	}
	tc := tls.Server(client, cfg)
	tc.SetDeadline(time.Now().Add(x.helloDeadline(rq)))
	if err := tc.Handshake(); err != nil {
		if !errors.Is(err, errSNIMismatch) { // logged by the SNI check
			x.cut(ctx, rq, policy.ReasonTLSHandshake, err.Error())
		}
		return
	}
	tc.SetDeadline(time.Time{})
	if tn.transparent {
		// Its inner requests enter through the proxy's front (origin-form
		// made absolute, the Host checked against the SNI), which logs
		// each of them; this line records the tunnel.
		x.logDecision(ctx, rq, http.StatusOK, "transparent TLS inspected", 0, 0)
		port, name := rq.target.Port, rq.target.Name
		x.serveInner(tc, nil, func(w http.ResponseWriter, r *http.Request, _ *scanConn) {
			x.serveOriginForm(w, r, "https", port, name)
		})
		return
	}
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
	inner := x.newHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h(w, r, isc) }),
		func(ctx context.Context, _ net.Conn) context.Context {
			return context.WithValue(ctx, keyConn, isc) // the scanner, not the listener's wrapper
		})
	inner.Serve(newOneConnListener(isc))
}

// mitmTLS returns the TLS config for the client side of an inspected
// tunnel; the handshake fails unless the SNI names the tunnel's host.
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

// sniMatches: a tunnel to a name needs SNI equal to that name (compared
// as hosts are: case and a trailing dot do not matter); a tunnel to an
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
	return pipeFrom(client, up, idle, halfPipe{}, halfPipe{})
}

// halfPipe is where a direction of a tunnel a loop handed back stands:
// bytes read but not yet written (first out), or ended already.
type halfPipe struct {
	pre  []byte
	done bool
}

// pipeFrom is pipe for a tunnel a loop relayed until it streamed; out
// and in count the pre bytes written too.
func pipeFrom(client, up net.Conn, idle time.Duration, toUp, toClient halfPipe) (out, in int64, idled bool) {
	w := newIdleWatch(idle, func() { client.Close(); up.Close() })
	half := func(dst, src net.Conn, h halfPipe) int64 {
		var n int64
		if len(h.pre) > 0 {
			m, err := dst.Write(h.pre)
			n += int64(m)
			h.done = h.done || err != nil
		}
		if !h.done {
			m, _ := relay(dst, src, w)
			n += m
		}
		closeWrite(dst)
		return n
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		out = half(up, client, toUp)
	}()
	in = half(client, up, toClient)
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
