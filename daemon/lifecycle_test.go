package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestRollbackFailureIsNotReady: when a reload whose walls differ fails
// and taking its walls off the probe link fails too, the next self-test
// would judge those walls there: the reload says so, and egressd lets
// nothing through until a self-test passes.
func TestRollbackFailureIsNotReady(t *testing.T) {
	t.Parallel()
	var broken atomic.Bool
	f := startWith(t, func(o *Options) {
		o.Walls = &fakeWalls{fail: func(string) error {
			if broken.Load() {
				return errors.New("netlink: no buffer space")
			}
			return nil
		}}
	})
	if got := f.status(t, f.a); got != 200 {
		t.Fatalf("origin a before: %d", got)
	}
	broken.Store(true)
	f.write(t, config("127.0.0.1:0", port(f.a), port(f.b)))
	err := f.d.Reload(context.Background(), "test")
	if err == nil || !strings.Contains(err.Error(), "off the probe link failed") {
		t.Fatalf("Reload: %v, want an error naming the walls left on the probe link", err)
	}
	if ok, why := f.d.Ready(); ok || !strings.Contains(why, "probe link") {
		t.Fatalf("Ready after a failed rollback: %v %q", ok, why)
	}
	if got := f.status(t, f.a); got != 503 {
		t.Fatalf("origin a after a failed rollback: %d, want 503", got)
	}
	if n := counter(t, f, `egressd_reloads_total{result="rollback-failed"}`); n != 1 {
		t.Fatalf("rollback-failed count %d", n)
	}
	// the walls work again: the scheduled self-test restores readiness
	broken.Store(false)
	f.d.scheduled(context.Background())
	if got := f.status(t, f.a); got != 200 {
		t.Fatalf("origin a after a sealed self-test: %d, want 200", got)
	}
}

// TestReloadChangesSelftestInterval: a reload that shortens
// selftest.interval makes the scheduled self-test run at the new pace.
func TestReloadChangesSelftestInterval(t *testing.T) {
	t.Parallel()
	f := startWith(t, func(*Options) {}) // default interval 5m; explicit reloads only
	f.write(t, config("127.0.0.1:0", port(f.a))+"selftest:\n  interval: 30ms\n")
	if err := f.d.Reload(context.Background(), "test"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a scheduled self-test at the new interval", func() bool {
		return counter(t, f, `egressd_selftest_runs_total{result="sealed",trigger="schedule"}`) >= 2
	})
}

// TestWatchReloadSurvivesAWatchFailure: a config file whose directory
// cannot be watched leaves SIGHUP reloads working (before, WatchReload
// returned at once and unregistered SIGHUP: the next reload killed egressd).
func TestWatchReloadSurvivesAWatchFailure(t *testing.T) {
	// Not parallel: it sends SIGHUP to this process, which every running daemon's WatchReload would take.
	f := start(t)
	guard := make(chan os.Signal, 16) // keeps SIGHUP from ending the test binary
	signal.Notify(guard, syscall.SIGHUP)
	defer signal.Stop(guard)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- f.d.WatchReload(ctx, filepath.Join(t.TempDir(), "missing", "egressd.yaml")) }()
	// the config does not change: each SIGHUP reload is counted unchanged
	before := counter(t, f, `egressd_reloads_total{result="unchanged"}`)
	deadline := time.After(5 * time.Second)
	for counter(t, f, `egressd_reloads_total{result="unchanged"}`) <= before {
		syscall.Kill(os.Getpid(), syscall.SIGHUP)
		select {
		case err := <-errc:
			t.Fatalf("WatchReload returned (%v): SIGHUP is no longer handled", err)
		case <-deadline:
			t.Fatal("no SIGHUP reload")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestWebhookReport: the leak report carries no "<nil>" error, and an
// answer other than 2xx is logged as a failure.
func TestWebhookReport(t *testing.T) {
	t.Parallel()
	var body []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ = io.ReadAll(r.Body)
		http.Error(w, "nope", http.StatusInternalServerError)
	}))
	defer srv.Close()
	var logs bytes.Buffer
	notify(slog.New(slog.NewTextHandler(&logs, nil)), srv.URL, Verdict{Leaks: []string{"tcp-direct"}})
	var sent map[string]any
	if err := json.Unmarshal(body, &sent); err != nil {
		t.Fatalf("webhook body %s: %v", body, err)
	}
	if e, ok := sent["error"]; ok {
		t.Errorf("webhook body %s: a leak without a run error reports error %q", body, e)
	}
	if !bytes.Contains(body, []byte(`"leaks":["tcp-direct"]`)) {
		t.Errorf("webhook body %s lacks the leaks", body)
	}
	if !strings.Contains(logs.String(), "webhook failed") || !strings.Contains(logs.String(), "500") {
		t.Errorf("a 500 from the webhook was not logged as a failure: %q", logs.String())
	}
	// negative control: a 2xx logs no failure, and a run error is sent
	logs.Reset()
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ = io.ReadAll(r.Body)
	}))
	defer ok.Close()
	notify(slog.New(slog.NewTextHandler(&logs, nil)), ok.URL, Verdict{Err: errors.New("probe netns: EPERM")})
	if strings.Contains(logs.String(), "webhook failed") || !bytes.Contains(body, []byte(`"error":"probe netns: EPERM"`)) {
		t.Errorf("2xx: logs %q body %s", logs.String(), body)
	}
}
