package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Fault origins on 127.0.0.1: upstreams that stall, dribble, send endless
// heads or never answer must not pin egressd (issue 17.3).

func faultConfig(limits string) string {
	if limits == "" {
		return testConfig
	}
	return testConfig + "limits:\n" + limits
}

// TestFaultClientGone: a client that leaves while the origin stalls
// mid-body releases the upstream socket at once — on the bodiless path
// and on the Transport path (a request with a body) — though no timeout
// (default 60 s idle) has fired.
func TestFaultClientGone(t *testing.T) {
	t.Parallel()
	for _, method := range []string{"GET", "POST"} {
		t.Run(method, func(t *testing.T) {
			h := newHarness(t, testConfig, testNames)
			released := make(chan struct{})
			o := newRawOrigin(t, func(c net.Conn, br *bufio.Reader) {
				if _, ok := readHead(br); !ok {
					return
				}
				if method == "POST" {
					io.ReadFull(br, make([]byte, 4))
				}
				// 8 KiB: past the server's write buffer, so the client
				// sees the head while egressd waits in the body
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n"+strings.Repeat("x", 8<<10))
				io.Copy(io.Discard, br) // until egressd closes the connection
				close(released)
			})
			c, err := net.Dial("tcp", h.proxyURL.Host)
			if err != nil {
				t.Fatal(err)
			}
			body := ""
			if method == "POST" {
				body = "Content-Length: 4\r\n\r\nbody"
			} else {
				body = "\r\n"
			}
			fmt.Fprintf(c, "%s http://allowed.test:%s/ HTTP/1.1\r\nHost: allowed.test:%s\r\n%s", method, o.port(), o.port(), body)
			// the head and some body reached the client: egressd is in
			// the body phase, waiting on the stalled origin
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			got, err := io.ReadAtLeast(c, make([]byte, 4<<10), 4<<10)
			if err != nil {
				t.Fatalf("reading the response: %d bytes, %v", got, err)
			}
			t0 := time.Now()
			c.Close() // the client leaves
			defer func() { t.Logf("released after %v", time.Since(t0)) }()
			select {
			case <-released:
			case <-time.After(3 * time.Second):
				t.Fatal("the upstream connection outlived its client")
			}
		})
	}
}

// TestFaultStalledBody: a body that stops for longer than
// limits.response_idle_timeout is cut, and so is one that dribbles for
// longer than limits.response_timeout.
func TestFaultStalledBody(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, limits string
		serve        func(c net.Conn)
	}{
		{"stall", "  response_idle_timeout: 200ms\n", func(c net.Conn) {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
			c.Read(make([]byte, 1)) // until egressd closes
		}},
		{"dribble", "  response_timeout: 400ms\n", func(c net.Conn) {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
			for {
				if _, err := io.WriteString(c, "x"); err != nil {
					return
				}
				time.Sleep(20 * time.Millisecond) // the fault: a byte at a time
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, faultConfig(tt.limits), testNames)
			o := newRawOrigin(t, func(c net.Conn, br *bufio.Reader) {
				if _, ok := readHead(br); ok {
					tt.serve(c)
				}
			})
			start := time.Now()
			resp, err := h.client().Get("http://allowed.test:" + o.port() + "/")
			if err != nil {
				t.Fatal(err)
			}
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil {
				t.Fatal("a cut body read to a clean end: the client cannot tell it is incomplete")
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Fatalf("the body was cut after %v", d)
			}
			waitFor(t, "the upstream connection to close", func() bool { return o.closed.Load() == 1 })
		})
	}
}

// TestFaultSlowHeadStreams: the status line, headers and the first chunk
// of a slow response reach the client at once (long-poll, streaming),
// not when 4 KiB of body have arrived.
func TestFaultSlowHeadStreams(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	o := newRawOrigin(t, func(c net.Conn, br *bufio.Reader) {
		if _, ok := readHead(br); ok {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
			c.Read(make([]byte, 1)) // stalls until the test ends
		}
	})
	c := h.client()
	c.Timeout = 0
	req, _ := http.NewRequest("GET", "http://allowed.test:"+o.port()+"/", nil)
	type result struct {
		first string
		err   error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := c.Do(req)
		if err != nil {
			done <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b := make([]byte, 5)
		_, err = io.ReadFull(resp.Body, b)
		done <- result{string(b), err}
	}()
	select {
	case r := <-done:
		if r.err != nil || r.first != "hello" {
			t.Fatalf("got %q, %v", r.first, r.err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the head and first chunk of a slow response were held back")
	}
}

// TestFaultResponseHead: a response head over limits.response_header_bytes
// is refused with 502 without reading it all, and one that does not come
// within limits.response_header_timeout gets 504.
func TestFaultResponseHead(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, limits string
		serve        func(c net.Conn)
		want         int
	}{
		{"20 MB head", "", func(c net.Conn) {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nX-Big: ")
			chunk := strings.Repeat("a", 64<<10)
			for range 320 { // 20 MiB
				if _, err := io.WriteString(c, chunk); err != nil {
					return
				}
			}
			io.WriteString(c, "\r\nContent-Length: 0\r\n\r\n")
		}, http.StatusBadGateway},
		{"no head", "  response_header_timeout: 200ms\n", func(c net.Conn) {
			c.Read(make([]byte, 1))
		}, http.StatusGatewayTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, faultConfig(tt.limits), testNames)
			o := newRawOrigin(t, func(c net.Conn, br *bufio.Reader) {
				if _, ok := readHead(br); ok {
					tt.serve(c)
				}
			})
			start := time.Now()
			resp, err := h.client().Get("http://allowed.test:" + o.port() + "/")
			if err != nil {
				t.Fatalf("%v (after %v)", err, time.Since(start))
			}
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Fatalf("got %d, want %d", resp.StatusCode, tt.want)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Fatalf("answered after %v", d)
			}
		})
	}
}
