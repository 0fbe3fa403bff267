//go:build linux

package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestDenyNonIP: under the filter, socket(AF_VSOCK) fails with
// EAFNOSUPPORT (it reached the hypervisor's host from any network
// namespace of a VM: around every wall) and io_uring_setup with ENOSYS (its
// IORING_OP_SOCKET makes sockets socket(2) filters never see), while IP
// and unix sockets still open. The filter runs in a child process: it
// cannot be removed once installed.
func TestDenyNonIP(t *testing.T) {
	t.Parallel()
	if os.Getenv("EGRESSD_SECCOMP_CHILD") == "1" {
		seccompChild()
		return
	}
	if _, ok := seccompABIs[runtime.GOARCH]; !ok {
		t.Skipf("no seccomp filter for %s", runtime.GOARCH)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestDenyNonIP$", "-test.count=1")
	cmd.Env = append(os.Environ(), "EGRESSD_SECCOMP_CHILD=1")
	out, _ := cmd.CombinedOutput()
	got := string(out)
	for _, want := range []string{"filter=ok", "vsock=" + unix.EAFNOSUPPORT.Error(), "io_uring=" + unix.ENOSYS.Error(), "inet=ok", "unix=ok"} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("child under the filter: want %q in\n%s", want, got)
		}
	}
}

func seccompChild() {
	say := func(k string, err error) {
		v := "ok"
		if err != nil {
			v = err.Error()
		}
		fmt.Printf("%s=%s\n", k, v)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		say("filter", err)
		os.Exit(0)
	}
	say("filter", DenyNonIP())
	try := func(domain, typ int) error {
		fd, err := unix.Socket(domain, typ, 0)
		if err == nil {
			unix.Close(fd)
		}
		return err
	}
	say("vsock", try(unix.AF_VSOCK, unix.SOCK_STREAM))
	var params [120]byte // struct io_uring_params
	_, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafePointer(&params)), 0)
	if e == 0 {
		say("io_uring", nil)
	} else {
		say("io_uring", e)
	}
	say("inet", try(unix.AF_INET, unix.SOCK_STREAM))
	say("unix", try(unix.AF_UNIX, unix.SOCK_STREAM))
	os.Exit(0)
}

func unsafePointer(p *[120]byte) unsafe.Pointer { return unsafe.Pointer(p) }
