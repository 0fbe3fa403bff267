package runbox

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/egressd/egressd/policy"
)

// TestReadableSecrets: a secret the sandbox's user can open is named; one
// it cannot (mode 0600 of another user, or behind a directory it cannot
// search) is not.
func TestReadableSecrets(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to own files as another user")
	}
	dir := t.TempDir()
	os.Chmod(filepath.Dir(dir), 0o755) // t.TempDir's parent is 0700: nothing in it is readable
	os.Chmod(dir, 0o755)
	write := func(rel string, mode os.FileMode) string {
		p := filepath.Join(dir, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte("s3cret"), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		return p
	}
	closedDir := filepath.Join(dir, "closed")
	hidden := write("closed/token", 0o644)
	os.Chmod(closedDir, 0o700)
	private := write("private", 0o600)
	world := write("world", 0o644)
	mine := write("mine", 0o600)
	os.Chown(mine, 65534, 65534)
	group := write("group", 0o640)
	os.Chown(group, 0, 4242)

	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
	withGroup := &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{4242}}
	tests := []struct {
		file string
		cred *syscall.Credential
		want bool
	}{
		{private, nobody, false},
		{hidden, nobody, false},
		{world, nobody, true},
		{mine, nobody, true},
		{group, nobody, false},
		{group, withGroup, true},
		{filepath.Join(dir, "absent"), nobody, true}, // unknown is not safe
	}
	for _, tt := range tests {
		p := &policy.Policy{Rules: []*policy.Rule{{Name: "r", Inject: &policy.Inject{File: tt.file}}}}
		got := len(readableSecrets(p, tt.cred)) == 1
		if got != tt.want {
			t.Errorf("%s for uid %d groups %v: readable %v, want %v", tt.file, tt.cred.Uid, tt.cred.Groups, got, tt.want)
		}
	}
	// the audit signing keys count as secrets too
	p := &policy.Policy{Audit: policy.Audit{SignKey: world, SignKeyPrevious: private}}
	if got := readableSecrets(p, nobody); len(got) != 1 || got[0] != world {
		t.Errorf("audit keys readable by the sandbox: %v, want [%s]", got, world)
	}
}
