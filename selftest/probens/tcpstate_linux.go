package probens

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// socketClosed reports whether c's TCP socket is in CLOSE: reset, or
// closed by both sides. Not a TCP socket, or unreadable: false.
func socketClosed(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	closed := false
	rc.Control(func(fd uintptr) {
		if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			closed = info.State == unix.BPF_TCP_CLOSE // TCP_CLOSE, 7: the kernel's tcp_states.h
		}
	})
	return closed
}
