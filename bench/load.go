//go:build linux

package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// The load generator speaks HTTP/1.1 on raw sockets with a minimal
// response reader: net/http's client would spend more of the shared load
// core than some proxies spend on theirs, and its pool defaults (two idle
// connections per host) would throttle the run.

// phases of a load run: requests finished in phaseMeasure count.
const (
	phaseWarm int32 = iota
	phaseMeasure
	phaseStop
)

// loadResult is one measured phase.
type loadResult struct {
	ops        int
	errs       int
	reconnects int // unannounced closes of kept-alive connections, retried
	firstErr   error
	elapsed    time.Duration
	lat        []time.Duration // sorted
	cpu        time.Duration   // proxy CPU (user+system) during the phase; 0 direct
}

func (r loadResult) rate() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.ops) / r.elapsed.Seconds()
}

func (r loadResult) pct(p float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	i := min(int(float64(len(r.lat))*p), len(r.lat)-1)
	return r.lat[i]
}

// cpuPerOp is the proxy's CPU per operation in microseconds.
func (r loadResult) cpuPerOp() float64 {
	if r.ops == 0 {
		return 0
	}
	return float64(r.cpu.Microseconds()) / float64(r.ops)
}

// worker is one client loop's state; op runs one operation on it.
type worker struct {
	conn       net.Conn
	br         *bufio.Reader
	used       int // requests answered on conn
	reconnects int // kept-alive connections the server closed unannounced
}

func (w *worker) reset() {
	if w.conn != nil {
		abort(w.conn)
		w.conn = nil
	}
}

// runLoad runs op on n concurrent workers: warm, then measure for dur
// while sampling the proxy's CPU (pid 0: none).
func runLoad(n int, warm, dur time.Duration, pid int, op func(*worker) error) loadResult {
	var phase atomic.Int32
	type tally struct {
		ops, errs  int
		reconnects int
		firstErr   error
		lat        []time.Duration
	}
	tallies := make([]tally, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := &tallies[i]
			t.lat = make([]time.Duration, 0, 1<<16)
			var w worker
			defer func() { t.reconnects = w.reconnects; w.reset() }()
			for {
				p0 := phase.Load()
				if p0 == phaseStop {
					return
				}
				start := time.Now()
				err := op(&w)
				el := time.Since(start)
				if err != nil {
					w.reset()
					if p0 == phaseMeasure && phase.Load() == phaseMeasure {
						t.errs++
						if t.firstErr == nil {
							t.firstErr = err
						}
					}
					time.Sleep(5 * time.Millisecond) // a failing proxy must not turn this into a spin
					continue
				}
				if p0 == phaseMeasure && phase.Load() == phaseMeasure {
					t.ops++
					t.lat = append(t.lat, el)
				}
			}
		}()
	}
	time.Sleep(warm)
	cpu0 := procCPU(pid)
	t0 := time.Now()
	phase.Store(phaseMeasure)
	time.Sleep(dur)
	phase.Store(phaseStop)
	elapsed := time.Since(t0)
	cpu1 := procCPU(pid)
	wg.Wait()
	var r loadResult
	r.elapsed = elapsed
	r.cpu = cpu1 - cpu0
	for i := range tallies {
		t := &tallies[i]
		r.ops += t.ops
		r.errs += t.errs
		r.reconnects += t.reconnects
		if r.firstErr == nil {
			r.firstErr = t.firstErr
		}
		r.lat = append(r.lat, t.lat...)
	}
	slices.Sort(r.lat)
	return r
}

// runRate runs op at a fixed total rate over n workers, far below every
// proxy's capacity, so latency is the proxy's own and not queueing behind
// other requests. Latency counts from the send, not from the due time: Go
// timers on a mostly idle process fire up to a millisecond late, which
// would swamp what is measured.
func runRate(n int, rate float64, warm, dur time.Duration, pid int, op func(*worker) error) loadResult {
	interval := time.Duration(float64(n) / rate * float64(time.Second))
	start := time.Now()
	measureFrom, measureTo := start.Add(warm), start.Add(warm+dur)
	type tally struct {
		ops, errs  int
		reconnects int
		firstErr   error
		lat        []time.Duration
	}
	tallies := make([]tally, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			t := &tallies[i]
			var w worker
			defer func() { t.reconnects = w.reconnects; w.reset() }()
			due := start.Add(time.Duration(i) * interval / time.Duration(n))
			for ; due.Before(measureTo); due = due.Add(interval) {
				if d := time.Until(due); d > 0 {
					time.Sleep(d)
				}
				sent := time.Now()
				err := op(&w)
				lat := time.Since(sent)
				if due.Before(measureFrom) {
					continue
				}
				if err != nil {
					w.reset()
					t.errs++
					if t.firstErr == nil {
						t.firstErr = err
					}
					continue
				}
				t.ops++
				t.lat = append(t.lat, lat)
			}
		})
	}
	time.Sleep(time.Until(measureFrom))
	cpu0 := procCPU(pid)
	time.Sleep(time.Until(measureTo))
	cpu1 := procCPU(pid)
	wg.Wait()
	r := loadResult{elapsed: dur, cpu: cpu1 - cpu0}
	for i := range tallies {
		t := &tallies[i]
		r.ops += t.ops
		r.errs += t.errs
		r.reconnects += t.reconnects
		if r.firstErr == nil {
			r.firstErr = t.firstErr
		}
		r.lat = append(r.lat, t.lat...)
	}
	slices.Sort(r.lat)
	return r
}

