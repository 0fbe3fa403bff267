package runbox

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/egressd/egressd/policy"
)

// readableSecrets returns the inject secret files and audit signing keys of p that the sandbox's
// user could read (every directory on the way searchable, the file
// readable, by owner, group or other bits). egressd run does not hide the
// host's files from the sandbox: a credential the checkpoint holds must not
// be a file the agent can simply open.
func readableSecrets(p *policy.Policy, cred *syscall.Credential) []string {
	if cred == nil {
		return nil
	}
	var files []string
	for _, r := range p.Rules {
		if r.Inject != nil && r.Inject.File != "" {
			files = append(files, r.Inject.File)
		}
	}
	// the audit signing keys too: a sandbox that can read one can sign
	files = append(files, p.Audit.SignKey, p.Audit.SignKeyPrevious)
	var out []string
	for _, f := range files {
		if f != "" && !slices.Contains(out, f) && canRead(f, cred) {
			out = append(out, f)
		}
	}
	return out
}

// canRead reports whether cred may open path for reading, by the
// permission bits of path and its directories (no ACLs, no capabilities:
// the sandbox's user has none). A path that cannot be examined counts as
// readable: unknown is not safe.
func canRead(path string, cred *syscall.Credential) bool {
	path = filepath.Clean(path)
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		if !allowed(dir, cred, 1) {
			return false
		}
		if dir == "/" || dir == "." {
			break
		}
	}
	return allowed(path, cred, 4)
}

// allowed checks one permission bit (4 read, 1 search) of path for cred.
func allowed(path string, cred *syscall.Credential, bit uint32) bool {
	fi, err := os.Stat(path)
	if err != nil {
		return true
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return true
	}
	mode := uint32(fi.Mode().Perm())
	switch {
	case st.Uid == cred.Uid:
		return mode&(bit<<6) != 0
	case st.Gid == cred.Gid || slices.Contains(cred.Groups, st.Gid):
		return mode&(bit<<3) != 0
	default:
		return mode&bit != 0
	}
}

// SecretsError names inject secret files the sandbox's user could read.
type SecretsError struct{ Files []string }

func (e *SecretsError) Error() string {
	return fmt.Sprintf("the sandbox's user could read the secret file(s) %v (inject secrets, audit signing keys): make them root's, mode 0600 (or in a directory the user cannot search), so the credential stays with the checkpoint", e.Files)
}
