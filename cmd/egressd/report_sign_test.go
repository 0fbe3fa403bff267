package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/daemon"
	"github.com/egressd/egressd/honeytoken"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/selftest"
)

// TestReportSigned: report --sign writes the pack and a detached
// signature over it, the policy's and history's hashes, the walls and the
// audit checkpoint it was cut at; report verify accepts it and refuses a
// tampered pack, a tampered signature file, another key and an audit log
// rewritten after the cut.
func TestReportSigned(t *testing.T) {
	// Not parallel: it swaps showWalls, a package-level var every report reads.
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	if _, err := audit.GenerateKey(keys); err != nil {
		t.Fatal(err)
	}
	otherKeys := filepath.Join(dir, "other")
	audit.GenerateKey(otherKeys)
	cfg := filepath.Join(dir, "egressd.yaml")
	os.WriteFile(cfg, []byte(reportConfig+"audit:\n  sign_key: file:"+filepath.Join(keys, audit.PrivateKeyFile)+"\n"), 0o600)
	state := filepath.Join(dir, "state")
	selftest.AppendHistory(state, selftest.HistoryLine{Source: "serve", Mode: "namespace", Config: cfg,
		Report: &selftest.Report{Start: time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC), Results: []selftest.Result{{ID: "http-canary", Status: selftest.Pass}}}})
	// a signed audit log, as serve writes it
	p, err := policy.Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ao, err := daemon.AuditOptions(p)
	if err != nil {
		t.Fatal(err)
	}
	auditLog := filepath.Join(dir, "audit.jsonl")
	s, err := audit.OpenWith(auditLog, ao)
	if err != nil {
		t.Fatal(err)
	}
	slog.New(s.Handler(nil)).Info(audit.DecisionMsg, "host", "169.254.169.254", "decision", "deny")
	s.Close()

	old := showWalls
	showWalls = func() (string, error) { return "table inet egressd\n\tcounter drop_fwd packets 12 bytes 720\n", nil }
	defer func() { showWalls = old }()
	pack := filepath.Join(dir, "pack.md")
	code, out, errs := runCmd("report", "--config", cfg, "--state-dir", state, "--sign", "--audit-log", auditLog, "--out", pack)
	if code != exitOK {
		t.Fatalf("report --sign: exit %d %s %s", code, out, errs)
	}
	md, _ := os.ReadFile(pack)
	for _, want := range []string{"## 9. Signature", "egressd report verify --key audit.pub", "the audit log `" + auditLog + "` up to its signed checkpoint seq 5", "counter drop_fwd packets 12 bytes 720", "does not prove the host that held the key was honest"} {
		if !bytes.Contains(md, []byte(want)) {
			t.Errorf("pack lacks %q", want)
		}
	}
	pub := filepath.Join(keys, audit.PublicKeyFile)
	verify := func(args ...string) (int, string) {
		t.Helper()
		code, out, errs := runCmd(append([]string{"report", "verify"}, args...)...)
		return code, out + errs
	}
	if code, out := verify("--key", pub, "--audit-log", auditLog, pack); code != exitOK || !strings.Contains(out, "verified: signed by key") || !strings.Contains(out, "holds checkpoint seq 5") {
		t.Fatalf("verify: %d %s", code, out)
	}
	sig, _ := os.ReadFile(pack + ".sig")
	var seal map[string]any
	json.Unmarshal(sig, &seal)
	if seal["policy_sha256"] == "" || seal["history_sha256"] == "" || seal["walls_sha256"] == "" || seal["audit_checkpoint"] == nil {
		t.Fatalf("the signature misses an input: %s", sig)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, b, 0o600)
		return p
	}
	tamperedPack := write("tampered.md", bytes.Replace(md, []byte("packets 12"), []byte("packets 0"), 1))
	write("tampered.md.sig", sig)
	editedSig := write("edited.md", md)
	write("edited.md.sig", bytes.Replace(sig, []byte(seal["policy_sha256"].(string)), []byte(strings.Repeat("0", 64)), 1))
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"pack edited", []string{"--key", pub, tamperedPack}, "the pack was edited"},
		{"signature file edited", []string{"--key", pub, editedSig}, "it was edited"},
		{"another key", []string{"--key", filepath.Join(otherKeys, audit.PublicKeyFile), pack}, "not by"},
	} {
		if code, out := verify(tt.args...); code != exitDeny || !strings.Contains(out, "NOT VERIFIED") || !strings.Contains(out, tt.want) {
			t.Errorf("%s: exit %d %s", tt.name, code, out)
		}
	}
	// the audit log rewritten consistently after the pack was cut
	lb, _ := os.ReadFile(auditLog)
	os.WriteFile(auditLog, rechainLines(bytes.Replace(lb, []byte("169.254.169.254"), []byte("example.com"), 1)), 0o600)
	if code, out := verify("--key", pub, "--audit-log", auditLog, pack); code != exitDeny || !strings.Contains(out, "does not verify") {
		t.Errorf("rewritten audit log: exit %d %s", code, out)
	}
	// no key, no signature
	os.WriteFile(cfg, []byte(reportConfig), 0o600)
	if code, _, errs := runCmd("report", "--config", cfg, "--state-dir", state, "--sign", "--out", pack); code != exitUsage || !strings.Contains(errs, "no key") {
		t.Errorf("--sign without a key: %d %s", code, errs)
	}
}

