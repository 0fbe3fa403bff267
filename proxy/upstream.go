package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/egressd/egressd/policy"
)

// upstream sends plain-HTTP requests that carry no body on the request's
// own goroutine: write the request, read the response, hand the body back,
// and pool the connection once the body has been read to its end.
// http.Transport runs a reader and a writer goroutine per connection and
// hands every request and response between them; on a busy proxy those
// hand-offs cost more than the proxying (measured in bench/: a third more
// requests per CPU second, and a p99 like Squid's). Requests with a body,
// an Expect or Upgrade header, and all TLS upstreams stay on
// http.Transport, whose concurrent writer is what those need.
//
// A connection is reused only for the same normalized host, port and
// policy rule that it was dialed and checked for, and only after a
// response whose framing ended cleanly with nothing left over.
//
// A response is bounded on both paths (policy.Limits): its head by
// ResponseHeaderTimeout and ResponseHeaderBytes, its body by
// ResponseIdleTimeout between bytes and ResponseTimeout in all, and by its
// client: a client that leaves aborts the upstream read at once, so a
// stalled or dribbling origin cannot accumulate sockets and goroutines.
type upstream struct {
	dial func(ctx context.Context, rq *request) (net.Conn, error)
	// limits is the Transport used for everything else: its
	// ResponseHeaderTimeout, IdleConnTimeout, MaxIdleConnsPerHost and
	// MaxIdleConns apply here too.
	limits *http.Transport

	mu    sync.Mutex
	idle  map[upKey][]*upConn
	nidle int
	gen   int // bumped by closeIdle: older connections are not pooled again
}

type upKey struct {
	host string // policy.Decision.Host: the normalized name or address
	port uint16
	rule *policy.Rule
}

const (
	upMax1xx  = 5 // informational responses skipped before the final one
	upReadBuf = 16 << 10
)

// errHeadTooBig is a response head over limits.response_header_bytes.
var errHeadTooBig = errors.New("response head over limits.response_header_bytes")

// errStale marks a failure on a pooled connection before any byte of a
// response arrived: the origin had closed it, and a replayable request
// may be sent again on a new connection.
var errStale = errors.New("pooled upstream connection closed by the origin")

// syncable reports whether r may take the synchronous path.
func syncable(r *http.Request) bool {
	return r.URL.Scheme == "http" &&
		(r.Body == nil || r.Body == http.NoBody) && r.ContentLength == 0 && len(r.TransferEncoding) == 0 &&
		r.Header.Get("Expect") == "" && r.Header.Get("Upgrade") == ""
}

// replayable mirrors http.Transport: a bodiless request may be sent again
// after a stale connection if its method is idempotent or it carries an
// idempotency key.
func replayable(r *http.Request) bool {
	switch r.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return r.Header.Get("Idempotency-Key") != "" || r.Header.Get("X-Idempotency-Key") != ""
}

func (u *upstream) roundTrip(r *http.Request, rq *request, lim *policy.Limits) (*http.Response, error) {
	key := upKey{host: rq.d.Host, port: rq.target.Port, rule: rq.d.Rule}
	for retried := false; ; retried = true {
		pc := u.get(key)
		reused := pc != nil
		if pc == nil {
			c, err := u.dial(r.Context(), rq)
			if err != nil {
				return nil, err
			}
			pc = u.newConn(c, key)
		}
		resp, err := pc.roundTrip(r, lim)
		if err == nil {
			return resp, nil
		}
		pc.c.Close()
		if reused && !retried && errors.Is(err, errStale) && replayable(r) {
			continue
		}
		return nil, err
	}
}

// upConn is one pooled origin connection.
type upConn struct {
	u      *upstream
	c      net.Conn
	lim    headLimit // under br: bounds what a response head may read
	br     *bufio.Reader
	bw     *bufio.Writer
	key    upKey
	gen    int
	timer  *time.Timer // closes the connection after upIdleTimeout in the pool
	pooled bool        // in the idle pool; guarded by u.mu
}

func (u *upstream) newConn(c net.Conn, key upKey) *upConn {
	u.mu.Lock()
	gen := u.gen
	u.mu.Unlock()
	pc := &upConn{u: u, c: c, lim: headLimit{r: c, n: -1}, bw: bufio.NewWriterSize(c, 4<<10), key: key, gen: gen}
	pc.br = bufio.NewReaderSize(&pc.lim, upReadBuf)
	return pc
}

// headLimit fails reads once n bytes were read (n < 0: no limit).
type headLimit struct {
	r io.Reader
	n int64
}

