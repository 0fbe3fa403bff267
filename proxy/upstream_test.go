package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egressd/egressd/policy"
)

// rawOrigin is a TCP server on 127.0.0.1 that runs serve on each
// connection and counts connections opened and closed.
type rawOrigin struct {
	l              net.Listener
	opened, closed atomic.Int64
}

func newRawOrigin(t testing.TB, serve func(c net.Conn, br *bufio.Reader)) *rawOrigin {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &rawOrigin{l: l}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			o.opened.Add(1)
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Go(func() {
				defer o.closed.Add(1)
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				serve(c, bufio.NewReader(c))
			})
		}
	}()
	return o
}

func (o *rawOrigin) port() string {
	_, p := splitPort(o.l.Addr().String())
	return p
}

// readHead reads one request head; false at EOF.
func readHead(br *bufio.Reader) (string, bool) {
	var head strings.Builder
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return head.String(), false
		}
		head.WriteString(line)
		if line == "\r\n" {
			return head.String(), true
		}
	}
}

// answer serves requests on one connection with the given raw responses,
// one per request, then closes.
func answer(resps ...string) func(net.Conn, *bufio.Reader) {
	return func(c net.Conn, br *bufio.Reader) {
		for _, r := range resps {
			if _, ok := readHead(br); !ok {
				return
			}
			io.WriteString(c, r)
		}
	}
}

const okResp = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

// waitFor polls cond for up to two seconds.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestUpstreamPool checks when a connection goes back to the pool: only
// after a response whose framing ended cleanly, with nothing left over
// and no Connection: close.
func TestUpstreamPool(t *testing.T) {
	t.Parallel()
	keepAlive := func(resp string) func(net.Conn, *bufio.Reader) {
		return answer(resp, resp, resp)
	}
	tests := []struct {
		name      string
		method    string
		serve     func(net.Conn, *bufio.Reader)
		wantBody  string
		wantConns int64 // connections for three requests
	}{
		{"content-length", "GET", keepAlive(okResp), "ok", 1},
		{"chunked with trailer", "GET", keepAlive("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nX-T: 1\r\n\r\n"), "ok", 1},
		{"head", "HEAD", keepAlive("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"), "", 1},
		{"no content", "GET", keepAlive("HTTP/1.1 204 No Content\r\n\r\n"), "", 1},
		{"early hints first", "GET", keepAlive("HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + okResp), "ok", 1},
		{"connection close", "GET", keepAlive("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"), "ok", 3},
		{"http/1.0", "GET", keepAlive("HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok"), "ok", 3},
		{"bytes after the body", "GET", keepAlive(okResp + "HTTP/1.1 200 OK\r\n"), "ok", 3},
		{"body to close", "GET", answer("HTTP/1.1 200 OK\r\n\r\nok"), "ok", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, testConfig, testNames)
			o := newRawOrigin(t, tt.serve)
			c := h.client()
			c.Transport.(*http.Transport).DisableKeepAlives = false
			for i := range 3 {
				req, _ := http.NewRequest(tt.method, "http://allowed.test:"+o.port()+"/", nil)
				resp, err := c.Do(req)
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode/100 != 2 || string(b) != tt.wantBody {
					t.Fatalf("request %d: got %d %q, want 2xx %q", i, resp.StatusCode, b, tt.wantBody)
				}
			}
			if got := o.opened.Load(); got != tt.wantConns {
				t.Errorf("got %d upstream connections for 3 requests, want %d", got, tt.wantConns)
			}
		})
	}
}

