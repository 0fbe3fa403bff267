//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// threadNSPath is the calling thread's network namespace.
const threadNSPath = "/proc/thread-self/ns/net"

// Create makes a new network namespace bind-mounted at NetnsDir/name (as
// `ip netns add` does) and returns an open handle to it. The new namespace
// has only a down lo. The caller's thread is not moved: the namespace is
// created on a locked helper thread that is restored (or discarded).
func Create(name string) (*NS, error) {
	if err := validName(name); err != nil {
		return nil, fmt.Errorf("sandbox: create namespace: %w", err)
	}
	if err := os.MkdirAll(NetnsDir, 0o755); err != nil {
		return nil, fmt.Errorf("sandbox: create namespace %q: %w", name, err)
	}
	path := filepath.Join(NetnsDir, name)
	var ns *NS
	err := onLockedThread(func() error {
		// O_EXCL first, so an existing namespace of that name is never
		// shadowed and a failed create removes only its own file.
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
		if err != nil {
			return err
		}
		f.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			os.Remove(path)
			return fmt.Errorf("unshare: %w", err)
		}
		if err := unix.Mount(threadNSPath, path, "", unix.MS_BIND, ""); err != nil {
			os.Remove(path)
			return fmt.Errorf("bind-mount %s: %w", path, err)
		}
		ns, err = openPath(path)
		if err != nil {
			_ = Delete(name)
			return err
		}
		ns.name = name
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sandbox: create namespace %q: %w", name, err)
	}
	return ns, nil
}

// CreateUnnamed makes a new network namespace held only by the returned
// handle: no name under NetnsDir, no bind mount, so it needs CAP_SYS_ADMIN
// for unshare(2) but no writable /run and no mount rights, and it cannot
// outlive the process. Path() is /proc/PID/fd/FD while the handle is open.
func CreateUnnamed() (*NS, error) {
	var ns *NS
	err := onLockedThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare: %w", err)
		}
		fd, err := unix.Open(threadNSPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		cookie, err := threadCookie()
		if err != nil {
			unix.Close(fd)
			return err
		}
		ns = &NS{path: fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), fd), fd: fd, cookie: cookie}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sandbox: create unnamed namespace: %w", err)
	}
	return ns, nil
}

// Open opens the named namespace NetnsDir/name.
func Open(name string) (*NS, error) {
	if err := validName(name); err != nil {
		return nil, fmt.Errorf("sandbox: open namespace: %w", err)
	}
	ns, err := OpenPath(filepath.Join(NetnsDir, name))
	if err != nil {
		return nil, err
	}
	ns.name = name
	return ns, nil
}

// OpenPath opens the network namespace at path (NetnsDir/NAME,
// /proc/PID/ns/net, ...). Path() returns path as given.
func OpenPath(path string) (*NS, error) {
	var ns *NS
	err := onLockedThread(func() error {
		var err error
		ns, err = openPath(path)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("sandbox: open namespace %s: %w", path, err)
	}
	return ns, nil
}

// Current opens the network namespace of the calling thread: the process's
// own namespace, unless called from inside [Do]. In production that is the
// gateway namespace egressd serves from; do not assume it is the machine's
// root namespace ([RootCookie] tells).
func Current() (*NS, error) {
	// On the caller's own thread: a helper goroutine could run elsewhere.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	fd, err := unix.Open(threadNSPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sandbox: open current namespace: %w", err)
	}
	cookie, err := threadCookie()
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("sandbox: open current namespace: %w", err)
	}
	return &NS{path: fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), fd), fd: fd, cookie: cookie}, nil
}

// openPath opens path and reads its cookie by entering it. It must run on a
// locked thread that onLockedThread restores.
func openPath(path string) (*NS, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	// setns also checks that fd is a network namespace (EINVAL otherwise).
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("setns: %w", err)
	}
	cookie, err := threadCookie()
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &NS{path: path, fd: fd, cookie: cookie}, nil
}

