package proxy

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"github.com/egressd/egressd/policy"
)

// wsConfig adds an inspected rule that allows WebSocket upgrades (ws.test)
// next to testConfig's docs rule, which does not.
var wsConfig = strings.Replace(testConfig, "allow:\n", `allow:
  - name: ws
    hosts: [ws.test]
    cidrs: [127.0.0.0/8]
    ports: ["1-65535"]
    pages: [read]
    paths: ["/chat*"]
    upgrade: [websocket]
`, 1)

var wsNames = map[string][]string{"ws.test": {"127.0.0.1"}, "docs.test": {"127.0.0.1"}}

func init() {
	for k, v := range testNames {
		if _, ok := wsNames[k]; !ok {
			wsNames[k] = v
		}
	}
}

// wsOrigin is a WebSocket echo on a 127.0.0.1 TLS origin signed by the
// harness's upstream CA; upgrades counts the handshakes it answered.
func wsOrigin(t *testing.T, h *harness) (port string, upgrades *int64Counter) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &int64Counter{}
	echo := websocket.Server{
		Handshake: func(*websocket.Config, *http.Request) error { return nil },
		Handler: func(ws *websocket.Conn) {
			n.add()
			for { // whole messages: io.Copy would split one into frames
				var m string
				if websocket.Message.Receive(ws, &m) != nil || websocket.Message.Send(ws, m) != nil {
					return
				}
			}
		},
	}
	srv := &http.Server{Handler: echo, ErrorLog: log.New(io.Discard, "", 0)}
	go srv.Serve(tls.NewListener(l, &tls.Config{GetCertificate: func(hi *tls.ClientHelloInfo) (*tls.Certificate, error) {
		return h.upCA.Leaf(hi.ServerName)
	}}))
	t.Cleanup(func() { srv.Close() })
	_, port, _ = net.SplitHostPort(l.Addr().String())
	return port, n
}

type int64Counter struct {
	mu sync.Mutex
	n  int64
}

func (c *int64Counter) add() { c.mu.Lock(); c.n++; c.mu.Unlock() }
func (c *int64Counter) get() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// inspectedTLS opens an inspected tunnel to host:port and terminates TLS
// with egressd's CA.
func inspectedTLS(t *testing.T, h *harness, host, port string) *tls.Conn {
	t.Helper()
	c := h.connect(t, host+":"+port)
	tc := tls.Client(c, &tls.Config{ServerName: host, RootCAs: h.mitmCA.Pool(), NextProtos: []string{"http/1.1"}})
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	if err := tc.Handshake(); err != nil {
		t.Fatalf("inspected handshake with %s: %v", host, err)
	}
	return tc
}

// TestWebSocketAllowed: an inspected rule with upgrade: [websocket]
// relays a real WebSocket echo, logged as an allowed upgrade with its
// byte counts.
func TestWebSocketAllowed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, wsConfig, wsNames)
	port, ups := wsOrigin(t, h)
	tc := inspectedTLS(t, h, "ws.test", port)
	cfg, err := websocket.NewConfig("wss://ws.test:"+port+"/chat", "https://ws.test/")
	if err != nil {
		t.Fatal(err)
	}
	ws, err := websocket.NewClient(cfg, tc)
	if err != nil {
		t.Fatalf("WebSocket handshake through egressd: %v\n%s", err, h.logs.String())
	}
	for _, msg := range []string{"hello", strings.Repeat("x", 70000)} {
		if err := websocket.Message.Send(ws, msg); err != nil {
			t.Fatal(err)
		}
		var got string
		if err := websocket.Message.Receive(ws, &got); err != nil || got != msg {
			t.Fatalf("echo of %d bytes: %d bytes, %v", len(msg), len(got), err)
		}
	}
	if ups.get() != 1 {
		t.Errorf("origin answered %d upgrades, want 1", ups.get())
	}
	ws.Close()
	line := waitLog(t, h, `"status":101`)
	for _, want := range []string{`"decision":"allow"`, `"rule":"ws"`, "upgrade allowed: websocket", `"inspected":true`} {
		if !strings.Contains(line, want) {
			t.Errorf("log line lacks %s: %s", want, line)
		}
	}
	if strings.Contains(line, `"bytes_out":0,`) || strings.Contains(line, `"bytes_in":0,`) {
		t.Errorf("bytes not counted: %s", line)
	}
}

