package proxy

import (
	"sync"
	"sync/atomic"
	"time"
)

// idleEpoch is the origin of idleWatch's clock (monotonic, via time.Since).
var idleEpoch = time.Now()

// idleWatch closes a spliced tunnel that carried no byte in either direction
// for limits.idle_timeout. Each read with data records the time in an
// atomic; one timer per tunnel checks it when it would expire and re-arms
// for the rest, so a busy tunnel costs a clock read per read instead of a
// deadline update, and an idle one a single timer.
type idleWatch struct {
	timeout time.Duration
	last    atomic.Int64 // time.Since(idleEpoch) at the last read with data
	onIdle  func()

	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
	fired   bool
}

// newIdleWatch starts watching; onIdle runs (once, on the timer's
// goroutine) when the tunnel has been quiet for timeout. A timeout <= 0
// returns nil, which watches nothing.
func newIdleWatch(timeout time.Duration, onIdle func()) *idleWatch {
	if timeout <= 0 {
		return nil
	}
	w := &idleWatch{timeout: timeout, onIdle: onIdle}
	w.touch()
	w.timer = time.AfterFunc(timeout, w.check)
	return w
}

// touch records traffic now.
func (w *idleWatch) touch() {
	if w != nil {
		w.last.Store(int64(time.Since(idleEpoch)))
	}
}

func (w *idleWatch) check() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	quiet := time.Since(idleEpoch) - time.Duration(w.last.Load())
	if quiet < w.timeout {
		w.timer.Reset(w.timeout - quiet)
		return
	}
	w.fired = true
	w.onIdle()
}

// stop ends the watch and reports whether it closed the tunnel.
func (w *idleWatch) stop() bool {
	if w == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	w.timer.Stop()
	return w.fired
}
