package daemon

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/selftest"
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

func (w *fakeWalls) Check(context.Context, *policy.Policy) ([]string, error) {
	return nil, w.record("check")
}

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

// probeLink is the probe link's name the fake self-tests below report.
const probeLink = "egsbx1048575"

// wallsReload starts a daemon whose walls change at every reload
// (fakeWalls) and whose self-test, during a reload, puts the candidate's
// walls on its probe link as a real run does (unless skipLink), then asks
// for both origins as a sandbox: refusals counts a refused request for a,
// which both policies allow; leaked one for b, which only the candidate
// allows. verdict is the reload's self-test result.
type wallsReload struct {
	f                *fixture
	walls            *fakeWalls
	reloading        atomic.Bool
	skipLink         bool
	verdict          Verdict
	during           func() // called during the reload's self-test
	refusals, leaked atomic.Int64
	requests         int
}

func startWallsReload(t *testing.T, verdict Verdict, skipLink bool) *wallsReload {
	t.Helper()
	w := &wallsReload{walls: &fakeWalls{}, verdict: verdict, skipLink: skipLink}
	w.f = startWith(t, func(o *Options) {
		o.Walls = w.walls
		o.Verify = func(ctx context.Context, _ *policy.Policy) Verdict {
			if !w.reloading.Load() {
				return Verdict{Sealed: true}
			}
			if tryOn := selftest.ProbeLink(ctx); tryOn != nil && !w.skipLink {
				if err := tryOn(probeLink); err != nil {
					return Verdict{Err: err}
				}
			}
			if w.during != nil {
				w.during()
			}
			for range 10 {
				w.requests++
				if w.f.status(t, w.f.a) != 200 {
					w.refusals.Add(1)
				}
				if w.f.status(t, w.f.b) == 200 {
					w.leaked.Add(1)
				}
			}
			return w.verdict
		}
	})
	return w
}

func (w *wallsReload) reload(t *testing.T) error {
	t.Helper()
	w.f.write(t, config("127.0.0.1:0", port(w.f.a), port(w.f.b)))
	w.reloading.Store(true)
	defer w.reloading.Store(false)
	return w.f.d.Reload(context.Background(), "test")
}

// TestWallsReloadRefusesNothing: a reload whose walls differ is tried on
// the self-test's probe link (the candidate's walls there alone) while
// every sandbox keeps the verified policy and walls: no allowed request is
// refused during the verification, none is decided by the candidate, and
// only once sealed are the candidate's walls applied to everyone and the
// policy swapped. A drift check due meanwhile waits for the reload.
func TestWallsReloadRefusesNothing(t *testing.T) {
	w := startWallsReload(t, Verdict{Sealed: true}, false)
	// the drift check waits for the reload: it never reads a trial as drift
	checked := make(chan struct{})
	w.during = func() {
		go func() { w.f.d.checkWalls(context.Background()); close(checked) }()
	}
	if err := w.reload(t); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	<-checked
	if n := w.refusals.Load(); n != 0 {
		t.Errorf("%d of %d allowed requests refused while the candidate's walls were verified, want 0", n, w.requests)
	}
	if n := w.leaked.Load(); n != 0 {
		t.Errorf("%d requests allowed by the unverified candidate", n)
	}
	if got, want := w.walls.Calls(), []string{"apply", "try " + probeLink, "apply", "check"}; !slices.Equal(got, want) {
		t.Errorf("walls calls %q, want %q (in force at start, tried on the probe link, in force for all once sealed, then the drift check)", got, want)
	}
	if got := w.f.status(t, w.f.b); got != 200 {
		t.Errorf("origin b after the sealed reload: %d, want 200", got)
	}
	if n := counter(t, w.f, `egressd_reloads_total{result="applied"}`); n != 1 {
		t.Errorf("applied reloads %d, want 1", n)
	}
}

