package daemon

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/event"
	"github.com/egressd/egressd/internal/testutil"
	"github.com/egressd/egressd/policy"
)

// openTunnel opens a CONNECT tunnel to target through the proxy and proves
// it carries bytes.
func openTunnel(t *testing.T, proxyAddr, target string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", proxyAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	status, err := br.ReadString('\n')
	if err != nil || !strings.Contains(status, " 200 ") {
		rest, _ := br.Peek(br.Buffered())
		t.Fatalf("CONNECT %s: %q %v %s", target, status, err, rest)
	}
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if l == "\r\n" {
			break
		}
	}
	if !echoes(c) {
		t.Fatal("a new tunnel does not carry bytes")
	}
	return c
}

// echoes reports whether one round trip through the tunnel works.
func echoes(c net.Conn) bool {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		return false
	}
	b := make([]byte, 4)
	_, err := io.ReadFull(c, b)
	return err == nil && string(b) == "ping"
}

// TestStopDrainsThenSeals: a stop with many open tunnels keeps them
// working during limits.shutdown_grace, closes the rest at its end, and
// writes every tunnel's open record, close record and final decision
// before the audit seal: the log verifies intact, sealed, no tunnel left
// open. (The issue lost 121 of 2,000 tunnels' records, and the log still
// verified.)
func TestStopDrainsThenSeals(t *testing.T) {
	t.Parallel()
	const n = 40
	echo := testutil.EchoServer(t)
	_, echoPort, _ := net.SplitHostPort(echo)
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	sink, err := audit.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sink.Close() })
	cfg := fmt.Sprintf(`version: 1
listen:
  admin: 127.0.0.1:0
limits:
  shutdown_grace: 2s
allow:
  - name: echo
    cidrs: [127.0.0.1/32]
    ports: [%s]
    pages: ["*"]
    tls: false
`, echoPort)
	f := startWith(t, func(o *Options) {
		o.Load = func() (*policy.Policy, error) { return policy.Parse(strings.NewReader(cfg), "t.yaml") }
		o.Logger = slog.New(sink.Handler(slog.NewTextHandler(io.Discard, nil)))
		o.Audit = sink
	})
	conns := make([]net.Conn, n)
	for i := range conns {
		conns[i] = openTunnel(t, f.d.proxyAddr, echo)
	}
	stopped := make(chan error, 1)
	start := time.Now()
	go func() { stopped <- f.stop() }()
	select {
	case <-f.d.Draining():
	case <-time.After(10 * time.Second):
		t.Fatal("the stop did not start draining")
	}
	// during the drain: open tunnels still carry bytes; half of them end
	// on their own, the rest are closed at the grace's end
	for i, c := range conns {
		if !echoes(c) {
			t.Errorf("tunnel %d stopped working during the drain", i)
		}
		if i%2 == 0 {
			c.Close()
		}
	}
	select {
	case err := <-stopped:
		if err != nil {
			t.Errorf("stop: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the stop did not end")
	}
	t.Logf("stop took %v with %d tunnels left to the grace", time.Since(start), n/2)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := audit.Verify(bytes.NewReader(b), audit.VerifyOptions{})
	if err != nil {
		t.Fatalf("audit verify after the stop: %v", err)
	}
	opens, closes, decisions := 0, 0, 0
	for l := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		var r event.Record
		if err := json.Unmarshal([]byte(l), &r); err != nil || r.Msg != event.Msg || r.Method != "CONNECT" {
			continue
		}
		switch {
		case r.Tunnel == event.TunnelOpen:
			opens++
		case r.Tunnel == event.TunnelClose:
			closes++
		case r.IsDecision():
			decisions++
		}
	}
	if opens != n || closes != n || decisions != n {
		t.Errorf("records before the seal: %d tunnel opens, %d closes, %d decisions; want %d of each", opens, closes, decisions, n)
	}
	if !rep.Sealed || rep.Tunnels != n || rep.OpenTunnels != 0 {
		t.Errorf("verify: sealed %v, %d tunnels, %d open; want sealed, %d, 0", rep.Sealed, rep.Tunnels, rep.OpenTunnels, n)
	}
}

// TestStopLetsRequestsFinish: a plain request in flight when the stop
// begins (no tunnel open) is answered within the grace, not cut.
func TestStopLetsRequestsFinish(t *testing.T) {
	t.Parallel()
	got, release := make(chan struct{}), make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		close(got)
		<-release
		io.WriteString(w, "late but whole")
	}))
	t.Cleanup(slow.Close)
	cfg := fmt.Sprintf("version: 1\nlisten:\n  admin: 127.0.0.1:0\nlimits:\n  shutdown_grace: 5s\nallow:\n  - name: slow\n    cidrs: [127.0.0.1/32]\n    ports: [%s]\n    pages: [\"*\"]\n", port(slow.URL))
	f := startWith(t, func(o *Options) {
		o.Load = func() (*policy.Policy, error) { return policy.Parse(strings.NewReader(cfg), "t.yaml") }
	})
	type answer struct {
		code int
		body string
		err  error
	}
	answers := make(chan answer, 1)
	go func() {
		resp, err := f.client.Get(slow.URL)
		if err != nil {
			answers <- answer{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		answers <- answer{resp.StatusCode, string(b), err}
	}()
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the request did not reach the origin")
	}
	stopped := make(chan error, 1)
	go func() { stopped <- f.stop() }()
	select {
	case <-f.d.Draining():
	case <-time.After(10 * time.Second):
		t.Fatal("the stop did not start draining")
	}
	release <- struct{}{}
	a := <-answers
	if a.err != nil || a.code != 200 || a.body != "late but whole" {
		t.Errorf("a request in flight at the stop: %d %q %v, want 200 and its whole body", a.code, a.body, a.err)
	}
	if err := <-stopped; err != nil {
		t.Errorf("stop: %v", err)
	}
}
