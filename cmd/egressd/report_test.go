package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/selftest"
	"github.com/egressd/egressd/selftest/probens"
)

const reportConfig = `version: 1
allow:
  - name: pypi
    hosts: [pypi.org, files.pythonhosted.org]
    ports: [443]
    mirror: pypi
  - name: ssh
    hosts: [git.example.com]
    ports: [22, "8000-8100"]
    pages: ["*"]
    tls: false
`

// decisionLines is what serve writes on stderr: decision lines among
// others, one not JSON.
const decisionLines = `{"time":"2026-11-30T10:00:00Z","level":"INFO","msg":"serving","proxy":"127.0.0.1:3128"}
{"time":"2026-11-30T10:00:01Z","level":"INFO","msg":"decision","component":"proxy","identity":"agent-a","method":"GET","host":"pypi.org","port":443,"path":"/simple/","rule":"pypi","decision":"allow","reason":"allowed","high_risk":false,"status":200}
{"time":"2026-11-30T10:00:02Z","level":"WARN","msg":"decision","component":"proxy","identity":"agent-a","method":"GET","host":"169.254.169.254","port":80,"path":"/latest/meta-data/","rule":"","decision":"deny","reason":"high-risk","high_risk":true,"status":403}
{"time":"2026-11-30T10:00:03Z","level":"WARN","msg":"decision","component":"proxy","identity":"agent-b","method":"CONNECT","host":"evil.example","port":443,"path":"","rule":"","decision":"deny","reason":"no-rule","high_risk":false,"status":403}
{"time":"2026-11-30T10:00:04Z","level":"WARN","msg":"decision","component":"proxy","identity":"agent-b","method":"CONNECT","host":"evil.example","port":443,"path":"","rule":"","decision":"deny","reason":"no-rule","high_risk":false,"status":403}
{"time":"2026-11-30T10:00:05Z","level":"WARN","msg":"decision","component":"proxy","identity":"agent-a","method":"POST","host":"pypi.org","port":443,"path":"/legacy/","rule":"pypi","decision":"deny","reason":"mirror","high_risk":false,"status":403}
{"time":"2026-11-30T10:00:06Z","level":"WARN","msg":"decision","component":"proxy","identity":"egressd-selftest","method":"GET","host":"169.254.169.254","port":80,"path":"/latest/meta-data/","rule":"","decision":"deny","reason":"high-risk","high_risk":true,"status":403}
{"time":"2026-11-30T10:00:07Z","level":"WARN","msg":"decision","component":"proxy","identity":"egressd-probe/agent-b","method":"GET","host":"169.254.169.254","port":80,"path":"/latest/meta-data/","rule":"","decision":"deny","reason":"high-risk","high_risk":true,"status":403}
not json at all
`

