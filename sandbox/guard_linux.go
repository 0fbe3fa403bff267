//go:build linux

package sandbox

import (
	"fmt"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// SocketCookie reads the SO_NETNS_COOKIE of a socket: the cookie of the
// network namespace it was created in (Linux 5.14+).
func SocketCookie(c syscall.RawConn) (uint64, error) {
	var cookie uint64
	var gerr error
	if err := c.Control(func(fd uintptr) {
		cookie, gerr = unix.GetsockoptUint64(int(fd), unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
	}); err != nil {
		return 0, fmt.Errorf("read SO_NETNS_COOKIE: %w", err)
	}
	if gerr != nil {
		return 0, fmt.Errorf("read SO_NETNS_COOKIE: %w", gerr)
	}
	return cookie, nil
}

// GuardControl returns a Control func for net.Dialer and net.ListenConfig
// that refuses, with an error wrapping [ErrWrongNamespace], every socket
// whose namespace cookie is not want. It runs after socket(2) and before
// connect(2)/bind(2), so a refused socket has sent nothing. A cookie that
// cannot be read also refuses the socket; want 0 refuses every socket.
func GuardControl(want uint64) ControlFunc {
	return func(network, address string, c syscall.RawConn) error {
		got, err := SocketCookie(c)
		if err != nil {
			return fmt.Errorf("sandbox: guard %s %s: %w", network, address, err)
		}
		if got != want {
			return fmt.Errorf("sandbox: guard %s %s: socket netns cookie %d, want %d: %w", network, address, got, want, ErrWrongNamespace)
		}
		return nil
	}
}

// procNetInitIno is the fixed inode number of the init network namespace
// (PROC_NET_INIT_INO, include/linux/proc_ns.h; recent kernels).
const procNetInitIno = 0xEFFFFFF9

// rootCookie is read once: the init namespace cannot change.
var rootCookie = sync.OnceValues(func() (uint64, error) {
	// A process in the init namespace knows it by the inode number, with no
	// need for /proc/1, which a supervisor may hide even from root.
	// A fresh locked thread is in the process's namespace even when the
	// caller is inside Do.
	var home uint64
	err := onLockedThread(func() error {
		var st unix.Stat_t
		if err := unix.Stat(threadNSPath, &st); err != nil || st.Ino != procNetInitIno {
			return nil
		}
		var err error
		home, err = threadCookie()
		return err
	})
	if err != nil {
		return 0, err
	}
	if home != 0 {
		return home, nil
	}
	ns, err := OpenPath("/proc/1/ns/net")
	if err != nil {
		return 0, err
	}
	defer ns.Close()
	return ns.cookie, nil
})

// RootCookie is the cookie of the machine's own ("root") network
// namespace, which test code must never touch: the init network namespace
// when this process runs in it (recognised by its fixed inode number), else
// the namespace of PID 1 in this PID namespace, which needs the privilege
// to enter it.
func RootCookie() (uint64, error) {
	c, err := rootCookie()
	if err != nil {
		return 0, fmt.Errorf("sandbox: root namespace cookie: %w", err)
	}
	return c, nil
}

// NotRootControl returns a Control func that refuses, with an error
// wrapping [ErrWrongNamespace], every socket created in the root namespace
// (see [RootCookie]). For tests: a socket that escaped the test namespaces
// is stopped before it sends a packet.
func NotRootControl() (ControlFunc, error) {
	root, err := RootCookie()
	if err != nil {
		return nil, err
	}
	return func(network, address string, c syscall.RawConn) error {
		got, err := SocketCookie(c)
		if err != nil {
			return fmt.Errorf("sandbox: guard %s %s: %w", network, address, err)
		}
		if got == root {
			return fmt.Errorf("sandbox: guard %s %s: socket is in the root network namespace (cookie %d): %w", network, address, got, ErrWrongNamespace)
		}
		return nil
	}, nil
}