// threadCookie is the cookie of the calling thread's namespace, read from a
// throwaway AF_UNIX socket (no address, no traffic).
func threadCookie() (uint64, error) {
	s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(s)
	c, err := unix.GetsockoptUint64(s, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
	if err != nil {
		return 0, fmt.Errorf("read SO_NETNS_COOKIE: %w", err)
	}
	return c, nil
}

// Close releases the handle. The namespace lives on while it has a name,
// processes or sockets. Close is idempotent.
func (ns *NS) Close() error {
	if ns == nil || ns.fd < 0 {
		return nil
	}
	err := unix.Close(ns.fd)
	ns.fd = -1
	if err != nil {
		return fmt.Errorf("sandbox: close %s: %w", ns, err)
	}
	return nil
}

// Delete removes the name NetnsDir/name (unmount and unlink), as `ip netns
// delete` does. The kernel frees the namespace, and with it its interfaces
// (the sandbox end of a veth takes the gateway end along), once no handle,
// process or socket refers to it any more. A leftover plain file from a
// create that crashed before its bind mount is removed too.
func Delete(name string) error {
	if err := validName(name); err != nil {
		return fmt.Errorf("sandbox: delete namespace: %w", err)
	}
	path := filepath.Join(NetnsDir, name)
	// EINVAL: not a mount point; ENOENT is reported by Remove below.
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("sandbox: delete namespace %q: unmount: %w", name, err)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("sandbox: delete namespace %q: %w", name, err)
	}
	return nil
}

// CleanupPrefix deletes every namespace NetnsDir/<prefix>*, leftovers of a
// run that crashed before its cleanup, and returns the names it deleted.
// It deletes live namespaces too: a prefix shared by processes that can run
// at the same time must go through [PIDName] and [CleanupStale] instead.
func CleanupPrefix(prefix string) ([]string, error) {
	return cleanup(prefix, func(string) bool { return true })
}

// CleanupStale deletes the namespaces NetnsDir/<prefix><pid>-* named by
// [PIDName] whose process no longer runs, and returns their names. Names
// under prefix without a PID are left alone. A reused PID only delays the
// cleanup to a later call.
func CleanupStale(prefix string) ([]string, error) {
	return cleanup(prefix, func(rest string) bool {
		p, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(p)
		if !ok || err != nil || pid <= 0 {
			return false
		}
		err = unix.Kill(pid, 0)
		return errors.Is(err, unix.ESRCH)
	})
}

func cleanup(prefix string, stale func(rest string) bool) ([]string, error) {
	if prefix == "" || strings.ContainsAny(prefix, "/\x00") {
		return nil, fmt.Errorf("sandbox: cleanup: invalid prefix %q", prefix)
	}
	ents, err := os.ReadDir(NetnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox: cleanup %q: %w", prefix, err)
	}
	var deleted []string
	var errs []error
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || !stale(rest) {
			continue
		}
		if err := Delete(e.Name()); err != nil {
			errs = append(errs, err)
			continue
		}
		deleted = append(deleted, e.Name())
	}
	return deleted, errors.Join(errs...)
}

// Do runs f on a locked OS thread inside ns and returns f's error. Only
// code on that thread is inside ns: goroutines f starts run in the
// process's namespace, and so do net.Resolver lookups and http.Transport
// dials (use [Dialer]). Sockets f creates stay in ns for their whole life
// and may be used anywhere afterwards. f must not call runtime.Goexit
// (t.FailNow); if it does, Do returns an error.
//
// The thread is moved back afterwards; if that fails it is left locked so
// the runtime discards it rather than reuse it in the wrong namespace.
func Do(ns *NS, f func() error) error {
	if ns == nil || ns.fd < 0 {
		return fmt.Errorf("sandbox: do: %w", ErrClosed)
	}
	return onLockedThread(func() error {
		if err := unix.Setns(ns.fd, unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("sandbox: enter %s: %w", ns, err)
		}
		return f()
	})
}

// onLockedThread runs f on a fresh goroutine locked to its thread and puts
// the thread back into the namespace it started in. A goroutine that exits
// while locked takes its thread with it, so every path that cannot prove
// the thread is home again simply keeps the lock.
func onLockedThread(f func() error) error {
	done := make(chan error, 1)
	go func() {
		err := errors.New("sandbox: function did not return (runtime.Goexit)")
		defer func() { done <- err }()
		runtime.LockOSThread()
		home, oerr := unix.Open(threadNSPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if oerr != nil {
			runtime.UnlockOSThread()
			err = fmt.Errorf("sandbox: open thread namespace: %w", oerr)
			return
		}
		defer unix.Close(home)
		ferr := f()
		err = ferr
		if serr := unix.Setns(home, unix.CLONE_NEWNET); serr != nil {
			err = errors.Join(ferr, fmt.Errorf("sandbox: restore thread namespace: %w", serr))
			return
		}
		runtime.UnlockOSThread()
	}()
	return <-done
}