// client knows how to reach the origin, through a proxy or directly.
type client struct {
	proxy  string         // host:port of the proxy; "" direct
	origin *origin        // where the requests go
	roots  *x509.CertPool // origin CA, plus egressd's CA for inspected runs
	dialTO time.Duration
}

func (c *client) dial(addr string) (net.Conn, error) {
	conn, err := net.DialTimeout("tcp", addr, c.dialTO)
	if err != nil {
		return nil, err
	}
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	return conn, nil
}

// keepAliveOp returns an op that sends GET /1k over the worker's
// keep-alive connection (absolute-form through a proxy). name replaces
// the origin's address in the URL (a name the proxy resolves); "" keeps
// the literal address.
func (c *client) keepAliveOp(name string) func(*worker) error {
	dst := c.origin.plain.String()
	to := dst
	if name != "" {
		dst = fmt.Sprintf("%s:%d", name, c.origin.plain.Port())
	}
	var req []byte
	if c.proxy != "" {
		req = fmt.Appendf(nil, "GET http://%s/1k HTTP/1.1\r\nHost: %s\r\nUser-Agent: egressd-bench\r\nAccept: */*\r\n\r\n", dst, dst)
		to = c.proxy
	} else {
		req = fmt.Appendf(nil, "GET /1k HTTP/1.1\r\nHost: %s\r\nUser-Agent: egressd-bench\r\nAccept: */*\r\n\r\n", dst)
	}
	return func(w *worker) error {
		for {
			reused := w.conn != nil && w.used > 0
			if w.conn == nil {
				conn, err := c.dial(to)
				if err != nil {
					return err
				}
				w.conn, w.used = conn, 0
				if w.br == nil {
					w.br = bufio.NewReaderSize(conn, 16<<10)
				} else {
					w.br.Reset(conn)
				}
			}
			w.conn.SetDeadline(time.Now().Add(30 * time.Second))
			_, err := w.conn.Write(req)
			var resp response
			if err == nil {
				resp, err = readResponse(w.br, false)
			}
			if err != nil && reused && resp.status == 0 {
				// The proxy closed a kept-alive connection without saying
				// so (tinyproxy does, after every request): retry on a new
				// one, as HTTP clients do for an idempotent request.
				w.reset()
				w.reconnects++
				continue
			}
			if err != nil {
				return err
			}
			if resp.status != 200 || resp.body != smallSize {
				return fmt.Errorf("GET /1k: status %d, %d bytes", resp.status, resp.body)
			}
			w.used++
			if resp.close {
				w.reset()
			}
			return nil
		}
	}
}

// tunnel opens a connection to the origin's TLS listener — through a
// CONNECT when there is a proxy — and completes a fresh TLS handshake. It
// returns the TCP connection too, for an abortive close.
func (c *client) tunnel(dst netip.AddrPort) (*tls.Conn, net.Conn, error) {
	to := dst.String()
	if c.proxy != "" {
		to = c.proxy
	}
	conn, err := c.dial(to)
	if err != nil {
		return nil, nil, err
	}
	var raw net.Conn = conn
	if c.proxy != "" {
		fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: egressd-bench\r\n\r\n", dst, dst)
		br := bufio.NewReaderSize(conn, 1024)
		resp, err := readResponse(br, true)
		if err != nil {
			abort(conn)
			return nil, nil, fmt.Errorf("CONNECT: %w", err)
		}
		if resp.status != 200 {
			abort(conn)
			return nil, nil, fmt.Errorf("CONNECT: status %d", resp.status)
		}
		raw = &bufConn{Conn: conn, r: br}
	}
	tc := tls.Client(raw, &tls.Config{
		RootCAs:    c.roots,
		ServerName: dst.Addr().String(),
		NextProtos: []string{"http/1.1"},
		MinVersion: tls.VersionTLS12,
	})
	if err := tc.Handshake(); err != nil {
		abort(conn)
		return nil, nil, fmt.Errorf("TLS handshake: %w", err)
	}
	return tc, conn, nil
}