// rawUpgrade sends an upgrade request inside an inspected tunnel and
// returns the response.
func rawUpgrade(t *testing.T, h *harness, host, port, path, extra string) *http.Response {
	t.Helper()
	tc := inspectedTLS(t, h, host, port)
	fmt.Fprintf(tc, "GET %s HTTP/1.1\r\nHost: %s:%s\r\nConnection: Upgrade\r\n%s\r\n", path, host, port, extra)
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatalf("upgrade %s%s: %v", host, path, err)
	}
	return resp
}

const wsHeaders = "Upgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"

// TestUpgradeRefused: without upgrade: [websocket] a WebSocket handshake
// is refused (403 upgrade), h2c is refused even where WebSocket is
// allowed, and an allowed rule's other checks still apply to the
// handshake; each refusal is logged and none reaches the origin.
func TestUpgradeRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, wsConfig, wsNames)
	port, ups := wsOrigin(t, h)
	tests := []struct {
		name, host, path, extra, reason string
	}{
		{"rule without upgrade", "docs.test", "/chat", wsHeaders, "upgrade"},
		{"h2c", "ws.test", "/chat", "Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n", "upgrade"},
		{"h2c where the path is refused", "ws.test", "/admin", "Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n", "upgrade"},
		{"h2c on a mirror rule", "pypi.test", "/", "Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n", "upgrade"},
		{"unknown protocol", "ws.test", "/chat", "Upgrade: irc\r\n", "upgrade"},
		{"path outside the rule", "ws.test", "/admin", wsHeaders, "path"},
		{"method override", "ws.test", "/chat", wsHeaders + "X-HTTP-Method-Override: DELETE\r\n", "method"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := rawUpgrade(t, h, tt.host, port, tt.path, tt.extra)
			if resp.StatusCode != 403 || resp.Header.Get("X-Egressd-Deny") != tt.reason {
				t.Errorf("%d %q, want 403 %s", resp.StatusCode, resp.Header.Get("X-Egressd-Deny"), tt.reason)
			}
		})
	}
	// a cleartext (absolute-form) handshake is refused even where the
	// rule allows WebSocket: only inspected tunnels relay one
	resp, _ := h.do("GET", "http://ws.test:"+h.plain.port()+"/chat", nil, map[string]string{"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version": "13"})
	if resp == nil || resp.StatusCode != 403 || resp.Header.Get("X-Egressd-Deny") != "upgrade" {
		t.Errorf("cleartext WebSocket: %v, want 403 upgrade", resp)
	}
	if n := ups.get(); n != 0 || h.plain.hits.Load() != 0 {
		t.Errorf("origins answered %d+%d refused upgrades", n, h.plain.hits.Load())
	}
	line := waitLog(t, h, "upgrade refused")
	if !strings.Contains(line, `"decision":"deny"`) || !strings.Contains(line, `"reason":"upgrade"`) {
		t.Errorf("refusal logged as %s", line)
	}
}

