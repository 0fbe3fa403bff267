package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSame: a config loaded twice is Same; any change to it, to an allow
// list's names or to a deny list's file (even a touch) is not.
func TestSame(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const base = `version: 1
deny:
  hosts: [bad.example.net]
allow:
  - name: pkgs
    hosts: [pkgs.example.com, "*.cdn.example.com"]
    hosts_files: [allow.txt]
    ports: [443]
`
	write("allow.txt", "a.example.org\nb.example.org\n")
	write("deny.txt", "evil.example.net\n")
	cfg := write("egressd.yaml", base)
	load := func() *Policy {
		t.Helper()
		p, err := Load(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	first := load()
	if again := load(); !first.Same(again) || !again.Same(first) {
		t.Fatal("the same config loaded twice is not Same")
	}
	for _, c := range []struct {
		name   string
		change func()
	}{
		{"a port", func() { write("egressd.yaml", base+"    methods: [GET]\n") }},
		{"a deny host", func() {
			write("egressd.yaml", base)
			write("egressd.yaml", strings.Replace(base, "bad.example.net", "worse.example.net", 1))
		}},
		{"an allow list's names", func() {
			write("egressd.yaml", base)
			write("allow.txt", "a.example.org\nc.example.org\n")
		}},
		{"a deny list named", func() {
			write("allow.txt", "a.example.org\nb.example.org\n")
			write("egressd.yaml", strings.Replace(base, "deny:\n", "deny:\n  hosts_files: [deny.txt]\n", 1))
		}},
		// a deny list is Same only while the list cache shares it (its
		// file's device, inode, size and times unchanged, and not changed
		// within the last 2 s): written again, even with the same names,
		// it is not, and a reload verifies (which is never wrong)
		{"a deny list written again", func() { write("deny.txt", "evil.example.net\n") }},
	} {
		prev := load()
		c.change()
		if next := load(); prev.Same(next) {
			t.Errorf("%s changed and the policies are Same", c.name)
		}
	}
	var nilp *Policy
	if nilp.Same(first) || first.Same(nil) {
		t.Error("nil is Same as a policy")
	}
}
