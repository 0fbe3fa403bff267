package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/egressd/egressd/policy"
)

// Transparent mode serves clients that ignore proxy settings: the kernel
// walls redirect a sandbox's TCP 80 and 443 to these listeners, one per
// original port, so the port is known without SO_ORIGINAL_DST. The host
// comes from the Host header or the ClientHello's SNI — never from the
// address the client dialed, which the proxy does not trust or reuse: it
// resolves and checks the name like any other request.

// ServeTransparentHTTP answers plain HTTP redirected from port origPort:
// each origin-form request becomes the absolute-form request its Host
// header names and goes through the same checks as a proxy request.
func (x *Proxy) ServeTransparentHTTP(l net.Listener, origPort uint16) error {
	x.AddListener(l.Addr())
	return x.serveHTTP(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		x.serveOriginForm(w, r, "http", origPort, "")
	}))
}

// serveOriginForm rewrites an origin-form request into absolute form and
// hands it to the proxy path. sni, when set, must name the same host.
func (x *Proxy) serveOriginForm(w http.ResponseWriter, r *http.Request, scheme string, port uint16, sni string) {
	host, hport, err := policy.SplitHostPort(r.Host, port)
	switch {
	case r.Host == "":
		err = errors.New("no Host header: a transparent request must name its host")
	case err == nil && hport != port:
		err = fmt.Errorf("header Host %q names port %d on a connection to port %d", r.Host, hport, port)
	case err == nil && !strings.HasPrefix(r.RequestURI, "/"):
		err = fmt.Errorf("request target %.60q is not origin-form", r.RequestURI)
	}
	if err == nil && sni != "" {
		if name, addr, nerr := policy.NormalizeHost(host); nerr != nil || addr.IsValid() || name != sni {
			err = fmt.Errorf("header Host %q disagrees with the TLS SNI %q", r.Host, sni)
		}
	}
	if err != nil {
		rq := &request{start: time.Now(), method: r.Method}
		rq.identity, rq.source = x.identify(r)
		x.refuse(w, r, rq, policy.ReasonHostMismatch, err.Error())
		return
	}
	authority := net.JoinHostPort(strings.Trim(host, "[]"), strconv.Itoa(int(port)))
	r.RequestURI = scheme + "://" + authority + r.RequestURI
	r.URL.Scheme, r.URL.Host = scheme, authority
	r.Host = authority
	// the Host header was checked above against the original port and SNI
	x.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), keyTransparent, true)))
}

// ServeTransparentTLS answers TLS redirected from port origPort: the SNI
// names the host; a host-only rule splices after the usual checks, a rule
// that needs inspection terminates TLS with egressd's CA and serves the
// requests inside as absolute-form https requests.
func (x *Proxy) ServeTransparentTLS(l net.Listener, origPort uint16) error {
	x.AddListener(l.Addr())
	var backoff time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			x.acceptError(l.Addr().String(), err)
			// Out of descriptors and the like pass: wait and retry, as
			// net/http does, rather than end egressd.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		if !x.fds.admit(time.Now()) { // a TLS client cannot read a 503: close
			x.m.shed.Inc()
			c.Close()
			continue
		}
		go x.transparentTLS(c, origPort)
	}
}

// transparentTLS is the transparent front of the tunnel pipeline: the
// identity from the source address, its quarantine and connection slot,
// the ClientHello read to learn the host (SNI), and the decision; the
// tunnel then runs as a CONNECT's does (runTunnel).
func (x *Proxy) transparentTLS(c net.Conn, port uint16) {
	rq := &request{start: time.Now(), method: "TLS"}
	src, _ := netip.ParseAddrPort(c.RemoteAddr().String())
	rq.identity = x.policyFor(c.RemoteAddr().String(), c.LocalAddr()).SourceIdentity(src.Addr())
	ctx := context.Background()
	if x.ids.quarantined(rq.identity) {
		x.logDecisionReason(ctx, rq, http.StatusForbidden, policy.ReasonQuarantine, "", 0, 0)
		c.Close()
		return
	}
	release, ok := x.ids.acquire(rq.identity, x.Policy().Limits.ConnsPerIdentity)
	if !ok {
		x.logDecisionReason(ctx, rq, http.StatusTooManyRequests, policy.ReasonConnLimit, "", 0, 0)
		c.Close()
		return
	}
	rq.release = release
	tn := &tunnel{rq: rq, client: c, raw: c, transparent: true}
	if !x.decideTransparent(ctx, tn, port) {
		c.Close()
		release()
		return
	}
	x.openTunnel(tn)
	x.runTunnel(ctx, tn)
}