// TestWebSocketIdleAndReload: an open WebSocket is closed after
// limits.idle_timeout without traffic, and by a reload whose rule no
// longer allows the upgrade (logged as a denial, reason upgrade).
func TestWebSocketIdleAndReload(t *testing.T) {
	t.Parallel()
	open := func(t *testing.T, h *harness, port string) *websocket.Conn {
		tc := inspectedTLS(t, h, "ws.test", port)
		tc.SetDeadline(time.Time{})
		cfg, _ := websocket.NewConfig("wss://ws.test:"+port+"/chat", "https://ws.test/")
		ws, err := websocket.NewClient(cfg, tc)
		if err != nil {
			t.Fatalf("handshake: %v", err)
		}
		if err := websocket.Message.Send(ws, "ping"); err != nil {
			t.Fatal(err)
		}
		var got string
		if err := websocket.Message.Receive(ws, &got); err != nil || got != "ping" {
			t.Fatalf("echo: %q %v", got, err)
		}
		return ws
	}
	t.Run("idle", func(t *testing.T) {
		h := newHarness(t, strings.Replace(wsConfig, "version: 1\n", "version: 1\nlimits:\n  idle_timeout: 300ms\n", 1), wsNames)
		port, _ := wsOrigin(t, h)
		ws := open(t, h, port)
		start := time.Now()
		ws.SetReadDeadline(time.Now().Add(5 * time.Second))
		var got string
		if err := websocket.Message.Receive(ws, &got); err == nil {
			t.Fatalf("an idle WebSocket got %q", got)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("idle WebSocket closed after %v", d)
		}
		waitLog(t, h, "limits.idle_timeout")
	})
	t.Run("quarantine", func(t *testing.T) {
		h := newHarness(t, wsConfig, wsNames)
		port, _ := wsOrigin(t, h)
		ws := open(t, h, port)
		h.px.Quarantine("127.0.0.1")
		ws.SetReadDeadline(time.Now().Add(3 * time.Second))
		var got string
		if err := websocket.Message.Receive(ws, &got); err == nil || isTimeout(err) {
			t.Errorf("a quarantined identity's WebSocket is still open: %q %v", got, err)
		}
		line := waitLog(t, h, `"status":101`)
		if !strings.Contains(line, `"decision":"deny"`) || !strings.Contains(line, `"reason":"quarantine"`) {
			t.Errorf("quarantine cut logged as %s", line)
		}
	})
	t.Run("reload", func(t *testing.T) {
		h := newHarness(t, wsConfig, wsNames)
		port, _ := wsOrigin(t, h)
		ws := open(t, h, port)
		h.px.SetPolicy(h.px.Policy()) // a reload that still allows it keeps it
		if err := websocket.Message.Send(ws, "still"); err != nil {
			t.Fatal(err)
		}
		var echo string
		ws.SetReadDeadline(time.Now().Add(3 * time.Second))
		if err := websocket.Message.Receive(ws, &echo); err != nil || echo != "still" {
			t.Fatalf("after a reload that still allows it: %q %v", echo, err)
		}
		cfg := strings.Replace(wsConfig, "    upgrade: [websocket]\n", "", 1)
		cfg = strings.ReplaceAll(cfg, "{DNS}", h.px.Policy().Resolver.Upstreams[0].String())
		next, err := policy.Parse(strings.NewReader(cfg), "next.yaml")
		if err != nil {
			t.Fatal(err)
		}
		h.px.SetPolicy(next)
		ws.SetReadDeadline(time.Now().Add(3 * time.Second))
		var got string
		if err := websocket.Message.Receive(ws, &got); err == nil || isTimeout(err) {
			t.Errorf("a WebSocket the new policy refuses is still open: %q %v", got, err)
		}
		line := waitLog(t, h, "closed on reload")
		if !strings.Contains(line, `"decision":"deny"`) || !strings.Contains(line, `"reason":"upgrade"`) {
			t.Errorf("reload cut logged as %s", line)
		}
	})
}

// TestUpgradeCarriesNoClientBytes: a GET with Upgrade: websocket on a read
// rule is a read to the classifier, and an upstream 101 would make it a
// two-way stream the classifier never sees. On the plain path egressd
// refuses every switch (upgrade) and never lets goproxy relay one; a change
// that let goproxy relay it would open the channel, and this test fails
// then.
func TestUpgradeCarriesNoClientBytes(t *testing.T) {
	t.Parallel()
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
