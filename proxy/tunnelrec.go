package proxy

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/egressd/egressd/event"
)

// Every tunnel (CONNECT, transparent TLS, WebSocket) has an open record
// when it is established and a close record when it has ended and written
// its own last line, so the audit chain shows a tunnel whose end was never
// recorded, and a stop can wait for every record before the seal. The
// tunnel pipeline calls tunnelOpened in openTunnel and the func it
// returns at the end of closeTunnel (tunnel.go); a WebSocket, in
// serveUpgrade (upgrade.go), likewise.

// tunnelBook counts the tunnels whose close record is not written yet.
type tunnelBook struct {
	mu      sync.Mutex
	lastID  uint64
	open    int
	waiters []chan struct{} // closed when open drops to 0
}

// tunnelOpened writes rq's open record and returns the func that writes
// its close record (once). The tunnel's goroutine calls it last, after the
// tunnel's own final line.
func (x *Proxy) tunnelOpened(ctx context.Context, rq *request) (closed func()) {
	b := &x.book
	b.mu.Lock()
	b.lastID++
	id := b.lastID
	b.open++
	b.mu.Unlock()
	x.tunnelRecord(ctx, rq, id, event.TunnelOpen)
	var once sync.Once
	return func() {
		once.Do(func() {
			x.tunnelRecord(ctx, rq, id, event.TunnelClose)
			b.mu.Lock()
			defer b.mu.Unlock()
			if b.open--; b.open == 0 {
				for _, w := range b.waiters {
					close(w)
				}
				b.waiters = nil
			}
		})
	}
}

func (x *Proxy) tunnelRecord(ctx context.Context, rq *request, id uint64, phase string) {
	x.record(ctx, slog.LevelInfo, []slog.Attr{
		slog.String(event.KeyIdentity, rq.logIdentity()), slog.String(event.KeyMethod, rq.method),
		slog.String(event.KeyHost, rq.target.Host()), slog.Int(event.KeyPort, int(rq.target.Port)),
		slog.String(event.KeyRule, rq.d.RuleName()),
		slog.String(event.KeyTunnel, phase), slog.Uint64(event.KeyTunnelID, id)})
}

// OpenTunnels is how many tunnels have not written their close record.
func (x *Proxy) OpenTunnels() int {
	x.book.mu.Lock()
	defer x.book.mu.Unlock()
	return x.book.open
}

// waitTunnels waits until every tunnel has written its close record, or
// ctx ends.
func (x *Proxy) waitTunnels(ctx context.Context) error {
	b := &x.book
	b.mu.Lock()
	if b.open == 0 {
		b.mu.Unlock()
		return nil
	}
	w := make(chan struct{})
	b.waiters = append(b.waiters, w)
	b.mu.Unlock()
	select {
	case <-w:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Drain stops the proxy: it accepts nothing more at once, gives open
// tunnels and requests grace to end on their own, then closes what is
// left (cut, how many tunnels) and waits, until ctx ends, for every
// tunnel's last records, so that a seal written after Drain follows them.
func (x *Proxy) Drain(ctx context.Context, grace time.Duration) (cut int, err error) {
	x.mu.Lock()
	srvs := x.servers
	x.mu.Unlock()
	gctx, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	done := make(chan error, len(srvs))
	for _, s := range srvs {
		go func() { done <- s.Shutdown(gctx) }() // closes the listeners now
	}
	x.waitTunnels(gctx) //nolint:errcheck // the grace ended: what is open is cut below
	var errs []error
	for range srvs { // each returns once its requests are done, or at the grace's end
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, err)
		}
	}
	cut = x.OpenTunnels()
	cancel()
	x.ids.closeAll()
	x.up.closeIdle()
	for _, s := range srvs {
		s.Close() // requests still running after the grace
	}
	if err := x.waitTunnels(ctx); err != nil {
		errs = append(errs, errors.New("tunnels still writing their last records: "+err.Error()))
	}
	return cut, errors.Join(errs...)
}