// TestLeakingWallsCandidateNeverInForce: a candidate whose walls leak on
// the probe link is never in force for a sandbox: its walls are taken off
// the probe link (EndTry) and nothing else changes: no refusal, the
// verified policy and walls stay, readiness stays. A self-test that could
// not put the candidate's walls on a probe link proves nothing about them:
// the candidate is dropped too.
func TestLeakingWallsCandidateNeverInForce(t *testing.T) {
	for _, tt := range []struct {
		name      string
		verdict   Verdict
		skipLink  bool
		wantCalls []string
	}{
		{"a leak on the probe link", Verdict{Leaks: []string{"tcp-gateway 198.51.100.1:2222: connected"}}, false,
			[]string{"apply", "try " + probeLink, "end-try"}},
		{"no probe link to try the walls on", Verdict{Sealed: true}, true,
			[]string{"apply", "end-try"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := startWallsReload(t, tt.verdict, tt.skipLink)
			err := w.reload(t)
			if err == nil {
				t.Fatal("Reload: nil error, want the candidate dropped")
			}
			if n := w.refusals.Load(); n != 0 {
				t.Errorf("%d of %d allowed requests refused during the verification, want 0", n, w.requests)
			}
			if n := w.leaked.Load(); n != 0 {
				t.Errorf("%d requests allowed by the unverified candidate", n)
			}
			if got := w.walls.Calls(); !slices.Equal(got, tt.wantCalls) {
				t.Errorf("walls calls %q, want %q", got, tt.wantCalls)
			}
			if got := w.f.status(t, w.f.b); got != 403 {
				t.Errorf("origin b after the dropped reload: %d, want 403", got)
			}
			if got := w.f.status(t, w.f.a); got != 200 {
				t.Errorf("origin a after the dropped reload: %d, want 200", got)
			}
			if ok, why := w.f.d.Ready(); !ok {
				t.Errorf("not ready after a dropped candidate: %s", why)
			}
			if n := counter(t, w.f, `egressd_reloads_total{result="dropped"}`); n != 1 {
				t.Errorf("dropped reloads %d, want 1", n)
			}
		})
	}
}

// TestUnverifiedReloadRollback: with --no-selftest a reload goes in force
// at once; one whose walls cannot be applied is rolled back to the old
// policy and walls, and when those cannot be restored either, egressd lets
// nothing through (no self-test will prove the walls again).
func TestUnverifiedReloadRollback(t *testing.T) {
	for _, tt := range []struct {
		name      string
		failures  int // applies that fail once the reload starts
		result    string
		wantReady bool
		wantA     int
	}{
		{"the old walls restored", 1, "rolled-back", true, 200},
		{"the old walls not restored either", 2, "rollback-failed", false, 503},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var fail atomic.Int64
			walls := &fakeWalls{fail: func(call string) error {
				if call == "apply" && fail.Add(-1) >= 0 {
					return errors.New("netlink: no buffer space")
				}
				return nil
			}}
			f := startWith(t, func(o *Options) {
				o.Walls, o.Verify, o.NoSelftest, o.AllowUnverified = walls, nil, true, true
			})
			fail.Store(int64(tt.failures))
			f.write(t, config("127.0.0.1:0", port(f.a), port(f.b)))
			if err := f.d.Reload(context.Background(), "test"); err == nil || !strings.Contains(err.Error(), "rolled back") {
				t.Fatalf("Reload: %v, want it rolled back", err)
			}
			if n := counter(t, f, `egressd_reloads_total{result="`+tt.result+`"}`); n != 1 {
				t.Errorf("%s reloads: %d, want 1", tt.result, n)
			}
			if ok, why := f.d.Ready(); ok != tt.wantReady {
				t.Errorf("ready %v (%s), want %v", ok, why, tt.wantReady)
			}
			if got := f.status(t, f.a); got != tt.wantA {
				t.Errorf("origin a: %d, want %d", got, tt.wantA)
			}
			if got := f.status(t, f.b); got == 200 {
				t.Errorf("origin b, allowed only by the rolled-back policy: 200")
			}
		})
	}
}
