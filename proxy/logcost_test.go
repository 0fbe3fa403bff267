package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/event"
)

// pcHandler passes records on and keeps the PC of each decision record.
type pcHandler struct {
	slog.Handler
	mu  *sync.Mutex
	pcs *[]uintptr
}

func (h pcHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == event.Msg {
		h.mu.Lock()
		*h.pcs = append(*h.pcs, r.PC)
		h.mu.Unlock()
	}
	return h.Handler.Handle(ctx, r)
}

func (h pcHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return pcHandler{h.Handler.WithAttrs(as), h.mu, h.pcs}
}

func (h pcHandler) WithGroup(name string) slog.Handler {
	return pcHandler{h.Handler.WithGroup(name), h.mu, h.pcs}
}

// TestDecisionRecordsCarryNoPC: the decision records of a spliced tunnel
// (open, the decision, close) reach the handler without a caller PC.
// Nothing reads it (no handler of egressd adds the source), and slog's
// Logger finds it by unwinding the stack on every line: with three lines
// per tunnel, about 1 % of the proxy's CPU per new tunnel.
func TestDecisionRecordsCarryNoPC(t *testing.T) {
	var mu sync.Mutex
	var pcs []uintptr
	h := newHarnessWith(t, testConfig, testNames, func(c *Config) {
		c.Logger = slog.New(pcHandler{c.Logger.Handler(), &mu, &pcs})
	})
	o := newRawOrigin(t, func(c net.Conn, br *bufio.Reader) {
		defer c.Close()
		if _, err := br.ReadByte(); err == nil {
			io.WriteString(c, "x")
		}
	})
	c := h.connect(t, "allowed.test:"+o.port())
	c.Write(recordHello(t, &tls.Config{ServerName: "allowed.test"}))
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatalf("first byte through the tunnel: %v", err)
	}
	c.Close()
	if _, err := h.logs.Wait(10*time.Second, nil, `"tunnel":"close"`); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(pcs) < 3 {
		t.Fatalf("%d decision records, want the tunnel's open, decision and close", len(pcs))
	}
	for i, pc := range pcs {
		if pc != 0 {
			t.Errorf("decision record %d of %d carries PC %#x: its stack was unwound", i+1, len(pcs), pc)
		}
	}
}
