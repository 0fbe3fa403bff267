package runbox

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/egressd/egressd/honeytoken"
	"github.com/egressd/egressd/policy"
)

// TestReadableSecrets: a secret the sandbox's user can open is named; one
// it cannot (mode 0600 of another user, or behind a directory it cannot
// search) is not.
func TestReadableSecrets(t *testing.T) {
	t.Parallel()
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

// TestReadableSecretsAsTheUser: the check is the sandbox user's own open,
// not the mode bits: a POSIX ACL granting the user read, and a symlink in
// a directory the user cannot search pointing at a file it can read, are
// readable; upstream_proxy.auth_from is checked like an inject secret.
func TestReadableSecretsAsTheUser(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to own files as another user")
	}
	dir := t.TempDir()
	os.Chmod(filepath.Dir(dir), 0o755)
	os.Chmod(dir, 0o755)
	acl := filepath.Join(dir, "acl")
	if err := os.WriteFile(acl, []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := setUserReadACL(acl, 65534); err != nil {
		t.Skipf("cannot set a POSIX ACL here: %v", err)
	}
	open := filepath.Join(dir, "open")
	os.WriteFile(open, []byte("s3cret"), 0o644)
	closed := filepath.Join(dir, "closed")
	os.Mkdir(closed, 0o700)
	link := filepath.Join(closed, "link") // behind a 0700 directory, pointing out of it
	os.Symlink(open, link)
	auth := filepath.Join(dir, "proxy-auth")
	os.WriteFile(auth, []byte("u:p"), 0o644)
	private := filepath.Join(dir, "private")
	os.WriteFile(private, []byte("u:p"), 0o600)
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
	tests := []struct {
		name string
		p    *policy.Policy
		want int
	}{
		{"ACL grants read", &policy.Policy{Rules: []*policy.Rule{{Name: "r", Inject: &policy.Inject{File: acl}}}}, 1},
		// the user cannot reach the link, but may open its target: the
		// target is what an agent reads
		{"symlink to a readable file", &policy.Policy{Rules: []*policy.Rule{{Name: "r", Inject: &policy.Inject{File: link}}}}, 1},
		{"auth_from readable", &policy.Policy{UpstreamProxy: &policy.UpstreamProxy{Addr: "198.51.100.1:8080", AuthFile: auth}}, 1},
		{"auth_from private", &policy.Policy{UpstreamProxy: &policy.UpstreamProxy{Addr: "198.51.100.1:8080", AuthFile: private}}, 0},
	}
	for _, tt := range tests {
		if got := readableSecrets(tt.p, nobody); len(got) != tt.want {
			t.Errorf("%s: readable %v, want %d file(s)", tt.name, got, tt.want)
		}
	}
}

// setUserReadACL gives uid read on path by a POSIX access ACL
// (system.posix_acl_access; no setfacl needed): user::rw-, user:uid:r--,
// group::---, mask::r--, other::---.
func setUserReadACL(path string, uid uint32) error {
	const undefined = 0xffffffff
	entries := []struct {
		tag, perm uint16
		id        uint32
	}{{0x01, 6, undefined}, {0x02, 4, uid}, {0x04, 0, undefined}, {0x10, 4, undefined}, {0x20, 0, undefined}}
	b := binary.LittleEndian.AppendUint32(nil, 2) // POSIX_ACL_XATTR_VERSION
	for _, e := range entries {
		b = binary.LittleEndian.AppendUint16(b, e.tag)
		b = binary.LittleEndian.AppendUint16(b, e.perm)
		b = binary.LittleEndian.AppendUint32(b, e.id)
	}
	return unix.Setxattr(path, "system.posix_acl_access", b, 0)
}

// TestHiddenPaths: CMD's mount namespace hides the secret files, the state
// directory and the run log (relative paths, which the helper would
// refuse, are left to the readability check).
func TestHiddenPaths(t *testing.T) {
	t.Parallel()
	p := &policy.Policy{Rules: []*policy.Rule{{Name: "a", Inject: &policy.Inject{File: "/etc/egressd/token"}}, {Name: "b", Inject: &policy.Inject{File: "/etc/egressd/token"}}},
		UpstreamProxy: &policy.UpstreamProxy{Addr: "198.51.100.1:8080", AuthFile: "/etc/egressd/proxy-auth"}}
	got := hiddenPaths(Config{Policy: p, StateDir: "/var/lib/egressd/", LogFile: "run.log"})
	want := []string{"/etc/egressd/token", "/etc/egressd/proxy-auth", "/var/lib/egressd"}
	if !slices.Equal(got, want) {
		t.Errorf("hidden %v, want %v", got, want)
	}
}

// TestReadableHoneytokenStore: a honeytoken store the sandbox's user can
// read tells the agent which of its credentials are canaries (it would
// then leave them alone): named like a secret. An absent store is fine:
// the run creates it root's, mode 0600.
func TestReadableHoneytokenStore(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to own files as another user")
	}
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
	open, closed, absent := t.TempDir(), t.TempDir(), t.TempDir()
	for _, d := range []string{filepath.Dir(open), open, closed, absent} {
		os.Chmod(d, 0o755)
	}
	for dir, mode := range map[string]os.FileMode{open: 0o644, closed: 0o600} {
		p := filepath.Join(dir, honeytoken.StoreFile)
		if err := os.WriteFile(p, []byte("{}\n"), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
	}
	for _, tt := range []struct {
		dir  string
		want bool
	}{{open, true}, {closed, false}, {absent, false}, {"", false}} {
		if got := readableStore(tt.dir, nobody) != ""; got != tt.want {
			t.Errorf("store in %q: readable %v, want %v", tt.dir, got, tt.want)
		}
	}
}
