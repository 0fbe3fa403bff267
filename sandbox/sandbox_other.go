//go:build !linux

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"syscall"
)

func unsupported(what string) error {
	return fmt.Errorf("sandbox: %s: %w", what, errors.ErrUnsupported)
}

// Create is Linux-only.
func Create(name string) (*NS, error) { return nil, unsupported("create namespace") }

// CreateUnnamed is Linux-only.
func CreateUnnamed() (*NS, error) { return nil, unsupported("create namespace") }

// Open is Linux-only.
func Open(name string) (*NS, error) { return nil, unsupported("open namespace") }

// OpenPath is Linux-only.
func OpenPath(path string) (*NS, error) { return nil, unsupported("open namespace") }

// Current is Linux-only.
func Current() (*NS, error) { return nil, unsupported("open current namespace") }

// Close does nothing: no NS can be opened here.
func (ns *NS) Close() error { return nil }

// Delete is Linux-only.
func Delete(name string) error { return unsupported("delete namespace") }

// CleanupPrefix is Linux-only.
func CleanupPrefix(prefix string) ([]string, error) { return nil, unsupported("cleanup") }

// CleanupStale is Linux-only.
func CleanupStale(prefix string) ([]string, error) { return nil, unsupported("cleanup") }

// Do is Linux-only.
func Do(ns *NS, f func() error) error { return unsupported("do") }

// SocketCookie is Linux-only.
func SocketCookie(c syscall.RawConn) (uint64, error) { return 0, unsupported("socket cookie") }

// GuardControl returns a guard that refuses every socket: there are no
// network namespaces here to check.
func GuardControl(want uint64) ControlFunc {
	return func(string, string, syscall.RawConn) error { return unsupported("guard") }
}

// RootCookie is Linux-only.
func RootCookie() (uint64, error) { return 0, unsupported("root namespace cookie") }

// NotRootControl is Linux-only.
func NotRootControl() (ControlFunc, error) { return nil, unsupported("guard") }

// DialContext is Linux-only.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return nil, unsupported("dial")
}

// NewResolver returns a resolver whose every query fails.
func (d *Dialer) NewResolver(server netip.AddrPort) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		return nil, unsupported("dial")
	}}
}

// DialContext is Linux-only.
func DialContext(ctx context.Context, ns *NS, network, address string) (net.Conn, error) {
	return nil, unsupported("dial")
}

// Listen is Linux-only.
func Listen(ns *NS, network, address string) (net.Listener, error) {
	return nil, unsupported("listen")
}

// ListenPacket is Linux-only.
func ListenPacket(ns *NS, network, address string) (net.PacketConn, error) {
	return nil, unsupported("listen")
}

// Wire is Linux-only.
func Wire(spec Veth) (*Link, error) { return nil, unsupported("wire") }

// Delete is Linux-only.
func (l *Link) Delete() error { return unsupported("delete link") }

// AddAddress is Linux-only.
func AddAddress(ns *NS, ifName string, p netip.Prefix) error { return unsupported("add address") }

// SetSysctl is Linux-only.
func SetSysctl(ns *NS, key, value string) error { return unsupported("sysctl") }

// NSExecCommand returns a command that fails: it is Linux-only.
func NSExecCommand(self, nsPath, resolvConf string, argv []string) *exec.Cmd {
	return exec.Command(self, NSExecArg)
}

// NSExecMain is Linux-only.
func NSExecMain(args []string) error { return unsupported("nsexec") }
