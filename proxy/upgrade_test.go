package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestUpgradeCarriesNoClientBytes guards a channel that is closed by
// construction, not by a check: a GET with Upgrade: websocket on a read
// rule is a read to the classifier, and an upstream 101 would make it a
// two-way stream the classifier never sees. goproxy relays it only when the
// response body is writable, and egressd's counting body is not; a change
// that made it writable would open the channel, and this test fails then.
func TestUpgradeCarriesNoClientBytes(t *testing.T) {
	got := make(chan string, 1)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprintf(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: x\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		b, _ := io.ReadAll(io.LimitReader(brw, 11))
		got <- string(b)
	}))
	defer origin.Close()
	_, port := splitPort(origin.Listener.Addr().String())
	h := newHarness(t, testConfig, testNames)
	c, err := net.Dial("tcp", h.proxyURL.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET http://docs.test:%s/chat HTTP/1.1\r\nHost: docs.test:%s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", port, port)
	br := bufio.NewReader(c)
	line, _ := br.ReadString('\n')
	if strings.Contains(line, "101") {
		for {
			l, err := br.ReadString('\n')
			if err != nil || l == "\r\n" {
				break
			}
		}
		io.WriteString(c, "EXFIL-BYTES")
		select {
		case s := <-got:
			if s != "" {
				t.Errorf("bytes written after a 101 on a read rule reached the origin: %q", s)
			}
		case <-time.After(4 * time.Second):
		}
	}
}
