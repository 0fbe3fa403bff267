package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestValidateLintsStrict: the shadowed rule (a wildcard with
// every page before a read-only api.github.com) is a warning naming both
// rules, exit 0; --strict makes it an error (exit 2) for CI; a clean
// config passes --strict.
func TestValidateLintsStrict(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	shadow := filepath.Join(dir, "shadow.yaml")
	os.WriteFile(shadow, []byte(`version: 1
selftest:
  expect_reachable: [https://docs.example.org/]
  canary_name: canary.example.net
allow:
  - name: gh
    hosts: ["*.github.com"]
    pages: ["*"]
  - name: gh-api-read
    hosts: [api.github.com]
    pages: [read]
`), 0o644)
	code, out, errs := runCmd("validate", "--offline", shadow)
	if code != exitOK || !strings.Contains(out, "ok") || !strings.Contains(errs, `warning: allow[1] ("gh-api-read") is shadowed`) || !strings.Contains(errs, `allow[0] ("gh")`) {
		t.Errorf("validate: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	code, out, errs = runCmd("validate", "--offline", "--strict", shadow)
	if code != exitUsage || strings.Contains(out, "ok") || !strings.Contains(errs, `error: allow[1] ("gh-api-read") is shadowed`) {
		t.Errorf("validate --strict: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, out, errs := runCmd("validate", "--offline", "--strict"); code != exitOK || !strings.Contains(out, "ok") {
		t.Errorf("validate --strict of the default config: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}
