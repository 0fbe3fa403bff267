package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/egressd/egressd/ca"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy"
)

// TestHistoryFailureIsVisible: a self-test whose run could not be written
// to the history (a read-only state directory) is counted, and /readyz
// says so with the reason while the policy keeps serving; a later write
// that works clears it.
func TestHistoryFailureIsVisible(t *testing.T) {
	t.Parallel()
	var readOnly atomic.Bool
	f := startWith(t, func(o *Options) {
		inner := o.Verify
		o.Verify = func(ctx context.Context, p *policy.Policy) Verdict {
			v := inner(ctx, p)
			if readOnly.Load() {
				v.HistoryErr = errors.New("open /var/lib/egressd/selftest-history.jsonl: read-only file system")
			}
			return v
		}
	})
	readOnly.Store(true)
	f.d.scheduled(context.Background())
	code, body := readyz(t, f)
	if code != 200 || !strings.Contains(body, "history") || !strings.Contains(body, "read-only file system") {
		t.Errorf("/readyz with the history unwritable: %d %q, want 200 naming the history and its error", code, body)
	}
	if n := counter(t, f, "egressd_history_write_errors_total"); n != 1 {
		t.Errorf("egressd_history_write_errors_total = %d, want 1", n)
	}
	if got := f.status(t, f.a); got != 200 {
		t.Errorf("origin a with the history unwritable: %d, want 200 (evidence lost is no leak)", got)
	}
	readOnly.Store(false)
	f.d.scheduled(context.Background())
	if _, body := readyz(t, f); strings.Contains(body, "history") {
		t.Errorf("/readyz once the history is written again: %q", body)
	}
}

// TestCALossIsAlerted: the CA check on a schedule finds the key gone: an
// error, a gauge at 0, a readiness note, and a webhook report, before any
// restart would refuse to start.
func TestCALossIsAlerted(t *testing.T) {
	t.Parallel()
	var lost atomic.Bool
	posts := make(chan string, 4)
	f := startWith(t, func(o *Options) {
		o.CACheck = func() error {
			if lost.Load() {
				return errors.New("open /var/lib/egressd/ca/ca-key.pem: no such file or directory")
			}
			return nil
		}
		o.CAInterval = 10 * time.Millisecond
		o.Webhook = "test:"
		o.notifyHook = func(event string) { posts <- event }
	})
	if n := counter(t, f, "egressd_ca_ok"); n != 1 {
		t.Errorf("egressd_ca_ok with the CA in place: %d, want 1", n)
	}
	lost.Store(true)
	select {
	case ev := <-posts:
		if ev != "egressd.ca.unusable" {
			t.Errorf("webhook event %q, want egressd.ca.unusable", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no report of the lost CA key")
	}
	if n := counter(t, f, "egressd_ca_ok"); n != 0 {
		t.Errorf("egressd_ca_ok with the key gone: %d, want 0", n)
	}
	if _, body := readyz(t, f); !strings.Contains(body, "ca-key.pem") {
		t.Errorf("/readyz with the CA key gone: %q, want it named", body)
	}
}

// TestAlertSeriesBounded: the per-identity alert series are capped (the
// rest count under "_other") and expire when an identity stays quiet.
func TestAlertSeriesBounded(t *testing.T) {
	t.Parallel()
	a := newAlerter(slog.New(slog.DiscardHandler), func() (string, time.Duration) { return "", time.Second })
	now := time.Unix(1_000_000, 0)
	a.now = func() time.Time { return now }
	for i := range 3 * maxAlertIdentities {
		a.attempt(proxy.Attempt{Identity: fmt.Sprintf("sandbox-%d", i), HighRisk: true})
	}
	if n := testSeries(t, a.total); n > maxAlertIdentities+1 {
		t.Errorf("%d alert series for %d identities, want at most %d", n, 3*maxAlertIdentities, maxAlertIdentities+1)
	}
	now = now.Add(alertSeriesTTL + time.Minute)
	a.attempt(proxy.Attempt{Identity: "fresh", HighRisk: true})
	a.expire()
	if n := testSeries(t, a.total); n != 1 {
		t.Errorf("%d alert series after the others stayed quiet for the TTL, want 1", n)
	}
}

func testSeries(t *testing.T, c prometheus.Collector) int {
	t.Helper()
	ch := make(chan prometheus.Metric, 1<<16)
	c.Collect(ch)
	close(ch)
	return len(ch)
}

// TestSameCA: the gateway's CA check passes while the state directory
// holds the CA egressd serves with, and names a deleted key or another CA.
func TestSameCA(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "ca")
	serving, err := ca.LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := sameCA(dir, serving); err != nil {
		t.Fatalf("the CA in place: %v", err)
	}
	other, err := ca.LoadOrCreate(filepath.Join(t.TempDir(), "other"))
	if err != nil {
		t.Fatal(err)
	}
	if err := sameCA(dir, other); err == nil || !strings.Contains(err.Error(), "another CA") {
		t.Errorf("a CA other than the one serving: %v", err)
	}
	if err := os.Remove(filepath.Join(dir, ca.KeyFile)); err != nil {
		t.Fatal(err)
	}
	if err := sameCA(dir, serving); err == nil || !strings.Contains(err.Error(), ca.CertFile) {
		t.Errorf("the key deleted: %v, want an error naming the half left", err)
	}
}
