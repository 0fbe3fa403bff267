package proxy

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"github.com/elazarl/goproxy"

	"github.com/egressd/egressd/event"
	"github.com/egressd/egressd/policy"
)

// onRequest decides a plain absolute-form request, or a request inside an
// inspected tunnel (its state's tunnel field holds the CONNECT's).
func (x *Proxy) onRequest(r *http.Request, ctx *goproxy.ProxyCtx) (*http.Request, *http.Response) {
	p := x.policyFor(r.RemoteAddr, localAddr(r))
	rq, _ := r.Context().Value(keyDecision).(*request)
	if rq == nil { // not through ServeHTTP: refuse rather than guess
		rq = &request{start: time.Now(), method: r.Method}
		return r, x.deny(r, rq, policy.ReasonInternal, "", "request without proxy state")
	}
	if tun := rq.tunnel; tun != nil {
		if id, ok := x.quarantined(rq); ok {
			return r, x.deny(r, rq, policy.ReasonQuarantine, "", "identity "+id+" is quarantined")
		}
		t, err := innerTarget(tun, r)
		if err != nil {
			return r, x.deny(r, rq, policy.ReasonHostMismatch, "", err.Error())
		}
		rq.target = t
	} else {
		t, err := policy.ParseURL(r.RequestURI)
		if err != nil {
			return r, x.deny(r, rq, policy.ReasonBadTarget, "", err.Error())
		}
		rq.target = t
	}
	rq.path = rq.target.Path
	for _, h := range methodOverrideHeaders {
		// A server that honours an override would run a method the
		// classifier never saw: refuse rather than guess.
		if v := r.Header.Get(h); v != "" && !strings.EqualFold(v, r.Method) {
			return r, x.deny(r, rq, policy.ReasonMethod, "", fmt.Sprintf("%s: %.20s overrides %s", h, v, r.Method))
		}
	}
	rq.pol = p
	rq.d = p.DecideRequestAs(&rq.target, rq.identity, r.Method, r.Header.Get("Content-Type"), r.ContentLength)
	x.m.decisionLatency.Observe(time.Since(rq.start).Seconds())
	if h := x.honeyInRequest(r, rq); h != nil {
		return r, x.denyHoneytoken(r, rq, h)
	}
	if isH2C(r) && !rq.d.HighRisk {
		// Never allowed, whatever the rule decides: refused as such, so
		// the self-test can probe it under any inspected rule.
		return r, x.deny(r, rq, policy.ReasonUpgrade, rq.d.RuleName(), "upgrade refused: h2c is never allowed")
	}
	if !rq.d.Allow {
		return r, x.denyDecision(r, rq)
	}
	if upgradeOf(r) != "" {
		// A protocol switch turns the request into a channel no later
		// check sees: refused unless the rule allows WebSocket and
		// serveUpgrade relays it (never goproxy); logged either way.
		why := upgradeRefusal(r, &rq.d)
		if why == "" && !rq.relayUpgrade {
			why = "a protocol switch is relayed only inside an inspected (https) tunnel"
		}
		if why != "" {
			return r, x.deny(r, rq, policy.ReasonUpgrade, rq.d.RuleName(), "upgrade refused: "+why)
		}
		rq.ws = true
	}
	if reason, detail := x.refusal(p, r.RemoteAddr, localAddr(r)); reason.Denies() {
		return r, x.deny(r, rq, reason, rq.d.RuleName(), detail)
	}
	if resp := x.checkShape(r, rq, p); resp != nil {
		return r, resp
	}
	if resp := x.injectCredential(r, rq, p); resp != nil {
		return r, resp
	}
	if rq.ws {
		return r, nil // serveUpgrade sends it
	}
	ctx.RoundTripper = goproxy.RoundTripperFunc(x.roundTrip)
	return r, nil
}

// unreadableCoding returns the request's Content-Encoding when it is one a
// read body check cannot read ("" for none, identity or gzip, which
// CheckedBody inflates).
func unreadableCoding(h http.Header) string {
	vs := h.Values("Content-Encoding")
	switch {
	case len(vs) == 0:
		return ""
	case len(vs) == 1:
		switch strings.ToLower(strings.TrimSpace(vs[0])) {
		case "", "identity", "gzip", "x-gzip":
			return ""
		}
	}
	return strings.Join(vs, ", ")
}

// upgradeOf returns the protocol a request asks to switch to (Upgrade, or
// an HTTP2-Settings h2c attempt), or "".
func upgradeOf(r *http.Request) string {
	if v := r.Header.Get("Upgrade"); v != "" {
		return v
	}
	for _, v := range r.Header.Values("Connection") {
		for tok := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "upgrade") {
				return "(Connection: upgrade)"
			}
		}
	}
	return ""
}

