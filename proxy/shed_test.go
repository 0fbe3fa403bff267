package proxy

import (
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/egressd/egressd/policy"
)

// TestShedAtFDCeiling: near the descriptor ceiling the proxy answers new
// clients 503 fd-limit and counts them, keeping the reserve for the rest
// of egressd; once descriptors are back it accepts again.
func TestShedAtFDCeiling(t *testing.T) {
	// Not parallel: it counts this process's descriptors, which other tests open and close.
	if runtime.GOOS != "linux" {
		t.Skip("descriptors are counted on Linux only")
	}
	pol, err := policy.Parse(strings.NewReader(strings.ReplaceAll(testConfig, "{DNS}", "127.0.0.1:53")), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	base := fdCount()
	reg := prometheus.NewRegistry()
	// room for a few clients above a reserve of 8
	px := New(pol, Config{Registry: reg, FDReserve: 8, FDLimit: func() int { return base + 24 }})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go px.Serve(l)
	t.Cleanup(func() { px.Shutdown(t.Context()) })

	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	shed := 0
	for range 12 {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		b, _ := io.ReadAll(c)
		if len(b) > 0 {
			if !strings.HasPrefix(string(b), "HTTP/1.1 503") || !strings.Contains(string(b), "X-Egressd-Deny: fd-limit") {
				t.Fatalf("a shed client got %q", b)
			}
			shed++
		}
	}
	if shed == 0 || shed == 12 {
		t.Fatalf("%d of 12 clients shed: want some admitted, then the rest shed", shed)
	}
	if got := gathered(t, reg, "egressd_connections_shed_total"); int(got) != shed {
		t.Errorf("egressd_connections_shed_total %v, want %d", got, shed)
	}
	for _, c := range held {
		c.Close()
	}
	held = nil
	// descriptors back: a new client is admitted (after the next sample)
	waitFor(t, "a client admitted again", func() bool {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "GET http://127.0.0.1:1/ HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		b := make([]byte, 200)
		n, _ := c.Read(b)
		return n > 0 && !strings.Contains(string(b[:n]), "fd-limit")
	})
}

// gathered reads one unlabelled counter from reg.
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
