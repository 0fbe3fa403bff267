package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/egressd/egressd/daemon"
	"github.com/egressd/egressd/policy"
)

// TestReportShowsPolicyInForce: serve records the config it verified in
// the state directory; after a reload that was rolled back (the file now
// holds a policy that never passed), `egressd report` shows the verified
// policy's rules and says the file differs, rather than the file's.
func TestReportShowsPolicyInForce(t *testing.T) {
	// Not parallel: it swaps showWalls, a package-level var every report reads.
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	cfg := filepath.Join(dir, "egressd.yaml")
	good := "version: 1\nallow:\n  - name: verified-rule\n    hosts: [docs.example.org]\n"
	bad := "version: 1\nallow:\n  - name: rolled-back-rule\n    hosts: [paste.example.net]\n"
	if err := os.WriteFile(cfg, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	// serve's wiring: a Load and a Verify, wrapped to record what is in force
	g := daemon.Gateway{Options: daemon.Options{Load: func() (*policy.Policy, error) { return loadPolicy(cfg) }}}
	sealed := true
	g.Verify = func(context.Context, *policy.Policy) daemon.Verdict { return daemon.Verdict{Sealed: sealed} }
	trackInForce(&g, cfg, state)

	p, err := g.Load() // boot: verified
	if err != nil {
		t.Fatal(err)
	}
	g.Verify(t.Context(), p)
	os.WriteFile(cfg, []byte(bad), 0o644)
	sealed = false // the reload leaks: rolled back, the first policy stays
	if p, err = g.Load(); err != nil {
		t.Fatal(err)
	}
	g.Verify(t.Context(), p)

	old := showWalls
	showWalls = func() (string, error) { return "", errors.New("none") }
	defer func() { showWalls = old }()
	code, out, errs := runCmd("report", "--config", cfg, "--state-dir", state)
	if code != exitOK || !strings.Contains(out, "verified-rule") || strings.Contains(out, "rolled-back-rule") || !strings.Contains(out, "policy in force") || !strings.Contains(errs, "differs from the policy in force") {
		t.Errorf("report: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	// once the file's policy is verified, it is the one reported
	sealed = true
	if p, err = g.Load(); err != nil {
		t.Fatal(err)
	}
	g.Verify(t.Context(), p)
	code, out, errs = runCmd("report", "--config", cfg, "--state-dir", state)
	if code != exitOK || !strings.Contains(out, "rolled-back-rule") || strings.Contains(errs, "differs") {
		t.Errorf("report after a verified reload: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
}