// TestReportHoneytokens: the report lists the keys egressd placed (by
// identity and kind, never values) apart from the keys the scan found, and
// the honeytoken hits per identity from decision and DNS lines (alert
// lines repeat them and are not counted).
func TestReportHoneytokens(t *testing.T) {
	// Not parallel: it swaps showWalls, a package-level var every report reads.
	dir := t.TempDir()
	cfg := filepath.Join(dir, "egressd.yaml")
	os.WriteFile(cfg, []byte(reportConfig), 0o600)
	state := filepath.Join(dir, "state")
	ts, _ := honeytoken.Issue("agent-b")
	if err := honeytoken.Append(state, ts); err != nil {
		t.Fatal(err)
	}
	probeRun := &selftest.Report{Start: time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC), Results: []selftest.Result{{ID: "http-canary", Status: selftest.Pass}},
		Credentials: []selftest.Credential{{Kind: "env-token", Name: "AWS_ACCESS_KEY_ID", Location: "env"}, {Kind: "env-token", Name: "GITHUB_TOKEN", Location: "env"}, {Kind: "env-token", Name: "NPM_TOKEN", Location: "env"}}}
	selftest.AppendHistory(state, selftest.HistoryLine{Source: "probe", Mode: "sandbox", Identity: "agent-b", Report: probeRun})
	logFile := filepath.Join(dir, "serve.log")
	os.WriteFile(logFile, []byte(`{"time":"2026-11-30T10:00:01Z","level":"WARN","msg":"decision","identity":"agent-b","method":"GET","host":"allowed.example","port":80,"path":"/","decision":"deny","reason":"honeytoken","status":403,"honeytoken":"aws-access-key-id","honeytoken_of":"agent-b","honeytoken_where":"query"}
{"time":"2026-11-30T10:00:02Z","level":"ERROR","msg":"alert: honeytoken attempt","identity":"agent-b","reason":"honeytoken","honeytoken":"aws-access-key-id","honeytoken_of":"agent-b","where":"query"}
{"time":"2026-11-30T10:00:03Z","level":"WARN","msg":"dns query","identity":"agent-b","qname":"x.wild.example","result":"nxdomain","reason":"honeytoken","honeytoken":"github-token","honeytoken_of":"agent-b","honeytoken_where":"dns name"}
`), 0o600)
	old := showWalls
	showWalls = func() (string, error) { return "", nil }
	defer func() { showWalls = old }()
	code, out, errs := runCmd("report", "--config", cfg, "--state-dir", state, "--log", logFile)
	if code != exitOK {
		t.Fatalf("exit %d %s", code, errs)
	}
	for _, want := range []string{
		"### Keys egressd placed: honeytokens",
		"| agent-b | aws-access-key-id, aws-secret-access-key, github-token, api-key | AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, GITHUB_TOKEN, API_KEY | 1 |",
		"### Keys the scan found",
		"| agent-b | env-token | NPM_TOKEN | env |",
		"| agent-b | agent-b | aws-access-key-id | query | 1 | 2026-11-30T10:00:01Z | 2026-11-30T10:00:01Z |",
		"| agent-b | agent-b | github-token | dns name | 1 |",
		"This pack is not signed",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	for _, not := range []string{"| agent-b | env-token | AWS_ACCESS_KEY_ID |", "| agent-b | env-token | GITHUB_TOKEN |", ts[0].Value} {
		if strings.Contains(out, not) {
			t.Errorf("report has %q", not)
		}
	}
}
