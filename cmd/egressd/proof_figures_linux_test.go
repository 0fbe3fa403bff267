//go:build linux

package main

import (
	"cmp"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/configs"
	"github.com/egressd/egressd/internal/testnet"
	"github.com/egressd/egressd/selftest"
)

// TestProofFigures measures what docs/PROOF.md reports: the boot
// self-test's wall time, the 503 window of a reload (requests through the
// proxy refused as not verified while the new policy is proven), and
// `egressd run`'s time from start to CMD, probe included. A measurement,
// not a check: it runs only with EGRESSD_MEASURE=1 (EGRESSD_BIN=old
// binary measures the "before").
func TestProofFigures(t *testing.T) {
	// Not parallel: a measurement: figures taken beside other tests would mislead.
	if os.Getenv("EGRESSD_MEASURE") == "" {
		t.Skip("a measurement: set EGRESSD_MEASURE=1")
	}
	l := newSTLab(t)
	l.timeout = defaultSelftestTimeout(t) // the figures a user of the default config sees
	l.cfg = l.writeConfig(t, "")
	l.startServe(t)
	logs := l.serve.logs.String()
	t.Logf("boot self-test: %s", selftestDuration(logs))

	// the reload's 503 window, seen by a sandbox client polling an
	// allowed origin through the proxy
	client := l.topo.HTTPClientInSandbox(&url.URL{Scheme: "http", Host: "198.51.100.1:3128"}, nil)
	client.Timeout = 2 * time.Second
	l.topo.DNS.Set("extra.test", testnet.OriginAddr4)
	l.writeConfig(t, "  - name: extra\n    hosts: [extra.test]\n    cidrs: [203.0.113.0/24]")
	var first, last time.Time
	start := time.Now()
	for i := 0; i < 3000; i++ { // bounded: 3000 polls of at least 5 ms
		resp, err := client.Get("http://allowed.test/poll")
		now := time.Now()
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusServiceUnavailable {
				if first.IsZero() {
					first = now
				}
				last = now
			}
		}
		if !first.IsZero() && now.Sub(last) > 500*time.Millisecond {
			break
		}
		if first.IsZero() && now.Sub(start) > 10*time.Second {
			break
		}
		time.Sleep(5 * time.Millisecond) // pacing the poll: time itself is measured here
	}
	if first.IsZero() {
		t.Logf("reload 503 window: none seen")
	} else {
		t.Logf("reload 503 window: %v (first 503 %v after the edit)", last.Sub(first).Round(time.Millisecond), first.Sub(start).Round(time.Millisecond))
	}

	// run: start to CMD, probe included
	l.serve.stop()
	rl := newRunLab(t, strings.Replace(runConfig, "  timeout: 3s\n", "  timeout: "+defaultSelftestTimeout(t)+"\n", 1))
	for i := 0; i < 3; i++ {
		begin := time.Now()
		out, code := rl.run(t, nil, "sh", "-c", "date +%s%N")
		if code != 0 {
			t.Fatalf("run: exit %d\n%s", code, out)
		}
		var ns int64
		for line := range strings.SplitSeq(out, "\n") {
			if n, err := strconv.ParseInt(strings.TrimSpace(line), 10, 64); err == nil {
				ns = n
			}
		}
		if ns == 0 {
			t.Fatalf("run output: no timestamp\n%s", out)
		}
		t.Logf("run start to CMD: %v", time.Unix(0, ns).Sub(begin).Round(time.Millisecond))
	}
}

// defaultSelftestTimeout is the embedded default config's selftest.timeout.
func defaultSelftestTimeout(t *testing.T) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^  timeout: (\S+)$`).FindSubmatch(configs.Default)
	if m == nil {
		t.Fatal("configs/default.yaml: no selftest timeout line")
	}
	return string(m[1])
}

// selftestDuration is the duration of the first "self-test sealed" line.
func selftestDuration(logs string) string {
	for line := range strings.SplitSeq(logs, "\n") {
		if !strings.Contains(line, `"msg":"self-test sealed"`) {
			continue
		}
		var rec struct {
			Duration json.RawMessage `json:"duration"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil {
			var ns int64
			if json.Unmarshal(rec.Duration, &ns) == nil {
				return time.Duration(ns).Round(time.Millisecond).String()
			}
			return string(rec.Duration)
		}
	}
	return "no self-test sealed line"
}

// TestProofFiguresDefault measures `egressd run` on the embedded default
// config (offline: no upstream answers) from start to CMD, several times,
// and names the probes of the first run that took longest: what a run
// still waits for. A measurement, like TestProofFigures (EGRESSD_BIN=old
// binary measures the "before"; its history is not read).
func TestProofFiguresDefault(t *testing.T) {
	if os.Getenv("EGRESSD_MEASURE") == "" {
		t.Skip("a measurement: set EGRESSD_MEASURE=1")
	}
	l := newRunLab(t, string(configs.Default))
	var took []time.Duration
	for range 5 {
		begin := time.Now()
		out, code := l.run(t, nil, "sh", "-c", "date +%s%N")
		var ns int64
		for line := range strings.SplitSeq(out, "\n") {
			if n, err := strconv.ParseInt(strings.TrimSpace(line), 10, 64); err == nil {
				ns = n
			}
		}
		if code != 0 || ns == 0 {
			t.Fatalf("run on the default config: exit %d, no timestamp\n%s", code, out)
		}
		took = append(took, time.Unix(0, ns).Sub(begin).Round(time.Millisecond))
	}
	t.Logf("run on the default config, start to CMD: %v", took)
	slices.Sort(took)
	t.Logf("min %v, median %v, max %v", took[0], took[len(took)/2], took[len(took)-1])
	hs, _, err := selftest.ReadHistory(filepath.Join(l.state, selftest.HistoryFile))
	if err != nil || len(hs) == 0 {
		t.Skipf("no history to name the slow probes (%v)", err)
	}
	rs := slices.Clone(hs[0].Report.Results) // the first run: a fresh ICMP budget
	slices.SortFunc(rs, func(a, b selftest.Result) int { return cmp.Compare(b.Duration, a.Duration) })
	for _, r := range rs[:min(len(rs), 20)] {
		t.Logf("%-45s %-10s %6v  %s", r.ID, r.Status, r.Duration.Round(time.Millisecond), r.Result)
	}
}
