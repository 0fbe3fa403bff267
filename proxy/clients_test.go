package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestClientConnsPerIdentity: conns_per_identity counts requests and
// tunnels in flight, so an idle keep-alive connection held no slot: one
// source held any number of them (300 at conns_per_identity 4, measured
// through a daemon), bounded only by the descriptor limit, whose reserve
// then shed every other sandbox's clients with 503 fd-limit. An identity's
// open client connections are bounded too
// (limits.client_conns_per_identity, default 4 × conns_per_identity): the
// one past it is answered 429 conn-limit before it sends anything, and a
// closed connection gives its slot back.
func TestClientConnsPerIdentity(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig+"limits:\n  conns_per_identity: 2\n", testNames)
	const limit = 4 * 2
	open := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", h.proxyURL.Host)
		if err != nil {
			t.Fatal(err)
		}
		return c, bufio.NewReader(c)
	}
	// one finished request each, then idle: no request slot held
	get := func(c net.Conn, br *bufio.Reader) (*http.Response, error) {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, "GET http://denied.test/ HTTP/1.1\r\nHost: denied.test\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for i := range limit {
		c, br := open()
		held = append(held, c)
		resp, err := get(c, br)
		if err != nil || resp.StatusCode != http.StatusForbidden {
			t.Fatalf("connection %d: %v %v, want 403 (a denied host)", i+1, resp, err)
		}
	}
	c, br := open()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(br, nil) // sent before any request
	if err != nil || resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("X-Egressd-Deny") != "conn-limit" {
		t.Fatalf("connection %d of one source with %d idle ones open: %v %v, want 429 conn-limit", limit+1, limit, resp, err)
	}
	c.Close()
	waitLog(t, h, "limits.client_conns_per_identity")

	held[0].Close()
	held = held[1:]
	waitFor(t, "a closed connection to give its slot back", func() bool {
		c, br := open()
		defer c.Close()
		resp, err := get(c, br)
		return err == nil && resp.StatusCode == http.StatusForbidden && !strings.Contains(resp.Header.Get("X-Egressd-Deny"), "conn-limit")
	})
}
