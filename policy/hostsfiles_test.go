package policy

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/egressd/egressd/internal/testutil"
	"github.com/egressd/egressd/policy/hostlist"
)

// TestDenyHostsFiles: deny.hosts_files, relative to the config, deny the
// listed names and the names under them, in the proxy and DNS decisions,
// even under an allow rule; a bad list is a config error with its line.
func TestDenyHostsFiles(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "threats.txt"), []byte("bad.example.com\n"), 0o600)
	cfg := filepath.Join(dir, "egressd.yaml")
	os.WriteFile(cfg, []byte("version: 1\nallow:\n  - hosts: [\"*.example.com\", ok.example.com]\ndeny:\n  hosts_files: [threats.txt]\n"), 0o600)
	p, err := Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if p.RuleForName("x.bad.example.com") != nil || p.RuleForName("bad.example.com") != nil {
		t.Error("a listed name resolves")
	}
	if p.RuleForName("ok.example.com") == nil {
		t.Error("an unlisted allowed name is refused")
	}
	if d := p.DecideTarget(mustParseAuthority(t, "x.bad.example.com:443")); d.Allow {
		t.Errorf("CONNECT to a listed name: %+v", d)
	}
	os.WriteFile(filepath.Join(dir, "threats.txt"), []byte("bad.example.com\n10.0.0.1\n"), 0o600)
	if _, err := Load(cfg); err == nil || !strings.Contains(err.Error(), "deny.hosts_files[0]") || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("bad list: %v", err)
	}
}

func mustParseAuthority(t *testing.T, s string) *Target {
	t.Helper()
	tg, err := ParseAuthority(s)
	if err != nil {
		t.Fatal(err)
	}
	return &tg
}

// TestAllowHostsFiles: an allow rule's hosts_files hold patterns as its
// hosts do, one a line; errors name the list's file and line.
func TestAllowHostsFiles(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "allow.txt"), []byte("# fleet allowlist\npypi.example.com\n\n*.svc.example.org\n"), 0o600)
	cfg := filepath.Join(dir, "egressd.yaml")
	os.WriteFile(cfg, []byte("version: 1\nallow:\n  - name: fleet\n    hosts_files: [allow.txt]\n"), 0o600)
	p, err := Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"pypi.example.com": true, "a.svc.example.org": true, "svc.example.org": false, "x.pypi.example.com": false, "example.org": false} {
		if got := p.RuleForName(name) != nil; got != want {
			t.Errorf("%s allowed %v, want %v", name, got, want)
		}
	}
	os.WriteFile(filepath.Join(dir, "allow.txt"), []byte("ok.example.com\n*.com\n"), 0o600)
	if _, err := Load(cfg); err == nil || !strings.Contains(err.Error(), "allow.txt:2") {
		t.Errorf("bad list: %v, want allow.txt:2", err)
	}
}

// BenchmarkLoad1MHostsFile: a policy whose 1,000,000 hosts (half exact,
// half wildcards) are in a hosts file, as a fleet's generated allowlist
// should be; reports the load's CPU seconds, the heap it keeps and the
// process's peak RSS.
func BenchmarkLoad1MHostsFile(b *testing.B) {
	dir := b.TempDir()
	f, _ := os.Create(filepath.Join(dir, "hosts.txt"))
	w := bufio.NewWriterSize(f, 1<<20)
	for k := range 1_000_000 {
		if k%2 == 0 {
			fmt.Fprintf(w, "host%d.example%d.com\n", k, k%997)
		} else {
			fmt.Fprintf(w, "*.svc%d.example%d.org\n", k, k%991)
		}
	}
	w.Flush()
	f.Close()
	cfg := filepath.Join(dir, "egressd.yaml")
	os.WriteFile(cfg, []byte("version: 1\nallow:\n  - name: fleet\n    ports: [443]\n    hosts_files: [hosts.txt]\n"), 0o600)
	b.ResetTimer()
	for range b.N {
		testutil.MeasureLoad(b, hostlist.MappedBytes, func() (any, error) { return Load(cfg) })
	}
}
