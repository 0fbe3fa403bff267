package proxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/policy"
)

func TestHelloDeadline(t *testing.T) {
	t.Parallel()
	tests := []struct {
		asked string
		want  time.Duration
		ok    bool
	}{
		{"", policy.DefaultHelloTimeout, false},
		{"250ms", 250 * time.Millisecond, true},
		{"1ms", MinHelloDeadline, true},           // no busy loop of instant cuts
		{"5s", policy.DefaultHelloTimeout, false}, // not shorter: the proxy's own
		{"1h", policy.DefaultHelloTimeout, false}, // never longer
		{"-1s", MinHelloDeadline, true},           // a negative wait is the shortest
		{"soon", policy.DefaultHelloTimeout, false},
		{strings.Repeat("1", 40) + "ms", policy.DefaultHelloTimeout, false},
	}
	for _, tt := range tests {
		if got, ok := shorterDeadline(tt.asked, policy.DefaultHelloTimeout); got != tt.want || ok != tt.ok {
			t.Errorf("%q: got %v %v, want %v %v", tt.asked, got, ok, tt.want, tt.ok)
		}
	}
}

func FuzzHelloDeadline(f *testing.F) {
	for _, s := range []string{"", "250ms", "1h", "-1s", "1e9ns", "0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, asked string) {
		got, ok := shorterDeadline(asked, policy.DefaultHelloTimeout)
		if got > policy.DefaultHelloTimeout || got < MinHelloDeadline || !ok && got != policy.DefaultHelloTimeout {
			t.Errorf("%q: got %v %v", asked, got, ok)
		}
	})
}

// TestHelloDeadlineAsked: a CONNECT asking for a short ClientHello
// deadline gets it, says so in its 200, and a silent tunnel (inspected or
// spliced) is cut within it, though the proxy's own deadline is 5 s: the
// self-test's silent-tunnel probe sees the deadline hold without the wait.
func TestHelloDeadlineAsked(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	port := h.tlsO.port()
	for _, target := range []string{"docs.test:" + port, "allowed.test:" + port} {
		c, err := net.Dial("tcp", h.proxyURL.Host)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s: 200ms\r\n\r\n", target, target, HelloDeadlineHeader)
		c.SetReadDeadline(time.Now().Add(4 * time.Second))
		var head []byte
		one := make([]byte, 1)
		for !bytes.HasSuffix(head, []byte("\r\n\r\n")) {
			if _, err := c.Read(one); err != nil {
				t.Fatalf("CONNECT %s: %v after %q", target, err, head)
			}
			head = append(head, one[0])
		}
		if !bytes.HasPrefix(head, []byte("HTTP/1.1 200")) || !bytes.Contains(head, []byte(HelloDeadlineHeader+": 200ms\r\n")) {
			t.Fatalf("CONNECT %s: %q, want 200 with the deadline applied", target, head)
		}
		if _, err := c.Read(one); err == nil || time.Since(start) > 3*time.Second {
			t.Errorf("silent tunnel to %s asking 200ms: still open after %s (%v)", target, time.Since(start), err)
		}
	}
}

// TestDialDeadlineAsked: a CONNECT asking for a short dial deadline gets
// egressd's 504 upstream-timeout within it when the resolver does not
// answer, rather than no answer at all before the client gives up: the
// self-test reads that as an outage (untestable), not as "no answer".
func TestDialDeadlineAsked(t *testing.T) {
	t.Parallel()
	h := newHarnessWith(t, testConfig, testNames, func(c *Config) {
		c.ResolverDial = func(ctx context.Context, _, _ string) (net.Conn, error) {
			<-ctx.Done() // a resolver that never answers
			return nil, ctx.Err()
		}
	})
	target := "docs.test:" + h.tlsO.port()
	c, err := net.Dial("tcp", h.proxyURL.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s: 300ms\r\n\r\n", target, target, DialDeadlineHeader)
	c.SetReadDeadline(time.Now().Add(4 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("CONNECT with a 300ms dial deadline: no answer after %v: %v", time.Since(start), err)
	}
	if resp.StatusCode != http.StatusGatewayTimeout || resp.Header.Get("X-Egressd-Deny") != "upstream-timeout" || time.Since(start) > 2*time.Second {
		t.Errorf("got %d %q after %v, want 504 upstream-timeout within the deadline", resp.StatusCode, resp.Header.Get("X-Egressd-Deny"), time.Since(start))
	}
}
