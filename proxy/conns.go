package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
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
// tunnel, tun set) in a scanConn whose oversized heads are answered and
// logged here.
func (x *Proxy) newScanConn(c net.Conn, headLimit int, tun *request) *scanConn {
	sc := newScanConn(c, headLimit)
	sc.onRefuse = func(ref refusal) {
		rq := &request{start: time.Now(), tunnel: tun}
		if tun != nil {
			rq.identity, rq.source, rq.target = tun.identity, tun.source, tun.target
		} else if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
			rq.identity = x.sourceIdentity(ap.Addr())
		}
		status := ref.reason.Status()
		x.logDecisionReason(context.Background(), rq, status, ref.reason, ref.detail, 0, 0)
		body := fmt.Sprintf("egressd: %d %s: %s\n", status, ref.reason, ref.detail)
		c.SetWriteDeadline(time.Now().Add(time.Second))
		fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nX-Egressd-Deny: %s\r\nConnection: close\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\n\r\n%s",
			status, http.StatusText(status), ref.reason, len(body), body)
		c.Close()
	}
	return sc
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
