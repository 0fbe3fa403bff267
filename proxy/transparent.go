package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"

	"net"
	"net/http"
	"net/netip"
	"slices"
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

func (x *Proxy) transparentTLS(c net.Conn, port uint16) {
	defer c.Close()
	rq := &request{start: time.Now(), method: "TLS"}
	src, _ := netip.ParseAddrPort(c.RemoteAddr().String())
	rq.identity = x.sourceIdentity(src.Addr())
	ctx := context.Background()
	if x.ids.quarantined(rq.identity) {
		x.logDecisionReason(ctx, rq, http.StatusForbidden, policy.ReasonQuarantine, "", 0, 0)
		return
	}
	release, ok := x.ids.acquire(rq.identity, x.Policy().Limits.ConnsPerIdentity)
	if !ok {
		x.logDecisionReason(ctx, rq, http.StatusTooManyRequests, policy.ReasonConnLimit, "", 0, 0)
		return
	}
	defer release()
	hello, raw, err := peekClientHello(c, x.helloTimeout)
	if err != nil {
		reason := policy.ReasonNoClientHello
		if errors.Is(err, ErrNotTLS) {
			reason = policy.ReasonNotTLS
		}
		x.cut(ctx, rq, reason, err.Error())
		return
	}
	if hello.ServerName == "" {
		x.logDecisionReason(ctx, rq, 0, policy.ReasonNoSNI, "transparent TLS needs SNI to name the host", 0, 0)
		return
	}
	t, err := policy.ParseAuthority(net.JoinHostPort(hello.ServerName, strconv.Itoa(int(port))))
	if err != nil {
		x.logDecisionReason(ctx, rq, 0, policy.ReasonBadTarget, err.Error(), 0, 0)
		return
	}
	rq.target = t
	p := x.policyFor(c.RemoteAddr().String())
	rq.d, rq.pol = p.DecideTargetAs(&t, rq.identity), p
	x.m.decisionLatency.Observe(time.Since(rq.start).Seconds())
	if rq.honey = x.honeyInName(rq, "sni"); rq.honey != nil {
		rq.d.Allow = false
		x.logDecisionReason(ctx, rq, http.StatusForbidden, policy.ReasonHoneytoken, honeyDetail(rq.honey), 0, 0)
		return
	}
	if !rq.d.Allow {
		x.logDecisionReason(ctx, rq, http.StatusForbidden, rq.d.Reason, "transparent TLS", 0, 0)
		return
	}
	if reason, detail := x.refusal(p, c.RemoteAddr().String()); reason.Denies() {
		rq.d.Allow = false
		x.logDecisionReason(ctx, rq, reason.Status(), reason, detail, 0, 0)
		return
	}
	client := &replayConn{Conn: c, pre: raw}
	x.ids.addTunnel(rq.identity, c, rq)
	x.m.tunnels.Inc()
	closed := x.tunnelOpened(ctx, rq)
	defer func() { x.ids.removeTunnel(rq.identity, c); x.m.tunnels.Dec(); closed() }()
	if !rq.d.Inspect {
		if slices.Contains(hello.Extensions, extECH) {
			x.cut(ctx, rq, policy.ReasonECH, policy.ReasonECH.Help())
			return
		}
		ctx := context.WithValue(ctx, keyDecision, rq) // the dial's name budget is per identity
		up, upAddr, err := x.dialer.dial(ctx, p, &rq.d, t.Port)
		if err != nil {
			reason := reasonFor(err)
			rq.d.Allow = false
			x.logDecisionReason(ctx, rq, reason.Status(), reason, err.Error(), 0, 0)
			return
		}
		rq.upAddr = upAddr
		defer up.Close()
		idle := p.Limits.IdleTimeout
		out, in, idled := pipe(client, up, idle)
		if ci := rq.cutBy.Load(); ci != nil {
			rq.d.Allow = false
			x.logDecisionReason(ctx, rq, 0, ci.reason, ci.detail, in, out)
			return
		}
		x.logDecisionReason(ctx, rq, http.StatusOK, policy.ReasonTransparentTunnel, idleDetail(idled, idle), in, out)
		return
	}
	if x.ca == nil {
		rq.d.Allow = false
		x.logDecisionReason(ctx, rq, http.StatusForbidden, policy.ReasonInspectionUnavailable, "", 0, 0)
		return
	}
	cfg, err := x.ca.ServerConfig(t.Host())
	if err != nil {
		rq.d.Allow = false
		x.logDecisionReason(ctx, rq, http.StatusBadGateway, policy.ReasonInspectionUnavailable, err.Error(), 0, 0)
		return
	}
	tc := tls.Server(client, cfg)
	tc.SetDeadline(time.Now().Add(x.helloTimeout))
	if err := tc.Handshake(); err != nil {
		x.cut(ctx, rq, policy.ReasonTLSHandshake, err.Error())
		return
	}
	tc.SetDeadline(time.Time{})
	x.logDecision(ctx, rq, http.StatusOK, "transparent TLS inspected", 0, 0)
	x.serveInner(tc, nil, func(w http.ResponseWriter, r *http.Request, _ *scanConn) {
		x.serveOriginForm(w, r, "https", port, t.Name)
	})
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
