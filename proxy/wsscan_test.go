package proxy

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/websocket"

	"github.com/egressd/egressd/honeytoken"
)

// wsFrame builds one masked client frame (RFC 6455) of payload.
func wsFrame(opcode byte, fin bool, payload []byte, mask [4]byte) []byte {
	b0 := opcode
	if fin {
		b0 |= 0x80
	}
	f := []byte{b0}
	switch n := len(payload); {
	case n < 126:
		f = append(f, 0x80|byte(n))
	case n < 1<<16:
		f = append(f, 0x80|126)
		f = binary.BigEndian.AppendUint16(f, uint16(n))
	default:
		f = append(f, 0x80|127)
		f = binary.BigEndian.AppendUint64(f, uint64(n))
	}
	f = append(f, mask[:]...)
	for i, c := range payload {
		f = append(f, c^mask[i%4])
	}
	return f
}

func TestWSScanner(t *testing.T) {
	t.Parallel()
	ts, _ := honeytoken.Issue("ws-agent")
	reg := honeytoken.NewRegistry()
	reg.Set("t", ts)
	tok := ts[2].Value
	hexTok := hex.EncodeToString([]byte(tok))
	mask := [4]byte{0x12, 0x34, 0x56, 0x78}
	long := strings.Repeat("x", 70000)
	tests := []struct {
		name   string
		stream []byte
		want   bool
	}{
		{"plain message", wsFrame(1, true, []byte("hello "+tok), mask), true},
		{"no token", wsFrame(1, true, []byte("hello world"), mask), false},
		{"16-bit length", wsFrame(2, true, []byte(long[:300]+tok), mask), true},
		{"64-bit length", wsFrame(2, true, []byte(long+tok), mask), true},
		{"split across fragments", append(wsFrame(1, false, []byte("a "+tok[:10]), mask), wsFrame(0, true, []byte(tok[10:]+" b"), mask)...), true},
		{"after an empty frame and a ping", append(append(wsFrame(9, true, nil, mask), wsFrame(10, true, []byte("p"), mask)...), wsFrame(1, true, []byte(tok), mask)...), true},
		{"masked bytes only: not in the raw stream", wsFrame(1, true, []byte("zzzz"), mask), false},
		// RFC 6455 5.4: control frames may sit between the fragments of
		// a message; the server joins the fragments without them.
		{"split across fragments around a ping", append(append(wsFrame(1, false, []byte("a "+tok[:10]), mask), wsFrame(9, true, []byte("p"), mask)...), wsFrame(0, true, []byte(tok[10:]+" b"), mask)...), true},
		{"split across fragments around an empty pong", append(append(wsFrame(1, false, []byte(tok[:5]), mask), wsFrame(10, true, nil, mask)...), wsFrame(0, true, []byte(tok[5:]), mask)...), true},
		{"in a ping's payload", wsFrame(9, true, []byte("ping "+tok), mask), true},
		// an encoded form is longer than the token: the carry must hold it
		{"hex, split across frames", append(wsFrame(1, false, []byte(hexTok[:75]), mask), wsFrame(0, true, []byte(hexTok[75:]), mask)...), true},
	}
	for _, tt := range tests {
		for _, chunk := range []int{1, 3, 7, 4096, len(tt.stream)} {
			s := &wsScanner{reg: reg}
			found := false
			for b := tt.stream; len(b) > 0 && !found; {
				n := min(chunk, len(b))
				_, found = s.feed(b[:n])
				b = b[n:]
			}
			if found != tt.want {
				t.Errorf("%s, chunks of %d: found %v, want %v", tt.name, chunk, found, tt.want)
			}
		}
	}
	// A frame with an RSV bit set uses an extension (permessage-deflate's
	// RSV1): none was negotiated, since egressd drops the offer, so its
	// payload may be compressed past the scan: refused.
	for _, rsv := range []byte{0x40, 0x20, 0x10} {
		f := wsFrame(1, true, []byte("hello"), mask)
		f[0] |= rsv
		s := &wsScanner{reg: reg}
		if s.feed(append(wsFrame(1, true, []byte("ok"), mask), f...)); s.err == nil {
			t.Errorf("frame with RSV bits %#x: not refused", rsv)
		}
	}
	if s := (&wsScanner{reg: reg}); func() bool { s.feed(wsFrame(1, true, []byte("hello"), mask)); return s.err != nil }() {
		t.Errorf("plain frame refused: %v", s.err)
	}
	// the raw (masked) stream never shows the token: only unmasking finds it
	if raw := wsFrame(1, true, []byte(tok), mask); bytes.Contains(raw, []byte(tok)) {
		t.Fatal("test frame not masked")
	}
}