// decideTransparent reads the ClientHello of a transparent TLS
// connection and decides the host its SNI names, as a CONNECT to it:
// false when refused (logged).
func (x *Proxy) decideTransparent(ctx context.Context, tn *tunnel, port uint16) bool {
	rq := tn.rq
	hello, raw, err := peekClientHello(tn.raw, x.helloTimeout)
	if err != nil {
		reason := policy.ReasonNoClientHello
		if errors.Is(err, ErrNotTLS) {
			reason = policy.ReasonNotTLS
		}
		x.cut(ctx, rq, reason, err.Error())
		return false
	}
	tn.hello, tn.pre = hello, raw
	if hello.ServerName == "" {
		x.logDecisionReason(ctx, rq, 0, policy.ReasonNoSNI, "transparent TLS needs SNI to name the host", 0, 0)
		return false
	}
	t, err := policy.ParseAuthority(net.JoinHostPort(hello.ServerName, strconv.Itoa(int(port))))
	if err != nil {
		x.logDecisionReason(ctx, rq, 0, policy.ReasonBadTarget, err.Error(), 0, 0)
		return false
	}
	rq.target = t
	p := x.policyFor(tn.raw.RemoteAddr().String(), tn.raw.LocalAddr())
	rq.pol = p
	rq.d = p.DecideTargetAs(&t, rq.identity)
	x.m.decisionLatency.Observe(time.Since(rq.start).Seconds())
	if rq.honey = x.honeyInName(rq, "sni"); rq.honey != nil {
		rq.d.Allow = false
		x.logDecisionReason(ctx, rq, http.StatusForbidden, policy.ReasonHoneytoken, honeyDetail(rq.honey), 0, 0)
		return false
	}
	if !rq.d.Allow {
		x.logDecisionReason(ctx, rq, http.StatusForbidden, rq.d.Reason, "transparent TLS", 0, 0)
		return false
	}
	if reason, detail := x.refusal(p, tn.raw.RemoteAddr().String(), tn.raw.LocalAddr()); reason.Denies() {
		rq.d.Allow = false
		x.logDecisionReason(ctx, rq, reason.Status(), reason, detail, 0, 0)
		return false
	}
	if rq.d.Inspect && x.ca == nil {
		rq.d.Allow = false
		x.logDecisionReason(ctx, rq, http.StatusForbidden, policy.ReasonInspectionUnavailable, "", 0, 0)
		return false
	}
	return true
}

// oneConnListener serves exactly one connection, then reports closed once
// that connection is closed.
type oneConnListener struct {
	c      net.Conn
	once   sync.Once
	closed chan struct{}
}

func newOneConnListener(c net.Conn) *oneConnListener {
	l := &oneConnListener{closed: make(chan struct{})}
	l.c = &notifyConn{Conn: c, done: l.closed}
	return l
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	var c net.Conn
	l.once.Do(func() { c = l.c })
	if c != nil {
		return c, nil
	}
	<-l.closed
	return nil, net.ErrClosed
}

func (l *oneConnListener) Close() error   { return nil }
func (l *oneConnListener) Addr() net.Addr { return l.c.LocalAddr() }

type notifyConn struct {
	net.Conn
	once sync.Once
	done chan struct{}
}

func (c *notifyConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { close(c.done) })
	return err
}

// track registers a server for Shutdown.
func (x *Proxy) track(srv *http.Server) {
	x.mu.Lock()
	x.servers = append(x.servers, srv)
	x.mu.Unlock()
}
