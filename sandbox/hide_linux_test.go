//go:build linux

package sandbox_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/egressd/egressd/sandbox"
)

// TestNSExecHides: paths the command's mount namespace hides (a secret
// file, a symlink to one, a state directory) read as empty inside, and are
// untouched outside; without hiding (the negative control) the command
// reads them.
func TestNSExecHides(t *testing.T) {
	t.Parallel()
	sbx := newNS(t, "hide")
	dir := t.TempDir()
	os.Chmod(filepath.Dir(dir), 0o755)
	os.Chmod(dir, 0o755)
	secret := filepath.Join(dir, "token")
	os.WriteFile(secret, []byte("s3cret-token\n"), 0o644)
	other := filepath.Join(dir, "other")
	os.WriteFile(other, []byte("s3cret-other\n"), 0o644)
	link := filepath.Join(dir, "link")
	os.Symlink(other, link)
	state := filepath.Join(dir, "state")
	os.Mkdir(state, 0o755)
	os.WriteFile(filepath.Join(state, "history"), []byte("s3cret-state\n"), 0o644)
	script := "cat " + secret + " " + other + " " + filepath.Join(state, "history") + " 2>&1; ls -A " + state + "; echo done"
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}

	out, err := sandbox.NSExecCommandHiding(os.Args[0], sbx.Path(), "", nobody, []string{secret, link, state, filepath.Join(dir, "absent")}, []string{"sh", "-c", script}).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if strings.Contains(string(out), "s3cret") || !strings.HasSuffix(string(out), "done\n") {
		t.Errorf("hidden paths read inside the sandbox: %q", out)
	}
	if b, _ := os.ReadFile(secret); string(b) != "s3cret-token\n" {
		t.Errorf("the secret changed outside: %q", b)
	}
	// negative control: not hidden, the same user reads them
	out, err = sandbox.NSExecCommandAs(os.Args[0], sbx.Path(), "", nobody, []string{"sh", "-c", script}).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "s3cret-token") || !strings.Contains(string(out), "s3cret-state") {
		t.Errorf("without hiding: %v %q, want the files read", err, out)
	}
}