// methodOverrideHeaders are headers some frameworks read as the real method.
var methodOverrideHeaders = []string{"X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override"}

// innerTarget builds the target of a request inside an inspected tunnel and
// checks that its Host names the tunnel's host and port: a request may not
// use an allowed tunnel to reach another virtual host.
func innerTarget(tun *request, r *http.Request) (policy.Target, error) {
	t := tun.target
	t.Scheme = "https"
	uri := r.RequestURI
	hostHdr := r.Host
	// Absolute-form only when the target does not start with '/': an
	// origin-form target may carry "://" in its query (?u=https://…).
	if !strings.HasPrefix(uri, "/") && strings.Contains(uri, "://") {
		u, err := policy.ParseURL(uri)
		if err != nil {
			return t, err
		}
		uri = u.Path
		if u.Query != "" {
			uri += "?" + u.Query
		}
		hostHdr = u.Host()
		if u.Port != t.Port {
			return t, fmt.Errorf("request names port %d inside a tunnel to port %d", u.Port, t.Port)
		}
	}
	if !strings.HasPrefix(uri, "/") {
		return t, fmt.Errorf("request target %.60q is not a path", uri)
	}
	h, port, err := policy.SplitHostPort(hostHdr, t.Port)
	if err != nil {
		return t, err
	}
	name, addr, err := policy.NormalizeHost(h)
	if err != nil {
		return t, err
	}
	if port != t.Port || name != t.Name || addr != t.Addr {
		return t, fmt.Errorf("header Host %q disagrees with the tunnel's %s:%d", hostHdr, t.Host(), t.Port)
	}
	t.Path, t.Query, _ = strings.Cut(uri, "?")
	return t, nil
}

