package runbox

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/egressd/egressd/policy"
)

// readableSecrets returns the secret files of p (inject rules' files,
// upstream_proxy.auth_from, the audit signing keys) that the sandbox's
// user could read. A credential the checkpoint holds must not be a file
// the agent can simply open, and a sandbox that can read a signing key
// can sign a rewritten audit log.
func readableSecrets(p *policy.Policy, cred *syscall.Credential) []string {
	if cred == nil {
		return nil
	}
	var out []string
	for _, f := range secretFiles(p) {
		if canRead(f, cred) {
			out = append(out, f)
		}
	}
	return out
}

// secretFiles are the files p reads credentials from: inject rules'
// files and upstream_proxy.auth_from, each once.
func secretFiles(p *policy.Policy) []string {
	var files []string
	add := func(f string) {
		if f != "" && !slices.Contains(files, f) {
			files = append(files, f)
		}
	}
	for _, r := range p.Rules {
		if r.Inject != nil {
			add(r.Inject.File)
		}
	}
	if p.UpstreamProxy != nil {
		add(p.UpstreamProxy.AuthFile)
	}
	add(p.Audit.SignKey) // a sandbox that can read one can sign
	add(p.Audit.SignKeyPrevious)
	return files
}

// hiddenPaths are what CMD's mount namespace hides: egressd's secret
// files, its state directory (CA key, history) and the run's decision log.
// The readability check stays the first gate; hiding is the second.
func hiddenPaths(c Config) []string {
	out := secretFiles(c.Policy)
	for _, p := range []string{c.StateDir, c.LogFile} {
		if p != "" && filepath.IsAbs(p) {
			out = append(out, filepath.Clean(p))
		}
	}
	return out
}

// canRead reports whether cred may read path: the path as named and, when
// it is a symlink, the file it resolves to (which the user may reach by
// another way), each opened as that user would open it. A path that
// cannot be examined counts as readable: unknown is not safe.
func canRead(path string, cred *syscall.Credential) bool {
	paths := []string{filepath.Clean(path)}
	if real, err := filepath.EvalSymlinks(path); err == nil && real != paths[0] {
		paths = append(paths, real)
	}
	for _, p := range paths {
		if ok, err := openAs(p, cred); ok || err != nil {
			return true
		}
	}
	return false
}

// openAs opens path for reading on a thread whose effective uid, gid and
// supplementary groups are cred's: the kernel's own check (mode bits,
// POSIX ACLs, every directory on the way, LSMs), not a model of it. The
// thread never gets its ids back: it stays locked and ends with the
// goroutine (the Go runtime then discards it, and never clones a locked
// thread). It reports false only for a refusal (EACCES, EPERM); any other
// outcome (the file opens, is absent, or the ids cannot be taken) is
// readable or an error.
func openAs(path string, cred *syscall.Credential) (bool, error) {
	type result struct {
		ok  bool
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: see above
		if err := setThreadIDs(cred); err != nil {
			ch <- result{err: fmt.Errorf("check %s as uid %d: %w", path, cred.Uid, err)}
			return
		}
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		switch {
		case err == nil:
			unix.Close(fd)
			ch <- result{ok: true}
		case errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM):
			ch <- result{}
		default:
			ch <- result{ok: true, err: fmt.Errorf("check %s as uid %d: %w", path, cred.Uid, err)}
		}
	}()
	r := <-ch
	return r.ok, r.err
}

// setThreadIDs gives the calling thread (only: raw syscalls, not the
// process-wide wrappers) cred's groups, effective gid and effective uid.
func setThreadIDs(cred *syscall.Credential) error {
	groups := cred.Groups
	if len(groups) == 0 {
		groups = []uint32{cred.Gid}
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), uintptr(unsafe.Pointer(&groups[0])), 0); e != 0 {
		return fmt.Errorf("setgroups: %w", e)
	}
	keep := ^uintptr(0) // -1: leave unchanged
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, keep, uintptr(cred.Gid), keep); e != 0 {
		return fmt.Errorf("setresgid: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, keep, uintptr(cred.Uid), keep); e != 0 {
		return fmt.Errorf("setresuid: %w", e)
	}
	return nil
}

// SecretsError names inject secret files the sandbox's user could read.
type SecretsError struct{ Files []string }

func (e *SecretsError) Error() string {
	return fmt.Sprintf("the sandbox's user could read the secret file(s) %v (inject files, upstream_proxy.auth_from, audit signing keys): make them root's, mode 0600 (or in a directory the user cannot search), so the credential stays with the checkpoint", e.Files)
}
