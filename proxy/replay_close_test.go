package proxy

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestCloseDuringReplayWriteLogsTheCut (red team): splice now
// makes a tracker close run closeUp from tn.onCut(closeUp) on, which is
// before the replay of tn.pre (the ClientHello, or bytes sent with the
// CONNECT head) upstream. A quarantine that lands between onCut and the
// end of that Write closes the upstream under the Write; splice then takes
// its `return false` on the write error, which logs nothing: the tunnel
// gets no decision line at all (no deny line with reason quarantine, no
// byte counts), only its open and close records. A quarantine a moment
// earlier (onCut sees stopped) or later (the relay) logs the deny line.
// Before a972310 the tracker never closed the upstream, so this write did
// not fail on a quarantine.
func TestCloseDuringReplayWriteLogsTheCut(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		beforeRelay bool // close in the beforeRelay hook (control), else in the replay write
	}{
		{"before relay (control)", true},
		{"during replay write", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, testConfig, testNames)
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			go func() { // an upstream that reads and never speaks
				c, err := l.Accept()
				if err == nil {
					t.Cleanup(func() { c.Close() })
				}
			}()
			h.px.beforeRelay = func() {
				if tc.beforeRelay {
					h.px.Quarantine("agent-a")
					return
				}
				// The tunnel's goroutine runs this hook: wrap its upstream so
				// the quarantine lands just before the replay's Write, i.e.
				// after splice's first onCut(closeUp) returned true.
				for c := range h.px.ids.openTunnels() {
					if tr, ok := c.(*trackedConn); ok && tr.tn.up != nil {
						tr.tn.up = &closeFirstConn{Conn: tr.tn.up, before: func() { h.px.Quarantine("agent-a") }}
					}
				}
			}
			_, port := splitPort(l.Addr().String())
			c, err := net.Dial("tcp", h.proxyURL.Host)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// Bytes in the same write as the CONNECT head become tn.pre.
			fmt.Fprintf(c, "CONNECT ssh.test:%s HTTP/1.1\r\nHost: ssh.test\r\nProxy-Authorization: Basic %s\r\n\r\nSSH-2.0-test\r\n", port, basic("agent-a"))
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			if err := h.px.waitTunnels(ctx); err != nil {
				t.Fatalf("%d tunnel(s) still open", h.px.OpenTunnels())
			}
			if _, err := h.logs.Wait(2*time.Second, nil, `"reason":"quarantine"`); err != nil {
				var lines []string
				for _, ln := range strings.Split(h.logs.String(), "\n") {
					if strings.Contains(ln, "ssh.test") {
						lines = append(lines, ln)
					}
				}
				t.Errorf("a tunnel quarantined %s has no decision line with reason quarantine; its lines:\n%s", tc.name, strings.Join(lines, "\n"))
			}
		})
	}
}

// closeFirstConn runs before once, ahead of its first Write.
type closeFirstConn struct {
	net.Conn
	before func()
	once   sync.Once
}

func (c *closeFirstConn) Write(b []byte) (int, error) {
	c.once.Do(c.before)
	return c.Conn.Write(b)
}
