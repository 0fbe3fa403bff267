//go:build linux

package sandbox

import (
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The walls are nftables: they judge IP packets. Two ways out of a
// network namespace are not IP and not scoped by it: AF_VSOCK, which in a
// virtual machine reaches the hypervisor's host (CID 2) from any network
// namespace (kernels without net.vsock namespaces), and io_uring, whose
// IORING_OP_SOCKET creates sockets no socket(2) filter sees. DenyNonIP
// installs a seccomp filter, for the calling process and what it starts,
// that refuses socket(AF_VSOCK, ...) with EAFNOSUPPORT (as on a kernel
// without vsock) and io_uring_setup with ENOSYS (as on one without
// io_uring). Everything else is allowed: the filter only removes these.

// syscall numbers the filter needs, per audit architecture.
type abi struct {
	arch       uint32
	socket     uint32
	socketcall uint32 // 0: none (its arguments are behind a pointer: refused whole)
	ioUring    uint32
	x32        bool // the x32 ABI shares x86-64's audit arch with this bit on the number
}

var seccompABIs = map[string][]abi{
	"amd64": {
		{arch: unix.AUDIT_ARCH_X86_64, socket: 41, ioUring: 425, x32: true},
		{arch: unix.AUDIT_ARCH_I386, socket: 359, socketcall: 102, ioUring: 425},
	},
	"arm64": {
		{arch: unix.AUDIT_ARCH_AARCH64, socket: 198, ioUring: 425},
		{arch: unix.AUDIT_ARCH_ARM, socket: 281, ioUring: 425},
	},
}

const (
	x32Bit      = 0x40000000
	seccompNr   = 0  // offsetof(struct seccomp_data, nr)
	seccompArch = 4  // offsetof(struct seccomp_data, arch)
	seccompArg0 = 16 // offsetof(struct seccomp_data, args[0]), low half (little endian)
	afVsock     = 40
)

// seccompProgram assembles the filter for abis.
func seccompProgram(abis []abi) []unix.SockFilter {
	const (
		ld  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		ret = unix.BPF_RET | unix.BPF_K
	)
	allow := unix.SockFilter{Code: ret, K: unix.SECCOMP_RET_ALLOW}
	noFamily := unix.SockFilter{Code: ret, K: unix.SECCOMP_RET_ERRNO | uint32(unix.EAFNOSUPPORT)}
	noSys := unix.SockFilter{Code: ret, K: unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)}
	var prog []unix.SockFilter
	prog = append(prog, unix.SockFilter{Code: ld, K: seccompArch})
	for _, a := range abis {
		// one block per architecture: if arch != a.arch skip the block
		var block []unix.SockFilter
		block = append(block, unix.SockFilter{Code: ld, K: seccompNr})
		sockets := []uint32{a.socket}
		noSyscalls := []uint32{a.ioUring}
		if a.x32 {
			sockets = append(sockets, a.socket|x32Bit)
			noSyscalls = append(noSyscalls, a.ioUring|x32Bit)
		}
		if a.socketcall != 0 {
			noSyscalls = append(noSyscalls, a.socketcall)
		}
		// the tail of the block: [allow] [ld arg0] [jeq vsock ? noFamily : allow] [allow] [noFamily] [noSys]
		// built backwards would be clearer; here each jump counts what follows it
		for i, n := range noSyscalls {
			rest := len(noSyscalls) - 1 - i + len(sockets) // jumps left after this one
			block = append(block, unix.SockFilter{Code: jeq, K: n, Jt: uint8(rest + 1 + 4), Jf: 0})
		}
		for i, n := range sockets {
			rest := len(sockets) - 1 - i
			block = append(block, unix.SockFilter{Code: jeq, K: n, Jt: uint8(rest + 1), Jf: 0})
		}
		block = append(block,
			allow, // neither: allow
			unix.SockFilter{Code: ld, K: seccompArg0},     // socket(domain, ...)
			unix.SockFilter{Code: jeq, K: afVsock, Jt: 1}, // AF_VSOCK?
			allow,
			noFamily,
			noSys,
		)
		prog = append(prog, unix.SockFilter{Code: jeq, K: a.arch, Jt: 0, Jf: uint8(len(block))})
		prog = append(prog, block...)
	}
	return append(prog, allow) // an architecture not listed: nothing to refuse
}

// sealNonIP is DenyNonIP for a sandboxed command: where this architecture
// has no filter it warns on stderr and goes on (AF_VSOCK matters only
// inside a virtual machine); a filter that fails to install is an error.
func sealNonIP() error {
	if _, ok := seccompABIs[runtime.GOARCH]; !ok {
		fmt.Fprintf(os.Stderr, "egressd: WARNING: no seccomp filter for %s: AF_VSOCK and io_uring stay open to the command\n", runtime.GOARCH)
		return nil
	}
	return DenyNonIP()
}

// DenyNonIP installs the filter on every thread of this process (the
// process must have no_new_privs set). On an architecture it has no
// numbers for it installs nothing and says so.
func DenyNonIP() error {
	abis, ok := seccompABIs[runtime.GOARCH]
	if !ok {
		return fmt.Errorf("no seccomp filter for %s: AF_VSOCK and io_uring stay open", runtime.GOARCH)
	}
	prog := seccompProgram(abis)
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog))); e != 0 {
		return fmt.Errorf("install the seccomp filter: %w", e)
	}
	runtime.KeepAlive(prog)
	return nil
}
