package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/egressd/egressd/honeytoken"
)

// TestHoneytokensIssue: issue prints the set as KEY=VALUE lines, adds it
// to the store serve watches, and with --home writes the well-known
// credential files, never over existing ones.
func TestHoneytokensIssue(t *testing.T) {
	t.Parallel()
	state, home := t.TempDir(), filepath.Join(t.TempDir(), "home")
	code, out, errs := runCmd("honeytokens", "issue", "--identity", "pod-7", "--state-dir", state, "--home", home)
	if code != exitOK {
		t.Fatalf("exit %d %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "AWS_ACCESS_KEY_ID=AKIA") || !strings.HasPrefix(lines[2], "GITHUB_TOKEN=ghp_") {
		t.Fatalf("env lines %q", lines)
	}
	ts, err := honeytoken.Load(state)
	if err != nil || len(ts) != 4 || ts[0].Identity != "pod-7" || "AWS_ACCESS_KEY_ID="+ts[0].Value != lines[0] {
		t.Fatalf("store %+v %v", ts, err)
	}
	for _, rel := range []string{".aws/credentials", ".git-credentials"} {
		st, err := os.Stat(filepath.Join(home, rel))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v", rel, st, err)
		}
	}
	b, _ := os.ReadFile(filepath.Join(home, ".aws/credentials"))
	if !strings.Contains(string(b), ts[0].Value) || !strings.Contains(string(b), ts[1].Value) {
		t.Fatalf("credentials file %s", b)
	}
	if code, _, errs := runCmd("honeytokens", "issue", "--identity", "pod-7", "--state-dir", state, "--home", home); code != exitUsage || !strings.Contains(errs, "exists") {
		t.Fatalf("a second --home overwrote: exit %d %s", code, errs)
	}
	if ts, _ := honeytoken.Load(state); len(ts) != 4 {
		t.Fatalf("a failed issue still added %d tokens", len(ts)-4)
	}
	if code, _, _ := runCmd("honeytokens", "issue"); code != exitUsage {
		t.Fatalf("no identity: exit %d", code)
	}
}
