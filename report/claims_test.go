package report

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/selftest"
)

// TestSandboxPassIsAClaim: a pass a sandbox reports after a leak is shown
// as its claim, not as the sandbox's state; unreadable history lines are
// counted.
func TestSandboxPassIsAClaim(t *testing.T) {
	p, err := policy.Parse(strings.NewReader("version: 1\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	run := func(at time.Time, s selftest.Status) selftest.HistoryLine {
		return selftest.HistoryLine{Source: "probe", Mode: "sandbox", Identity: "sb", Report: &selftest.Report{Start: at, Results: []selftest.Result{{ID: "metadata/direct", Status: s}}}}
	}
	var b bytes.Buffer
	Write(&b, Input{Now: t0.Add(time.Hour), Policy: p, Runs: []selftest.HistoryLine{run(t0, selftest.Leak), run(t0.Add(time.Minute), selftest.Pass)}, SkippedRuns: 2})
	for _, want := range []string{"| sb | 2026-12-01T10:01:00Z | 59m0s | sealed (claimed after a leak) | 2 | 1 |", "> 2 lines of the self-test history could not be read and were skipped."} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}
