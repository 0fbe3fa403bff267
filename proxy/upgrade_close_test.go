package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestWebSocketCloseClosesUpstream (red team): the hole
// TestCloseBeforeRelayClosesUpstream fixed for spliced tunnels is still open
// for a WebSocket in an inspected tunnel. A quarantine, a reload's cut or
// the drain closes the tracked conn (the hijacked inner connection, hc)
// only; relayUpgrade's pipe then closes the write side of the origin's
// connection and waits on an origin that says nothing, until
// limits.idle_timeout (5 min by default). The WebSocket keeps no close
// record, the enclosing tunnel stays open (its inner server waits for the
// handler), OpenTunnels never returns to 0 and Drain waits for it.
func TestWebSocketCloseClosesUpstream(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		close func(x *Proxy)
	}{
		{"quarantine", func(x *Proxy) { x.Quarantine("127.0.0.1") }},
		{"drain", func(x *Proxy) { x.ids.closeAll() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, wsConfig, wsNames)
			port := silentWSOrigin(t, h)
			c := inspectedTLS(t, h, "ws.test", port)
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			fmt.Fprintf(c, "GET /chat HTTP/1.1\r\nHost: ws.test:%s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nOrigin: https://ws.test/\r\n\r\n", port)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
				t.Fatalf("handshake through egressd: %v %v\n%s", resp, err, h.logs.String())
			}
			waitOpen(t, h.px, 2) // the CONNECT tunnel and the WebSocket
			tc.close(h.px)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			if err := h.px.waitTunnels(ctx); err != nil {
				t.Fatalf("%d tunnel(s) still open 3 s after the %s closed them: the WebSocket relay waits on a silent origin (until limits.idle_timeout)", h.px.OpenTunnels(), tc.name)
			}
		})
	}
}

// silentWSOrigin answers one WebSocket handshake with a 101 and then
// neither reads, writes nor closes until the test ends.
func silentWSOrigin(t *testing.T, h *harness) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	tl := tls.NewListener(l, &tls.Config{NextProtos: []string{"http/1.1"}, GetCertificate: func(hi *tls.ClientHelloInfo) (*tls.Certificate, error) {
		return h.upCA.Leaf(hi.ServerName)
	}})
	go func() {
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			go func() {
				br := bufio.NewReader(c)
				if _, err := http.ReadRequest(br); err != nil {
					return
				}
				io := "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n"
				c.Write([]byte(io))
				// silent from here: no read, no write, no close
			}()
		}
	}()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}

// waitOpen waits until n tunnels are open (their open records written).
func waitOpen(t *testing.T, x *Proxy, n int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for x.OpenTunnels() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d tunnels open, want %d", x.OpenTunnels(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
