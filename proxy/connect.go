package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/egressd/egressd/policy"
)

// HelloDeadlineHeader, on a CONNECT, asks for a shorter ClientHello
// deadline for that one tunnel (a Go duration, at least MinHelloDeadline,
// never longer than the proxy's own): a client can only shorten its own
// wait. egressd's 200 then carries the deadline it applies in the same
// header, so the self-test's silent-tunnel probe observes the deadline
// hold in a fraction of a second instead of waiting policy.DefaultHelloTimeout.
const HelloDeadlineHeader = "X-Egressd-Hello-Deadline"

// DialDeadlineHeader, on a CONNECT, bounds how long egressd resolves and
// dials the target before it answers (a Go duration, at least
// MinHelloDeadline; never longer than egressd's own budgets): a client can
// only shorten its own wait. A resolver or upstream that does not answer
// in time gets the CONNECT its 504 upstream-timeout then, so the
// self-test's probes learn of an outage within their own timeout instead
// of giving up with no answer.
const DialDeadlineHeader = "X-Egressd-Dial-Deadline"

// maxDialDeadline caps what DialDeadlineHeader can ask for (the dial and
// resolver budgets apply anyway).
const maxDialDeadline = time.Minute

// MinHelloDeadline is the shortest deadline HelloDeadlineHeader or
// DialDeadlineHeader may ask for.
const MinHelloDeadline = 50 * time.Millisecond

// shorterDeadline is the deadline of a tunnel whose CONNECT carried asked
// (HelloDeadlineHeader or DialDeadlineHeader; "" if none) under the
// proxy's limit: the shorter of the two, and whether the client asked.
func shorterDeadline(asked string, limit time.Duration) (time.Duration, bool) {
	if asked == "" || len(asked) > 32 {
		return limit, false
	}
	d, err := time.ParseDuration(asked)
	if err != nil || d >= limit {
		return limit, false
	}
	return max(d, MinHelloDeadline), true
}

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
	p := x.policyFor(r.RemoteAddr, localAddr(r))
	rq.pol = p
	rq.d = p.DecideTargetAs(&t, rq.identity)
	x.m.decisionLatency.Observe(time.Since(rq.start).Seconds())
	if h := x.honeyInName(rq, "connect host"); h != nil {
		writeResponse(w, x.denyHoneytoken(r, rq, h))
		return
	}
	if !rq.d.Allow {
		writeRefusal(w, x.denyDecision(r, rq))
		return
	}
	if reason, detail := x.refusal(p, r.RemoteAddr, localAddr(r)); reason.Denies() {
		x.writeDeny(w, r, rq, reason, rq.d.RuleName(), detail)
		return
	}
	dctx := r.Context()
	if d, asked := shorterDeadline(r.Header.Get(DialDeadlineHeader), maxDialDeadline); asked {
		var cancel context.CancelFunc
		dctx, cancel = context.WithTimeout(dctx, d)
		defer cancel()
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
		if _, err := x.dialer.check(dctx, p, &rq.d, t.Port); err != nil {
			x.writeDialError(w, r, rq, err)
			return
		}
	} else {
		// Dial first, so that a failure gets its status on the CONNECT.
		if up, rq.upAddr, err = x.dialer.dial(dctx, p, &rq.d, t.Port); err != nil {
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
	tn := &tunnel{rq: rq, client: sc, raw: sc.Conn, up: up}
	// Bytes the client sent right after the CONNECT head (a ClientHello in
	// the same write) are in net/http's buffer, not on the socket.
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n)
		tn.pre = slices.Clone(b)
	}
	sc.SetDeadline(time.Time{}) // net/http's deadlines end with the hijack
	x.openTunnel(tn)
	established := "HTTP/1.1 200 Connection established\r\n\r\n"
	var asked bool
	if rq.hello, asked = shorterDeadline(r.Header.Get(HelloDeadlineHeader), x.helloTimeout); asked {
		established = "HTTP/1.1 200 Connection established\r\n" + HelloDeadlineHeader + ": " + rq.hello.String() + "\r\n\r\n"
	}
	ctx := context.WithoutCancel(r.Context()) // net/http cancels r's context when ServeHTTP returns
	if _, err := io.WriteString(sc, established); err != nil {
		x.unrun(ctx, tn) // a cut from openTunnel, or a client gone
		return
	}
	if !x.admitHello(ctx, tn) {
		x.closeTunnel(tn)
		return
	}
	go x.runTunnel(ctx, tn)
}

// writeDialError answers a CONNECT whose target failed the address checks
// or the dial.
func (x *Proxy) writeDialError(w http.ResponseWriter, r *http.Request, rq *request, err error) {
	reason, detail := dialRefusal(rq, err)
	x.writeDeny(w, r, rq, reason, rq.d.RuleName(), detail)
}

// writeDeny answers a refusal through the ResponseWriter and logs it.
func (x *Proxy) writeDeny(w http.ResponseWriter, r *http.Request, rq *request, reason policy.Reason, rule, detail string) {
	writeRefusal(w, x.deny(r, rq, reason, rule, detail))
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

// serveTunnelRequest runs one request of an inspected CONNECT tunnel
// through the request hygiene and into the proxy path, with the tunnel's
// state in its context.
func (x *Proxy) serveTunnelRequest(w http.ResponseWriter, r *http.Request, tun *request, isc *scanConn) {
	head, _ := isc.next()
	rq := &request{start: time.Now(), identity: tun.identity, source: tun.source, probe: tun.probe, method: r.Method, tunnel: tun, headBytes: head.size}
	rq.forged = forgedProbe(r, rq.probe)
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
