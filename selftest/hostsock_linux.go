//go:build linux

package selftest

import (
	"fmt"
	"net"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// peerInThisNetNS reports whether the process at the other end of the
// unix connection c is in this process's network namespace: SO_PEERCRED
// names it; pid 0 is a process this PID namespace cannot see (the host's,
// from a container).
func peerInThisNetNS(c net.Conn) (bool, string, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return false, "", fmt.Errorf("not a unix connection")
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return false, "", err
	}
	var cred *unix.Ucred
	var serr error
	if err := rc.Control(func(fd uintptr) { cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return false, "", err
	}
	if serr != nil {
		return false, "", fmt.Errorf("SO_PEERCRED: %w", serr)
	}
	if cred.Pid == 0 {
		return false, "its process is outside this PID namespace", nil
	}
	theirs, err := os.Readlink("/proc/" + strconv.Itoa(int(cred.Pid)) + "/ns/net")
	if err != nil {
		return false, "", err
	}
	ours, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		return false, "", err
	}
	if theirs == ours {
		return true, "pid " + strconv.Itoa(int(cred.Pid)) + ", same network namespace", nil
	}
	return false, "pid " + strconv.Itoa(int(cred.Pid)) + " in network namespace " + theirs, nil
}

// openVsock opens and closes an AF_VSOCK socket.
func openVsock() error {
	fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}