// abort closes c with a reset: the client always closes first, after the
// whole response, so no side keeps the connection in TIME_WAIT (a run
// opens tens of thousands; the ephemeral ports would run out).
func abort(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

// connectOp: a fresh tunnel, TLS handshake and GET /1k per operation.
func (c *client) connectOp() func(*worker) error {
	dst := c.origin.tls
	req := fmt.Appendf(nil, "GET /1k HTTP/1.1\r\nHost: %s\r\nUser-Agent: egressd-bench\r\n\r\n", dst)
	return func(w *worker) error {
		tc, conn, err := c.tunnel(dst)
		if err != nil {
			return err
		}
		defer abort(conn)
		if _, err := tc.Write(req); err != nil {
			return err
		}
		resp, err := readResponse(bufio.NewReaderSize(tc, 4096), false)
		if err != nil {
			return err
		}
		if resp.status != 200 || resp.body != smallSize {
			return fmt.Errorf("GET /1k in tunnel: status %d, %d bytes", resp.status, resp.body)
		}
		return nil
	}
}

// bulk fetches /64m through one tunnel and returns MB/s (1e6 bytes).
func (c *client) bulk() (float64, error) {
	dst := c.origin.tls
	tc, conn, err := c.tunnel(dst)
	if err != nil {
		return 0, err
	}
	defer abort(conn)
	tc.SetDeadline(time.Now().Add(2 * time.Minute))
	start := time.Now()
	fmt.Fprintf(tc, "GET /64m HTTP/1.1\r\nHost: %s\r\n\r\n", dst)
	resp, err := readResponse(bufio.NewReaderSize(tc, 64<<10), false)
	if err != nil {
		return 0, err
	}
	if resp.status != 200 || resp.body != bulkSize {
		return 0, fmt.Errorf("GET /64m: status %d, %d bytes", resp.status, resp.body)
	}
	return float64(bulkSize) / time.Since(start).Seconds() / 1e6, nil
}

type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

type response struct {
	status int
	body   int64 // bytes of body read and discarded
	close  bool  // the server will close the connection
}

var errMalformed = errors.New("malformed response")

// readResponse reads one response and discards its body. headOnly is for
// a CONNECT reply, whose 2xx has no body.
// readChunked reads a chunked body and its trailers, and returns the
// body's size.
func readChunked(br *bufio.Reader) (int64, error) {
	var body int64
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return body, err
		}
		sz, _, _ := bytes.Cut(bytes.TrimRight(line, "\r\n"), []byte(";"))
		n, err := strconv.ParseInt(string(bytes.TrimSpace(sz)), 16, 64)
		if err != nil {
			return body, fmt.Errorf("%w: chunk size %q", errMalformed, sz)
		}
		if n == 0 {
			break
		}
		if _, err := br.Discard(int(n)); err != nil {
			return body, err
		}
		body += n
		if _, err := br.Discard(2); err != nil {
			return body, err
		}
	}
	for { // trailers
		line, err := br.ReadSlice('\n')
		if err != nil {
			return body, err
		}
		if len(bytes.TrimRight(line, "\r\n")) == 0 {
			return body, nil
		}
	}
}

func readResponse(br *bufio.Reader, headOnly bool) (response, error) {
	var r response
	line, err := br.ReadSlice('\n')
	if err != nil {
		return r, err
	}
	// "HTTP/1.1 200 Reason"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return r, fmt.Errorf("%w: status line %q", errMalformed, line)
	}
	if r.status, err = strconv.Atoi(string(line[9:12])); err != nil {
		return r, fmt.Errorf("%w: status line %q", errMalformed, line)
	}
	if line[7] == '0' {
		r.close = true // HTTP/1.0 unless keep-alive is announced
	}
	length := int64(-1)
	chunked := false
	for {
		line, err = br.ReadSlice('\n')
		if err != nil {
			return r, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		name, val, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		val = bytes.TrimSpace(val)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.ParseInt(string(val), 10, 64); err != nil {
				return r, fmt.Errorf("%w: Content-Length %q", errMalformed, val)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = bytes.Contains(bytes.ToLower(val), []byte("chunked"))
		case bytes.EqualFold(name, []byte("Connection")), bytes.EqualFold(name, []byte("Proxy-Connection")):
			v := bytes.ToLower(val)
			if bytes.Contains(v, []byte("close")) {
				r.close = true
			} else if bytes.Contains(v, []byte("keep-alive")) {
				r.close = false
			}
		}
	}
	if headOnly && r.status/100 == 2 {
		return r, nil
	}
	switch {
	case chunked:
		n, err := readChunked(br)
		r.body = n
		if err != nil {
			return r, err
		}
	case length >= 0:
		n, err := br.Discard(int(length))
		r.body = int64(n)
		if err != nil {
			return r, err
		}
	default:
		n, err := io.Copy(io.Discard, br)
		r.body = n
		r.close = true
		if err != nil {
			return r, err
		}
	}
	return r, nil
}