// checkShape enforces what the policy computed beyond the decision: the
// header budget (a mirror rule forwards only its ecosystem's headers), and
// the body of a mirror rule or an opted-in read-only POST.
func (x *Proxy) checkShape(r *http.Request, rq *request, p *policy.Policy) *http.Response {
	drop, ok, why := p.CheckHead(&rq.d, r.Header)
	if !ok {
		return x.deny(r, rq, policy.ReasonHeaderBudget, rq.d.RuleName(), why)
	}
	for _, h := range drop {
		r.Header.Del(h)
	}
	if rq.d.Rule.Mirror == policy.MirrorNone && !rq.d.ReadPost {
		return nil
	}
	hasBody := r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody
	if rq.d.BodyCap == 0 {
		if hasBody {
			return x.deny(r, rq, rq.d.BodyReason(), rq.d.RuleName(), "no request body allowed here")
		}
		return nil
	}
	if ce := unreadableCoding(r.Header); ce != "" {
		return x.deny(r, rq, rq.d.BodyReason(), rq.d.RuleName(), fmt.Sprintf("Content-Encoding %.40q: a body egressd reads is plain or gzip (any other coding reaches the server as bytes no check read)", ce))
	}
	limit := min(rq.d.BodyCap, p.Limits.MirrorBodyBytes)
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	r.Body.Close()
	switch {
	case err != nil:
		return x.deny(r, rq, policy.ReasonBadRequest, rq.d.RuleName(), "reading body: "+err.Error())
	case int64(len(body)) > limit:
		return x.deny(r, rq, rq.d.BodyReason(), rq.d.RuleName(), fmt.Sprintf("body over the %d-byte cap of a protocol read", limit))
	}
	if ok, why := p.CheckBody(&rq.d, &rq.target, r.Method, r.Header.Get("Content-Type"), body); !ok {
		return x.deny(r, rq, rq.d.BodyReason(), rq.d.RuleName(), why)
	}
	body, gzipped, err := policy.CheckedBody(r.Header.Get("Content-Type"), body)
	if err != nil {
		return x.deny(r, rq, rq.d.BodyReason(), rq.d.RuleName(), err.Error())
	}
	if h := x.honeyInBody(body); h != nil {
		return x.denyHoneytoken(r, rq, h)
	}
	if gzipped {
		r.Header.Del("Content-Encoding")
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	r.TransferEncoding = nil
	return nil
}

// dialUpstream is the transport's only dialer: it ignores the address the
// transport asks for and dials the decided target through the checks.
func (x *Proxy) dialUpstream(ctx context.Context, network, _ string) (net.Conn, error) {
	rq, _ := ctx.Value(keyDecision).(*request)
	return x.dialDecided(ctx, rq)
}

// dialDecided dials the target of an allow decision through the checks.
func (x *Proxy) dialDecided(ctx context.Context, rq *request) (net.Conn, error) {
	c, _, err := x.dialDecidedAt(ctx, rq)
	return c, err
}

// dialDecidedAt is dialDecided, with the address it reached.
func (x *Proxy) dialDecidedAt(ctx context.Context, rq *request) (net.Conn, netip.AddrPort, error) {
	if rq == nil || !rq.d.Allow {
		return nil, netip.AddrPort{}, &DenyError{Reason: policy.ReasonInternal, Detail: "dial without an allow decision"}
	}
	p, d := cmp.Or(rq.pol, x.Policy()), &rq.d
	if cur := x.Policy(); p != cur && p != x.cand.Load() {
		// Decided by a policy a reload retired since (a long upload
		// read first): the policy in force must allow the target too,
		// and its address checks apply, as for a tunnel.
		t := rq.target
		nd := cur.DecideTargetAs(&t, rq.identity)
		if !nd.Allow {
			return nil, netip.AddrPort{}, &DenyError{Reason: nd.Reason, Detail: "the policy in force since a reload denies this target"}
		}
		p, d = cur, &nd
	}
	return x.dialer.dial(ctx, p, d, rq.target.Port)
}

// roundTrip sends an allowed request upstream and turns failures into the
// statuses of the contract: 403 for a dial-time refusal, 504 for a timeout,
// 502 for anything else. The decision is logged when the body is done.
func (x *Proxy) roundTrip(r *http.Request, _ *goproxy.ProxyCtx) (*http.Response, error) {
	rq, _ := r.Context().Value(keyDecision).(*request)
	lim := &x.Policy().Limits
	var resp *http.Response
	var err error
	var abort func()
	var mayBlock func() bool
	if syncable(r) {
		if resp, err = x.up.roundTrip(r, rq, lim); err == nil {
			ub := resp.Body.(*upBody)
			abort = func() { ub.pc.c.SetDeadline(time.Unix(1, 0)) }
			mayBlock = func() bool { return ub.pc.br.Buffered() == 0 }
		}
	} else {
		// The Transport's own header timeout is fixed at start; this one
		// follows reloads, and cancel also ends the body read (abort).
		ctx, cancel := context.WithCancelCause(r.Context())
		var t *time.Timer
		if d := lim.ResponseHeaderTimeout; d > 0 {
			t = time.AfterFunc(d, func() {
				cancel(fmt.Errorf("no response head within limits.response_header_timeout (%v): %w", d, context.DeadlineExceeded))
			})
		}
		resp, err = x.trs.get(rq.d.Rule).RoundTrip(r.WithContext(ctx))
		if t != nil {
			t.Stop()
		}
		if err != nil {
			cancel(nil)
		}
		abort = func() { cancel(errResponseCut) }
	}
	if err != nil {
		reason := reasonFor(err)
		var de *DenyError
		if errors.As(err, &de) {
			rq.d.Allow, rq.d.HighRisk = false, de.HighRisk
			return x.deny(r, rq, reason, rq.d.RuleName(), de.Detail), nil
		}
		return x.deny(r, rq, reason, rq.d.RuleName(), err.Error()), nil
	}
	var flush func()
	if rq.w != nil {
		rc := http.NewResponseController(rq.w)
		flush = func() { rc.Flush() }
	}
	g := guardBody(r.Context(), resp.Body, lim, abort, flush, mayBlock)
	resp.Body = &countingBody{ReadCloser: g, guard: g, x: x, r: r, rq: rq, status: resp.StatusCode, out: int64(rq.headBytes) + max(r.ContentLength, 0)} // data out: the head the client sent and the body
	return resp, nil
}

// errResponseCut cancels a Transport response that a guard cut.
var errResponseCut = errors.New("response cut by egressd's limits or its client leaving")

// countingBody counts response bytes, and on the first Close counts the
// bytes in the metrics and logs the decision.
type countingBody struct {
	io.ReadCloser
	n    int64
	once atomic.Bool

	guard  *guardedBody
	x      *Proxy
	r      *http.Request
	rq     *request
	status int
	out    int64 // request body bytes sent upstream
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	return n, err
}

func (b *countingBody) Close() error {
	err := b.ReadCloser.Close()
	if b.once.CompareAndSwap(false, true) {
		b.x.m.bytesIn.Add(float64(b.n))
		b.x.m.bytesOut.Add(float64(b.out))
		detail := b.guard.cutReason()
		if detail != "" {
			b.x.m.responsesCut.WithLabelValues(detail).Inc()
		}
		b.x.logDecision(b.r.Context(), b.rq, b.status, detail, b.n, b.out)
	}
	return err
}

// denyDecision answers a policy denial with 403 and its reason.
func (x *Proxy) denyDecision(r *http.Request, rq *request) *http.Response {
	d := &rq.d
	detail := d.Detail
	if d.Reason == policy.ReasonPageType {
		detail = fmt.Sprintf("page type %s (%s)", d.PageType, d.PageSignal)
	}
	help := d.Reason.Help()
	if detail != "" {
		help = detail + ": " + help
	}
	rq.message = x.Policy().Message(d)
	return x.deny(r, rq, d.Reason, d.RuleName(), help)
}

// deny builds the refusal response and logs and counts the decision.
func (x *Proxy) deny(r *http.Request, rq *request, reason policy.Reason, rule, detail string) *http.Response {
	rq.d.Allow = false
	if reason == policy.ReasonBadTarget {
		x.scanHighRisk(rq, r.RequestURI, r.Host)
	}
	x.logDecisionReason(r.Context(), rq, reason.Status(), reason, detail, 0, 0)
	return denyResponse(r, reason, rule, clientDetail(reason, detail), rq.message)
}

// scanHighRisk marks a request whose target could not be parsed as
// high-risk when any of its raw targets (request target, Host header)
// names a high-risk host in any spelling (policy.HighRiskIn, as check
// does): it is then counted, logged and alerted as the attempt it is.
func (x *Proxy) scanHighRisk(rq *request, raws ...string) {
	p := x.Policy()
	for _, raw := range raws {
		if host, ok := p.HighRiskIn(raw); ok {
			rq.d.HighRisk, rq.d.Host, rq.target = true, host, policy.Target{}
			return
		}
	}
}

// clientDetail is what a refusal's body may tell the client. The gate's
// 503s carry the daemon's state (which probes leaked, which rules failed
// their self-test): the operator's to read in the log and on the admin
// endpoint, not the sandbox's; the client gets the reason's advice only.
func clientDetail(reason policy.Reason, detail string) string {
	if reason == policy.ReasonNotReady || reason == policy.ReasonAuditUnavailable {
		return reason.Help()
	}
	return detail
}

func (x *Proxy) logDecision(ctx context.Context, rq *request, status int, detail string, in, out int64) {
	x.logDecisionReason(ctx, rq, status, rq.d.Reason, detail, in, out)
}

// logDecisionReason writes the one canonical line per decision and counts
// it: allow at Info, deny at Warn (high-risk included, flagged), upstream
// failures at Error.
func (x *Proxy) logDecisionReason(ctx context.Context, rq *request, status int, reason policy.Reason, detail string, in, out int64) {
	d := &rq.d
	decision := event.Deny
	if d.Allow && !reason.Denies() {
		decision = event.Allow
	}
	level := slog.LevelInfo
	switch {
	case status >= 500 && status != http.StatusServiceUnavailable:
		level = slog.LevelError
	case decision == event.Deny:
		level = slog.LevelWarn
	}
	host := rq.target.Host()
	if host == "" {
		host = d.Host
	}
	x.record(ctx, level, append([]slog.Attr{
		slog.String(event.KeyIdentity, rq.logIdentity()),
		slog.String(event.KeySource, rq.source),
		slog.String(event.KeyView, d.View),
		slog.String(event.KeyMethod, rq.method),
		slog.String(event.KeyHost, host),
		slog.Int(event.KeyPort, int(rq.target.Port)),
		slog.String(event.KeyPath, truncate(rq.target.Path, maxLogPath)),
		slog.Int(event.KeyQueryLen, len(rq.target.Query)),
		slog.String(event.KeyPageType, d.PageType.String()),
		slog.String(event.KeyRule, d.RuleName()),
		slog.String(event.KeyDecision, decision),
		slog.String(event.KeyReason, reason.String()),
		slog.Bool(event.KeyHighRisk, d.HighRisk),
		slog.Int(event.KeyStatus, status),
		slog.Int64(event.KeyBytesIn, in),
		slog.Int64(event.KeyBytesOut, out),
		slog.Int64(event.KeyBytes, in+out),
		slog.String(event.KeyDetail, detail),
		slog.Bool(event.KeyInspected, rq.tunnel != nil),
		slog.String(event.KeyVia, rq.via),
	}, rq.honeyAttrs()...))

	x.count(rq, decision, reason.String(), d.PageType.String(), d.RuleName(), d.HighRisk)
}

// record writes one decision record (event.Msg). It builds the
// slog.Record itself, with no caller PC: slog's Logger finds one by
// unwinding the stack on every line, and no handler of egressd reads it
// (about 1 % of the proxy's CPU per new tunnel, which writes three).
func (x *Proxy) record(ctx context.Context, level slog.Level, attrs []slog.Attr) {
	h := x.log.Handler()
	if !h.Enabled(ctx, level) {
		return
	}
	r := slog.NewRecord(time.Now(), level, event.Msg, 0)
	r.AddAttrs(attrs...)
	h.Handle(ctx, r) //nolint:errcheck // as slog.Logger: a handler reports its own failures (the audit sink fails closed)
}
