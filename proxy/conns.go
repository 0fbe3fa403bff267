package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/egressd/egressd/policy"
)

// rateLog logs an event at most once a second, with the count of those
// it did not log.
type rateLog struct {
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// allow reports whether to log now and how many were suppressed since.
func (r *rateLog) allow() (bool, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.last) < time.Second {
		r.suppressed++
		return false, 0
	}
	n := r.suppressed
	r.last, r.suppressed = time.Now(), 0
	return true, n
}

// acceptError logs and counts a listener's accept failure (out of
// descriptors, above all); a closed listener is not one.
func (x *Proxy) acceptError(listener string, err error) {
	if errors.Is(err, net.ErrClosed) {
		return
	}
	x.m.acceptErrors.Inc()
	if ok, n := x.acceptLog.allow(); ok {
		x.log.Error("accept failed", "listener", listener, "err", err, "suppressed", n)
	}
}

// newScanConn wraps a client connection (or the inside of an inspected
// tunnel, tun set) in a scanConn whose refused heads, and the heads
// net/http refuses itself, are answered and logged here: every head
// egressd receives is a decision.
func (x *Proxy) newScanConn(c net.Conn, headLimit int, tun *request) *scanConn {
	sc := newScanConn(c, headLimit)
	sc.timeouts = func() (head, idle time.Duration) {
		lim := &x.Policy().Limits
		return lim.RequestHeaderTimeout, lim.IdleTimeout
	}
	sc.onRefuse = func(ref refusal) {
		x.refuseHead(c, tun, ref.head, ref.reason, ref.detail)
		c.Close()
	}
	sc.onGoError = func(h headInfo, status int) {
		reason, detail := headReason(h, tun, status)
		x.refuseHead(c, tun, h, reason, detail)
		// net/http closes the connection after its answer.
	}
	return sc
}

// headReason names why net/http refused a head (with status): a request
// target egressd cannot parse either is bad-target, anything else about
// the head bad-request (net/http's own limit, never reached before
// egressd's, header-too-large).
func headReason(h headInfo, tun *request, status int) (policy.Reason, string) {
	if status == http.StatusRequestHeaderFieldsTooLarge {
		return policy.ReasonHeaderTooLarge, "request head over net/http's limit"
	}
	method, target, proto := splitRequestLine(h.line)
	if err := rawTargetError(method, target, tun != nil); err != nil {
		return policy.ReasonBadTarget, err.Error()
	}
	return policy.ReasonBadRequest, fmt.Sprintf("malformed request head (net/http: %d %s; %.20q)", status, http.StatusText(status), proto)
}

// splitRequestLine splits a raw request line at its first and last space;
// a target with spaces in it stays whole.
func splitRequestLine(line string) (method, target, proto string) {
	method, rest, _ := strings.Cut(line, " ")
	if i := strings.LastIndexByte(rest, ' '); i >= 0 {
		return method, rest[:i], rest[i+1:]
	}
	return method, rest, ""
}

// rawTargetError checks a raw request target as the proxy would parse it:
// an authority for CONNECT, an absolute URL for a proxy request, a path
// (origin-form) as a path.
func rawTargetError(method, target string, inTunnel bool) error {
	switch {
	case method == http.MethodConnect:
		_, err := policy.ParseAuthority(target)
		return err
	case strings.Contains(target, "://") || !inTunnel && !strings.HasPrefix(target, "/"):
		_, err := policy.ParseURL(target)
		return err
	}
	// origin-form: inside a tunnel, or on a transparent listener (on the
	// proxy listener it is refused as not-proxy-request once parsed)
	_, err := policy.ParseURL("https://tunnel.invalid" + target)
	return err
}

// refuseHead answers and logs a head refused before any handler ran: one
// decision line, counted, with the raw target (and Host header) scanned
// for a high-risk host in any spelling, alerted like any high-risk
// attempt.
func (x *Proxy) refuseHead(c net.Conn, tun *request, h headInfo, reason policy.Reason, detail string) {
	rq := &request{start: time.Now(), tunnel: tun, headBytes: h.size}
	method, target, _ := splitRequestLine(h.line)
	rq.method = truncate(method, 32)
	if tun != nil {
		rq.identity, rq.source, rq.probe, rq.target = tun.identity, tun.source, tun.probe, tun.target
	} else if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		rq.identity = x.sourceIdentity(ap.Addr())
	}
	if tun == nil {
		// What the head asked for, as far as it parses: a target the
		// policy refuses anyway is refused for that (check's decision),
		// whatever else is wrong with the head.
		var t policy.Target
		var err error
		if method == http.MethodConnect {
			t, err = policy.ParseAuthority(target)
		} else {
			t, err = policy.ParseURL(target)
		}
		switch {
		case err != nil:
			rq.d.Host = truncate(target, maxLogPath)
		case method == http.MethodConnect:
			rq.target, rq.d = t, x.Policy().DecideTargetAs(&t, rq.identity)
		default:
			rq.target, rq.d = t, x.Policy().DecideRequestAs(&t, rq.identity, method, "", 0)
		}
		if err == nil && !rq.d.Allow && reason == policy.ReasonBadRequest {
			reason, detail = rq.d.Reason, detail+"; the target: "+rq.d.Reason.String()
		}
		rq.d.Allow = false
	}
	x.scanHighRisk(rq, target, h.host)
	status := reason.Status()
	x.logDecisionReason(context.Background(), rq, status, reason, detail, 0, 0)
	body := fmt.Sprintf("egressd: %d %s: %s\n", status, reason, detail)
	c.SetWriteDeadline(time.Now().Add(time.Second))
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nX-Egressd-Deny: %s\r\nConnection: close\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\n\r\n%s",
		status, http.StatusText(status), reason, len(body), body)
}

// bodyDeadline bounds each read of a request body by the idle timeout: a
// client that sends a head and then trickles (or stops) its body would
// otherwise hold the connection for ever, since net/http puts no deadline
// on body reads. The deadline is lifted once the body ends, before
// net/http's background read of the next request starts; a body that
// failed leaves the connection unreadable, so net/http's drain of the
// rest ends too.
type bodyDeadline struct {
	io.ReadCloser
	c    net.Conn
	idle time.Duration
	done atomic.Bool
}

func (b *bodyDeadline) Read(p []byte) (int, error) {
	if b.done.Load() {
		return b.ReadCloser.Read(p)
	}
	b.c.SetReadDeadline(time.Now().Add(b.idle))
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == io.EOF:
		b.done.Store(true)
		b.c.SetReadDeadline(time.Time{})
	case err != nil:
		// Keep the deadline: net/http drains what is left of the body
		// after the handler, and must not wait for it either.
		b.done.Store(true)
		b.c.SetReadDeadline(time.Now())
	}
	return n, err
}

// finish runs when the handler returns: a body not read to its end is
// drained by net/http, which gets the same deadline.
func (b *bodyDeadline) finish() {
	if !b.done.Load() {
		b.c.SetReadDeadline(time.Now().Add(b.idle))
	}
}

// limitBody puts bodyDeadline on r's body when it has one; the caller
// defers finish on the result (nil: nothing to do).
func (x *Proxy) limitBody(r *http.Request, c net.Conn) *bodyDeadline {
	idle := x.Policy().Limits.IdleTimeout
	if c == nil || idle <= 0 || r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	b := &bodyDeadline{ReadCloser: r.Body, c: c, idle: idle}
	r.Body = b
	return b
}
