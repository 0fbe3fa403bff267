package audit

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/egressd/egressd/event"
)

// logTunnel logs a tunnel's open or close record the way the proxy does.
func logTunnel(log *slog.Logger, id int, phase string) {
	log.LogAttrs(context.Background(), slog.LevelInfo, DecisionMsg,
		slog.String(event.KeyIdentity, "agent-1"), slog.String(event.KeyMethod, "CONNECT"),
		slog.String(event.KeyHost, "pkgs.example.com"), slog.Int(event.KeyPort, 443),
		slog.String(event.KeyTunnel, phase), slog.Int(event.KeyTunnelID, id))
}

// TestVerifyTunnels: a sealed log in which every tunnel's open record has
// its close record is intact and counts them; one in which a close record
// was never written (the writer sealed with tunnels open, as a stop that
// did not wait for them) is reported incomplete, not intact, and the seal
// states how many tunnels were open. A live log may have open tunnels.
func TestVerifyTunnels(t *testing.T) {
	for _, tc := range []struct {
		name   string
		closed []int // of tunnels 1..3
		ok     bool
	}{
		{"all closed", []int{2, 1, 3}, true},
		{"one close missing", []int{1, 3}, false},
		{"none closed", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			s, err := NewSink(&buf)
			if err != nil {
				t.Fatal(err)
			}
			log := slog.New(s.Handler(nil))
			for id := 1; id <= 3; id++ {
				logTunnel(log, id, event.TunnelOpen)
			}
			logDecisions(log, 0, 2)
			for _, id := range tc.closed {
				logTunnel(log, id, event.TunnelClose)
			}
			live, err := Verify(bytes.NewReader(buf.Bytes()), VerifyOptions{Live: true})
			if err != nil {
				t.Fatalf("live log before the seal: %v", err)
			}
			if want := 3 - len(tc.closed); live.OpenTunnels != want {
				t.Errorf("live log: %d open tunnels, want %d", live.OpenTunnels, want)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			lines := splitLines(buf.Bytes())
			seal := string(lines[len(lines)-1])
			if want := `"tunnels_open":` + string(rune('0'+3-len(tc.closed))); !strings.Contains(seal, want) {
				t.Errorf("seal %s does not state %s", seal, want)
			}
			rep, err := Verify(bytes.NewReader(buf.Bytes()), VerifyOptions{})
			if tc.ok {
				if err != nil {
					t.Fatalf("every tunnel closed: %v", err)
				}
				if rep.Tunnels != 3 || rep.OpenTunnels != 0 {
					t.Errorf("report: %d tunnels, %d open; want 3, 0", rep.Tunnels, rep.OpenTunnels)
				}
				return
			}
			var te *TamperError
			if !errors.As(err, &te) || te.Kind != Incomplete {
				t.Fatalf("a sealed log with %d tunnel(s) never closed: %v, want %s", 3-len(tc.closed), err, Incomplete)
			}
			if te.Line != len(lines) {
				t.Errorf("incomplete at line %d, want the seal's line %d", te.Line, len(lines))
			}
		})
	}
}