// TestUpstreamStale: an origin that closes a kept-alive connection
// without saying so costs a replayable request nothing (it is sent again
// on a new connection) and a non-replayable one a 502.
func TestUpstreamStale(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	o := newRawOrigin(t, answer(okResp)) // one response per connection, unannounced close
	url := "http://allowed.test:" + o.port() + "/"
	c := h.client()
	c.Transport.(*http.Transport).DisableKeepAlives = false // the proxy pools only kept-alive requests
	send := func(method string) int {
		t.Helper()
		req, _ := http.NewRequest(method, url, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := send("GET"); got != 200 {
		t.Fatalf("first GET: got %d, want 200", got)
	}
	waitFor(t, "the origin to close its side", func() bool { return o.closed.Load() == 1 })
	if n := h.px.up.idleCount(); n != 1 {
		t.Fatalf("got %d pooled connections, want the stale one", n)
	}
	if got := send("GET"); got != 200 {
		t.Fatalf("GET on a stale pooled connection: got %d, want 200 after one retry", got)
	}
	waitFor(t, "the origin to close its side", func() bool { return o.closed.Load() == 2 })
	if got := send("DELETE"); got != 502 {
		t.Fatalf("DELETE on a stale pooled connection: got %d, want 502 (not replayable)", got)
	}
	if got := o.opened.Load(); got != 2 {
		t.Errorf("origin saw %d connections, want 2 (the DELETE is not sent again)", got)
	}
}

// TestUpstreamNotPooledEarlyClose: a body closed before its end closes
// the connection; nothing is drained and nothing is reused.
func TestUpstreamNotPooledEarlyClose(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	big := strings.Repeat("x", 1<<20)
	o := newRawOrigin(t, answer("HTTP/1.1 200 OK\r\nContent-Length: 1048576\r\n\r\n"+big, okResp))
	rq := &request{target: mustTarget(t, "http://allowed.test:"+o.port()+"/"), method: "GET"}
	rq.d = h.px.Policy().DecideRequest(&rq.target, "GET", "", 0)
	req, _ := http.NewRequest("GET", "http://allowed.test:"+o.port()+"/", nil)
	resp, err := h.px.up.roundTrip(req, rq, &h.px.Policy().Limits)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 10)
	io.ReadFull(resp.Body, buf)
	resp.Body.Close()
	if n := h.px.up.idleCount(); n != 0 {
		t.Errorf("got %d pooled connections after an early close, want 0", n)
	}
	waitFor(t, "the upstream connection to close", func() bool { return o.closed.Load() == 1 })
}

// TestUpstreamCloseIdle: a new policy closes pooled connections, and a
// connection in use when it arrives is closed, not pooled, when done.
func TestUpstreamCloseIdle(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	o := newRawOrigin(t, answer(okResp, okResp, okResp))
	url := "http://allowed.test:" + o.port() + "/"
	rq := &request{target: mustTarget(t, url), method: "GET"}
	rq.d = h.px.Policy().DecideRequest(&rq.target, "GET", "", 0)
	get := func() *http.Response {
		req, _ := http.NewRequest("GET", url, nil)
		resp, err := h.px.up.roundTrip(req, rq, &h.px.Policy().Limits)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := get()
	io.ReadAll(resp.Body)
	resp.Body.Close()
	if n := h.px.up.idleCount(); n != 1 {
		t.Fatalf("got %d pooled connections, want 1", n)
	}
	resp = get()                  // takes the pooled connection
	h.px.SetPolicy(h.px.Policy()) // a reload while the response is read
	io.ReadAll(resp.Body)
	resp.Body.Close()
	if n := h.px.up.idleCount(); n != 0 {
		t.Errorf("got %d pooled connections after a reload, want 0", n)
	}
	waitFor(t, "the upstream connection to close", func() bool { return o.closed.Load() == 1 })
}

// TestUpstreamIdleTimeout: a pooled connection is closed after
// IdleConnTimeout.
func TestUpstreamIdleTimeout(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	h.px.tr.IdleConnTimeout = 50 * time.Millisecond
	o := newRawOrigin(t, answer(okResp, okResp))
	if resp, body := h.do("GET", "http://allowed.test:"+o.port()+"/", nil, nil); resp == nil || resp.StatusCode != 200 {
		t.Fatalf("got %v %q", resp, body)
	}
	waitFor(t, "the idle connection to be closed", func() bool { return o.closed.Load() == 1 })
	if n := h.px.up.idleCount(); n != 0 {
		t.Errorf("got %d pooled connections, want 0", n)
	}
}

// TestUpstreamUnexpected: responses the synchronous path must not accept.
func TestUpstreamUnexpected(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, resp string
	}{
		{"switching protocols unasked", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n"},
		{"endless informational", strings.Repeat("HTTP/1.1 103 Early Hints\r\n\r\n", 10) + okResp},
		{"garbage", "SSH-2.0-OpenSSH\r\n\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, testConfig, testNames)
			o := newRawOrigin(t, answer(tt.resp))
			resp, body := h.do("GET", "http://allowed.test:"+o.port()+"/", nil, nil)
			if resp == nil || resp.StatusCode != 502 {
				t.Fatalf("got %v %q, want 502", resp, body)
			}
			if n := h.px.up.idleCount(); n != 0 {
				t.Errorf("got %d pooled connections, want 0", n)
			}
		})
	}
}

// TestUpstreamClientGone: a client that leaves while the origin has not
// answered releases the upstream connection at once, not after the
// response-header timeout.
func TestUpstreamClientGone(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	o := newRawOrigin(t, func(c net.Conn, br *bufio.Reader) {
		readHead(br)
		io.Copy(io.Discard, br) // never answer; wait for the proxy to close
	})
	c, err := net.Dial("tcp", h.proxyURL.Host)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "GET http://allowed.test:"+o.port()+"/ HTTP/1.1\r\nHost: allowed.test:"+o.port()+"\r\n\r\n")
	waitFor(t, "the request to reach the origin", func() bool { return o.opened.Load() == 1 })
	c.Close()
	waitFor(t, "the upstream connection to close", func() bool { return o.closed.Load() == 1 })
}

// TestUpstreamPerRule: connections are pooled per host and rule: a name
// and the literal address of the same origin do not share one.
func TestUpstreamPerRule(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	o := newRawOrigin(t, answer(okResp, okResp, okResp))
	c := h.client()
	c.Transport.(*http.Transport).DisableKeepAlives = false
	for _, u := range []string{"http://allowed.test:" + o.port() + "/", "http://127.0.0.1:" + o.port() + "/", "http://allowed.test:" + o.port() + "/"} {
		resp, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if got := o.opened.Load(); got != 2 {
		t.Errorf("got %d upstream connections, want 2 (one per host)", got)
	}
}

func mustTarget(t testing.TB, raw string) policy.Target {
	t.Helper()
	tg, err := policy.ParseURL(raw)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}