func FuzzWSScanner(f *testing.F) {
	ts, _ := honeytoken.Issue("fuzz")
	reg := honeytoken.NewRegistry()
	reg.Set("t", ts)
	f.Add(wsFrame(1, true, []byte("x"+ts[0].Value), [4]byte{1, 2, 3, 4}), 5)
	f.Add([]byte{0x81, 0xff, 0, 0, 0, 0, 0, 0, 0, 9}, 2)
	f.Fuzz(func(t *testing.T, b []byte, chunk int) {
		chunk = max(1, chunk%64)
		s := &wsScanner{reg: reg}
		for len(b) > 0 {
			n := min(chunk, len(b))
			s.feed(b[:n])
			b = b[n:]
		}
		if len(s.carry) > max(wsCarry, reg.MaxLen()) || len(s.head) > 14 || len(s.ctlBuf) > maxControlPayload {
			t.Fatalf("state grew: carry %d head %d control %d", len(s.carry), len(s.head), len(s.ctlBuf))
		}
	})
}

// TestWebSocketHoneytoken: a honeytoken in a client's WebSocket message on
// an allowed WebSocket rule closes the connection before the origin gets
// it, logged and alerted as a honeytoken; a message without one echoes.
func TestWebSocketHoneytoken(t *testing.T) {
	t.Parallel()
	ts, _ := honeytoken.Issue("ws-agent")
	reg := honeytoken.NewRegistry()
	reg.Set("t", ts)
	var mu sync.Mutex
	var alerts []Attempt
	alerted := make(chan struct{}, 16)
	h := newHarnessWith(t, wsConfig, wsNames, func(c *Config) {
		c.Honeytokens = reg
		c.Alert = func(a Attempt) { mu.Lock(); alerts = append(alerts, a); mu.Unlock(); alerted <- struct{}{} }
	})
	ws, _ := echoedWebSocket(t, h)
	var got string
	websocket.Message.Send(ws, "exfil "+ts[1].Value)
	if err := websocket.Message.Receive(ws, &got); err == nil {
		t.Fatalf("the message with a canary came back: %q", got)
	}
	line := waitLog(t, h, `"honeytoken_where":"websocket"`)
	for _, want := range []string{`"reason":"honeytoken"`, `"honeytoken":"aws-secret-access-key"`, `"honeytoken_of":"ws-agent"`, `"decision":"deny"`} {
		if !strings.Contains(line, want) {
			t.Errorf("log line lacks %s: %s", want, line)
		}
	}
	// The alert follows the decision line (the line is written, then
	// counted and alerted): wait for it rather than race it.
	waitAlert(t, alerted)
	mu.Lock()
	defer mu.Unlock()
	if len(alerts) != 1 || alerts[0].Where != "websocket" {
		t.Fatalf("alerts %+v", alerts)
	}
}

// TestWebSocketExtensionFrameRefused: while honeytokens are watched, a
// client frame with RSV1 set (compressed by a permessage-deflate that was
// never negotiated) closes the connection before the origin gets it,
// logged with reason upgrade.
func TestWebSocketExtensionFrameRefused(t *testing.T) {
	t.Parallel()
	ts, _ := honeytoken.Issue("ws-agent")
	reg := honeytoken.NewRegistry()
	reg.Set("t", ts)
	h := newHarnessWith(t, wsConfig, wsNames, func(c *Config) { c.Honeytokens = reg })
	ws, tc := echoedWebSocket(t, h)
	var got string
	f := wsFrame(1, true, []byte("deflated?"), [4]byte{9, 8, 7, 6})
	f[0] |= 0x40 // RSV1: permessage-deflate
	if _, err := tc.Write(f); err != nil {
		t.Fatal(err)
	}
	if err := websocket.Message.Receive(ws, &got); err == nil {
		t.Fatalf("the RSV1 frame came back: %q", got)
	}
	line := waitLog(t, h, "RSV bits")
	if !strings.Contains(line, `"reason":"upgrade"`) {
		t.Fatalf("log line: %s", line)
	}
}

// echoedWebSocket opens a WebSocket to the echo origin through an
// inspected tunnel of h and checks that a plain message echoes; it
// returns the client and the TLS connection under it.
func echoedWebSocket(t *testing.T, h *harness) (*websocket.Conn, *tls.Conn) {
	t.Helper()
	port, _ := wsOrigin(t, h)
	tc := inspectedTLS(t, h, "ws.test", port)
	cfg, err := websocket.NewConfig("wss://ws.test:"+port+"/chat", "https://ws.test/")
	if err != nil {
		t.Fatal(err)
	}
	ws, err := websocket.NewClient(cfg, tc)
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	var got string
	if err := websocket.Message.Send(ws, "hello"); err != nil {
		t.Fatal(err)
	}
	if err := websocket.Message.Receive(ws, &got); err != nil || got != "hello" {
		t.Fatalf("echo without a canary: %q %v", got, err)
	}
	return ws, tc
}
