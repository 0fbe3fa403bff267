package sandbox

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// NetnsDir is where named network namespaces are bind-mounted, as iproute2's
// `ip netns` does.
const NetnsDir = "/run/netns"

// ErrWrongNamespace is wrapped by the guard's error when a socket is not in
// the namespace it must be in.
var ErrWrongNamespace = errors.New("socket in wrong network namespace")

// ErrClosed is returned when a closed or nil *NS is used.
var ErrClosed = errors.New("namespace handle closed")

// NS is an open handle to a network namespace. The handle keeps the namespace
// alive while it is open, even after [Delete] removed its name. Methods are
// safe for concurrent use except Close, which must not race with other uses.
type NS struct {
	name   string // "" for a namespace without a name under NetnsDir
	path   string
	fd     int
	cookie uint64
}

// Name is the namespace's name under NetnsDir, or "" for one opened by path
// that is not there (see [Current], [OpenPath]).
func (ns *NS) Name() string { return ns.name }

// Path is a filesystem path of the namespace that another process can open
// (setns, nsenter --net=PATH): NetnsDir/NAME for a named namespace, the path
// given to [OpenPath], or /proc/PID/fd/FD for [Current], valid while ns is
// open.
func (ns *NS) Path() string { return ns.path }

// Fd is the open namespace file descriptor (for netlink.NewHandleAt,
// nftables.WithNetNSFd), or -1 after Close. It stays owned by ns.
func (ns *NS) Fd() int { return ns.fd }

// Cookie is the namespace's SO_NETNS_COOKIE: the value every socket created
// in it reports, and what [GuardControl] compares. Never 0.
func (ns *NS) Cookie() uint64 { return ns.cookie }

// String names the namespace for logs and errors.
func (ns *NS) String() string {
	if ns == nil {
		return "<nil netns>"
	}
	n := ns.name
	if n == "" {
		n = ns.path
	}
	return fmt.Sprintf("netns %s (cookie %d)", n, ns.cookie)
}

// validName rejects names that would escape NetnsDir or match too much.
func validName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("invalid namespace name %q", name)
	}
	return nil
}

// PIDName returns prefix + "<pid>-" + suffix, a namespace name that tells
// [CleanupStale] which process owns it.
func PIDName(prefix, suffix string) string {
	return prefix + strconv.Itoa(os.Getpid()) + "-" + suffix
}
