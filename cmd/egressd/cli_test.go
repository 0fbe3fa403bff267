package main

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/egressd/egressd/ca"
)

// TestHelpListsEveryFlag: `egressd CMD --help` exits 0 and lists every
// flag the command defines.
func TestHelpListsEveryFlag(t *testing.T) {
	// Not parallel: it sets flagSetMade, a package-level hook every run() reads.
	var names []string
	for name := range commands {
		names = append(names, name)
	}
	slices.Sort(names)
	sub := map[string][]string{"ca": {"export"}, "audit": {"verify"}, "nft": {"show"}, "honeytokens": {"issue"}}
	for _, name := range names {
		args := append(append([]string{name}, sub[name]...), "--help")
		t.Run(name, func(t *testing.T) {
			var sets []*flag.FlagSet
			flagSetMade = func(fs *flag.FlagSet) { sets = append(sets, fs) }
			defer func() { flagSetMade = nil }()
			code, out, errs := runCmd(args...)
			if code != exitOK {
				t.Errorf("%v: exit %d, want 0\n%s%s", args, code, out, errs)
			}
			if len(sets) == 0 {
				t.Skipf("%s makes no flag set on this system", name)
			}
			for _, fs := range sets {
				fs.VisitAll(func(f *flag.Flag) {
					if !strings.Contains(out, "-"+f.Name) {
						t.Errorf("%v does not list -%s:\n%s", args, f.Name, out)
					}
				})
			}
		})
	}
	if code, out, _ := runCmd("--help"); code != exitOK || !strings.Contains(out, "version") {
		t.Errorf("egressd --help: exit %d\n%s", code, out)
	}
}

// TestVersion: `egressd version` and `--version` print the build.
func TestVersion(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"version", "--version"} {
		code, out, _ := runCmd(arg)
		if code != exitOK || !strings.HasPrefix(out, "egressd ") || !strings.Contains(out, "revision") || !strings.Contains(out, "go1.") {
			t.Errorf("egressd %s: exit %d %q", arg, code, out)
		}
	}
}

// TestCheckBareHost: a host without a port or scheme is a usage error
// (exit 2) that says what is wanted, not a deny.
func TestCheckBareHost(t *testing.T) {
	t.Parallel()
	for _, target := range []string{"pypi.org", "example.com", "2001:db8::1"} {
		code, out, errs := runCmd("check", target)
		if code != exitUsage || !strings.Contains(errs, "want a URL or host:port") || out != "" {
			t.Errorf("check %s: exit %d, stdout %q, stderr %q; want 2 and \"want a URL or host:port\"", target, code, out, errs)
		}
	}
	if code, _, errs := runCmd("check", "example.com:443"); code == exitUsage {
		t.Errorf("check host:port: a usage error: %s", errs)
	}
}

// TestCAExportNeverMints: `ca export` with a state directory that holds no
// CA fails and creates nothing; with serve's CA it prints that CA.
func TestCAExportNeverMints(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	code, out, errs := runCmd("ca", "export", "--state-dir", dir)
	if code != exitUsage || out != "" || !strings.Contains(errs, "no CA in") {
		t.Errorf("export from an empty state dir: exit %d, stdout %q, stderr %q; want 2 and no certificate", code, out, errs)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("export created %v in the state dir", ents)
	}
	want, err := ca.LoadOrCreate(filepath.Join(dir, "ca")) // what serve does
	if err != nil {
		t.Fatal(err)
	}
	if code, out, errs := runCmd("ca", "export", "--state-dir", dir); code != exitOK || out != string(want.CertPEM()) {
		t.Errorf("export of serve's CA: exit %d %s", code, errs)
	}
}

// TestValidateWarns: validate accepts a config without a positive control
// or a canary (exit 0) and warns about both on stderr.
func TestValidateWarns(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(cfg, []byte("version: 1\nallow:\n  - hosts: [a.example]\n"), 0o644)
	code, out, errs := runCmd("validate", "--offline", cfg)
	if code != exitOK || !strings.Contains(out, "ok") || !strings.Contains(errs, "warning: selftest.expect_reachable is empty") || !strings.Contains(errs, "warning: selftest has no canary") {
		t.Errorf("validate: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, _, errs := runCmd("validate", "--offline"); code != exitOK || strings.Contains(errs, "warning") {
		t.Errorf("validate of the default config: exit %d, stderr %q", code, errs)
	}
}