func (l *headLimit) Read(p []byte) (int, error) {
	if l.n < 0 {
		return l.r.Read(p)
	}
	if l.n == 0 {
		return 0, errHeadTooBig
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

// roundTrip writes r and reads the response head. Errors before the first
// response byte are errStale (the caller decides whether that matters).
func (pc *upConn) roundTrip(r *http.Request, lim *policy.Limits) (*http.Response, error) {
	ctx := r.Context()
	// A client that goes away must not leave the origin read hanging.
	stop := context.AfterFunc(ctx, func() { pc.c.SetDeadline(time.Unix(1, 0)) })
	fail := func(what string, err error) (*http.Response, error) {
		stop()
		if ctx.Err() != nil {
			err = context.Cause(ctx)
		}
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if lim.ResponseHeaderTimeout > 0 {
		pc.c.SetDeadline(time.Now().Add(lim.ResponseHeaderTimeout))
	}
	if lim.ResponseHeaderBytes > 0 {
		// the head, plus what the buffer may read ahead of the body
		pc.lim.n = int64(lim.ResponseHeaderBytes) + upReadBuf
	}
	defer func() { pc.lim.n = -1 }()
	err := r.Write(pc.bw) // no body: only the head, into the buffer
	if err == nil {
		err = pc.bw.Flush()
	}
	if err == nil {
		_, err = pc.br.Peek(1)
	}
	if err != nil {
		return fail("send request upstream", fmt.Errorf("%w: %w", errStale, err))
	}
	var resp *http.Response
	for n := 0; ; n++ {
		if resp, err = http.ReadResponse(pc.br, r); err != nil {
			return fail("read response head", err)
		}
		code := resp.StatusCode
		if code >= 200 || code < 100 {
			break
		}
		// 1xx: Early Hints and the like precede the real response; a
		// 101 was never asked for (requests with Upgrade go elsewhere).
		if code == http.StatusSwitchingProtocols || n >= upMax1xx {
			return fail("read response head", fmt.Errorf("unexpected %s", resp.Status))
		}
	}
	if !stop() { // the context ended: the deadline may already be in the past
		return nil, fmt.Errorf("read response head: %w", context.Cause(ctx))
	}
	pc.c.SetDeadline(time.Time{})
	resp.Body = &upBody{body: resp.Body, pc: pc, reusable: !resp.Close && !r.Close, eof: resp.Body == http.NoBody}
	return resp, nil
}

// guardedBody bounds a response body in flight: a Read that waits more
// than idle, a body that takes more than total, or a client that leaves
// (ctx) aborts the upstream, so the blocked Read returns and socket and
// goroutines go. Before a Read that may wait on the origin it flushes
// what the client's writer holds: the head and the bytes so far reach a
// long-polling or streaming client at once, not after 4 KiB.
type guardedBody struct {
	io.ReadCloser
	abort      func()      // ends the upstream read; safe from any goroutine
	flush      func()      // sends what the client's writer buffered (nil: none)
	mayBlock   func() bool // whether the next Read may wait on the origin
	idle       time.Duration
	idleTimer  *time.Timer
	totalTimer *time.Timer
	stopCtx    func() bool
	why        atomic.Pointer[string] // what cut the body, once
}

// Reasons a guarded body was cut, in the decision log's detail.
const (
	cutIdle       = "upstream sent nothing for limits.response_idle_timeout"
	cutTotal      = "response took longer than limits.response_timeout"
	cutClientGone = "client left"
)

func guardBody(ctx context.Context, body io.ReadCloser, lim *policy.Limits, abort, flush func(), mayBlock func() bool) *guardedBody {
	g := &guardedBody{ReadCloser: body, abort: abort, flush: flush, mayBlock: mayBlock, idle: lim.ResponseIdleTimeout}
	if lim.ResponseTimeout > 0 {
		g.totalTimer = time.AfterFunc(lim.ResponseTimeout, func() { g.cut(cutTotal) })
	}
	if g.idle > 0 {
		g.idleTimer = time.AfterFunc(g.idle, func() { g.cut(cutIdle) })
		g.idleTimer.Stop() // runs only while a Read waits
	}
	g.stopCtx = context.AfterFunc(ctx, func() { g.cut(cutClientGone) })
	return g
}

func (g *guardedBody) cut(why string) {
	if g.why.CompareAndSwap(nil, &why) {
		g.abort()
	}
}

// cutReason says what cut the body ("" if nothing did).
func (g *guardedBody) cutReason() string {
	if p := g.why.Load(); p != nil {
		return *p
	}
	return ""
}

func (g *guardedBody) Read(p []byte) (int, error) {
	if g.flush != nil && (g.mayBlock == nil || g.mayBlock()) {
		g.flush()
	}
	if g.idleTimer != nil {
		g.idleTimer.Reset(g.idle)
	}
	n, err := g.ReadCloser.Read(p)
	if g.idleTimer != nil {
		g.idleTimer.Stop()
	}
	if err != nil && err != io.EOF {
		if why := g.cutReason(); why != "" {
			err = fmt.Errorf("%s: %w", why, err)
		}
	}
	return n, err
}

func (g *guardedBody) Close() error {
	g.stopCtx()
	if g.idleTimer != nil {
		g.idleTimer.Stop()
	}
	if g.totalTimer != nil {
		g.totalTimer.Stop()
	}
	return g.ReadCloser.Close()
}

// upBody returns its connection to the pool when the body was read to
// its end and the framing left nothing behind; any other close closes the
// connection (http's own body Close would read the rest first).
type upBody struct {
	body     io.ReadCloser
	pc       *upConn
	reusable bool
	eof      bool
	closed   bool
}

var errBodyClosed = errors.New("read on closed upstream body")

func (b *upBody) Read(p []byte) (int, error) {
	if b.closed {
		return 0, errBodyClosed
	}
	n, err := b.body.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *upBody) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	if !b.eof {
		b.pc.c.Close() // first, so that the body's Close does not drain it
		b.body.Close()
		return nil
	}
	b.body.Close()
	if b.reusable && b.pc.br.Buffered() == 0 {
		b.pc.u.put(b.pc)
		return nil
	}
	b.pc.c.Close()
	return nil
}

func (u *upstream) get(key upKey) *upConn {
	u.mu.Lock()
	defer u.mu.Unlock()
	l := u.idle[key]
	if len(l) == 0 {
		return nil
	}
	pc := l[len(l)-1]
	l[len(l)-1] = nil
	if len(l) == 1 {
		delete(u.idle, key)
	} else {
		u.idle[key] = l[:len(l)-1]
	}
	u.nidle--
	pc.pooled = false
	pc.timer.Stop() // if it already fired, its func sees pooled false and leaves pc alone
	return pc
}

func (u *upstream) put(pc *upConn) {
	u.mu.Lock()
	maxAll, maxPer := u.limits.MaxIdleConns, u.limits.MaxIdleConnsPerHost
	if maxPer <= 0 {
		maxPer = http.DefaultMaxIdleConnsPerHost
	}
	if pc.gen != u.gen || (maxAll > 0 && u.nidle >= maxAll) || len(u.idle[pc.key]) >= maxPer {
		u.mu.Unlock()
		pc.c.Close()
		return
	}
	if u.idle == nil {
		u.idle = map[upKey][]*upConn{}
	}
	u.idle[pc.key] = append(u.idle[pc.key], pc)
	u.nidle++
	pc.pooled = true
	idle := u.limits.IdleConnTimeout
	if idle <= 0 {
		idle = 90 * time.Second
	}
	if pc.timer == nil {
		pc.timer = time.AfterFunc(idle, pc.expire)
	} else {
		pc.timer.Reset(idle)
	}
	u.mu.Unlock()
}

// expire closes a connection that sat in the pool for IdleConnTimeout.
func (pc *upConn) expire() {
	u := pc.u
	u.mu.Lock()
	if !pc.pooled {
		u.mu.Unlock()
		return
	}
	u.remove(pc)
	u.mu.Unlock()
	pc.c.Close()
}

// remove takes pc out of the pool; u.mu is held.
func (u *upstream) remove(pc *upConn) {
	l := u.idle[pc.key]
	for i, x := range l {
		if x == pc {
			l = append(l[:i], l[i+1:]...)
			break
		}
	}
	if len(l) == 0 {
		delete(u.idle, pc.key)
	} else {
		u.idle[pc.key] = l
	}
	u.nidle--
	pc.pooled = false
}

// closeIdle closes every pooled connection, and makes connections now in
// use close instead of returning (a new policy: they were checked under
// the old one).
func (u *upstream) closeIdle() {
	u.mu.Lock()
	var conns []*upConn
	for _, l := range u.idle {
		for _, pc := range l {
			pc.pooled = false
			pc.timer.Stop()
			conns = append(conns, pc)
		}
	}
	u.idle = nil
	u.nidle = 0
	u.gen++
	u.mu.Unlock()
	for _, pc := range conns {
		pc.c.Close()
	}
}

// closeRules closes the pooled connections of rules (a dropped
// candidate's: no request of another rule could use them).
func (u *upstream) closeRules(rules []*policy.Rule) {
	drop := make(map[*policy.Rule]bool, len(rules))
	for _, r := range rules {
		drop[r] = true
	}
	u.mu.Lock()
	var conns []*upConn
	for k, l := range u.idle {
		if !drop[k.rule] {
			continue
		}
		for _, pc := range l {
			pc.pooled = false
			pc.timer.Stop()
			conns = append(conns, pc)
		}
		u.nidle -= len(l)
		delete(u.idle, k)
	}
	u.mu.Unlock()
	for _, pc := range conns {
		pc.c.Close()
	}
}

// idleCount is the number of pooled connections (tests).
func (u *upstream) idleCount() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.nidle
}
