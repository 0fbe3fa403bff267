package daemon

import (
	"context"
	"sync"

	"github.com/egressd/egressd/policy"
)

// fakeWalls are walls in memory: every reload changes them (Same is
// false), and each call is recorded.
type fakeWalls struct {
	mu    sync.Mutex
	fail  func(call string) error // nil: every call succeeds
	calls []string
}

func (w *fakeWalls) record(call string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls = append(w.calls, call)
	if w.fail != nil {
		return w.fail(call)
	}
	return nil
}

func (w *fakeWalls) Apply(_ context.Context, p *policy.Policy) error {
	return w.record("apply")
}

func (w *fakeWalls) Check(context.Context, *policy.Policy) ([]string, error) { return nil, nil }

func (w *fakeWalls) Same(a, b *policy.Policy) bool { return false }

func (w *fakeWalls) Try(_ context.Context, _ *policy.Policy, iface string) error {
	return w.record("try " + iface)
}

func (w *fakeWalls) EndTry(context.Context) error { return w.record("end-try") }

// Calls returns the calls so far.
func (w *fakeWalls) Calls() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.calls...)
}