func TestReport(t *testing.T) {
	// Not parallel: it swaps showWalls, a package-level var every report reads.
	dir := t.TempDir()
	cfg := filepath.Join(dir, "egressd.yaml")
	logFile := filepath.Join(dir, "serve.log")
	os.WriteFile(cfg, []byte(reportConfig), 0o600)
	os.WriteFile(logFile, []byte(decisionLines), 0o600)
	t0 := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	runs := []*selftest.Report{
		{Start: t0, Duration: 1500 * time.Millisecond, Results: []selftest.Result{{ID: "tcp/198.51.100.7:443", Status: selftest.Pass}, {ID: "http-canary", Status: selftest.Pass}}},
		{Start: t0.Add(time.Hour), Duration: 1600 * time.Millisecond, Results: []selftest.Result{{ID: "tcp/198.51.100.7:443", Status: selftest.Leak, Route: "direct tcp", Target: "198.51.100.7:443", Detail: "a direct TCP connection succeeded"}, {ID: "http-canary", Status: selftest.Pass}}},
		{Start: t0.Add(2 * time.Hour), Results: []selftest.Result{{ID: "tcp/198.51.100.7:443", Status: selftest.NotRun, Detail: "needs root"}}},
	}
	state := filepath.Join(dir, "state")
	for i, r := range runs {
		if err := selftest.AppendHistory(state, selftest.HistoryLine{Source: []string{"serve", "serve", "selftest"}[i], Mode: probens.ModeNamespace, Config: cfg, Report: r}); err != nil {
			t.Fatal(err)
		}
	}
	// an in-sandbox probe's result, with a credential it found
	probeRun := &selftest.Report{Start: t0.Add(90 * time.Minute), Results: []selftest.Result{{ID: "udp/198.51.100.8:53", Status: selftest.Leak, Route: "direct udp", Target: "198.51.100.8:53", Detail: "answered"}},
		Credentials: []selftest.Credential{{Kind: "aws-credentials", Name: "default", Location: "/home/agent/.aws/credentials"}}}
	if err := selftest.AppendHistory(state, selftest.HistoryLine{Source: "probe", Mode: "sandbox", Identity: "agent-b", Report: probeRun}); err != nil {
		t.Fatal(err)
	}
	f, _ := os.OpenFile(filepath.Join(state, selftest.HistoryFile), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("{truncated\n")
	f.Close()

	tests := []struct {
		name  string
		walls func() (string, error)
		args  []string
		want  []string
		not   []string
	}{
		{"full", func() (string, error) { return "table inet egressd\n\tcounter drop_fwd packets 12 bytes 720\n", nil },
			[]string{"--log", logFile},
			[]string{
				"# egressd evidence pack",
				"**Summary:** 3 self-test runs, 5 probes run, 1 leaks found; last sealed: 2026-11-30T09:00:00Z; last run: incomplete at 2026-11-30T11:00:00Z.",
				"counter drop_fwd packets 12 bytes 720",
				"| pypi | all | pypi.org, files.pythonhosted.org | - | 443 | read,download | - | - | pypi | true | - |",
				"| ssh | all | git.example.com | - | 22, 8000-8100 | * | - | - | - | false | - |",
				"| 2026-11-30T10:00:00Z | serve | namespace | leak | 2 | 1 | 0 | 1.6s |",
				"| 2026-11-30T11:00:00Z | selftest | namespace | incomplete | 1 | 0 | 1 | 0s |",
				"> 1 lines of the self-test history could not be read and were skipped.",
				"- 2026-11-30T10:00:00Z: **LEAK** `tcp/198.51.100.7:443` (direct tcp, target `198.51.100.7:443`): a direct TCP connection succeeded",
				"5 decisions between 2026-11-30T10:00:01Z and 2026-11-30T10:00:05Z, 1 allowed, 4 denied, 1 high-risk (1 lines were not JSON and were skipped)",
				"| 2026-11-30T10:00:02Z | agent-a | GET 169.254.169.254:80/latest/meta-data/ | deny | high-risk |",
				"| no-rule | evil.example | agent-b | 2 |",
				"| mirror | pypi.org | agent-a | 1 |",
				// in-sandbox probes, per identity, apart from egressd's own runs
				"| agent-b | 2026-11-30T10:30:00Z |",
				"- agent-b at 2026-11-30T10:30:00Z: **LEAK** `udp/198.51.100.8:53`",
				// probe traffic is counted apart, never a sandbox's high-risk hit
				"2 decisions on probe traffic",
				"### Metadata and action pages blocked",
				"| agent-a | pypi.org | 1 |",
				"| agent-b | aws-credentials | default | /home/agent/.aws/credentials |",
			}, []string{"| egressd-selftest |", "egressd-probe/agent-b |"}},
		{"no walls, no log", func() (string, error) { return "", errors.New("nft: needs root") },
			nil,
			[]string{"> Not available: nft: needs root.", "No decision log given: pass `--log FILE`"},
			[]string{"```"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old := showWalls
			showWalls = tt.walls
			defer func() { showWalls = old }()
			code, out, errs := runCmd(append([]string{"report", "--config", cfg, "--state-dir", state}, tt.args...)...)
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, errs)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("report lacks %q:\n%s", w, out)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(out, n) {
					t.Errorf("report has %q", n)
				}
			}
		})
	}
}

func TestReportNoHistory(t *testing.T) {
	// Not parallel: it swaps showWalls, a package-level var every report reads.
	old := showWalls
	showWalls = func() (string, error) { return "", errors.New("none") }
	defer func() { showWalls = old }()
	code, out, _ := runCmd("report", "--state-dir", t.TempDir())
	if code != exitOK || !strings.Contains(out, "no self-test has run yet") || !strings.Contains(out, "No runs recorded.") {
		t.Errorf("exit %d, report:\n%s", code, out)
	}
	if code, _, _ := runCmd("report", "--state-dir", t.TempDir(), "--log", "/nonexistent/log"); code != exitUsage {
		t.Errorf("missing log: exit %d, want 2", code)
	}
}
