package sandbox

import (
	"errors"
	"net"
	"syscall"
	"time"
)

// ControlFunc is the type of net.Dialer.Control and net.ListenConfig.Control.
type ControlFunc = func(network, address string, c syscall.RawConn) error

// ErrNeedResolver is returned when a [Dialer] without a Resolver is asked
// to dial a name: resolving it with the process's resolver would query the
// host's DNS servers from the host's namespace.
var ErrNeedResolver = errors.New("dialing a name needs Dialer.Resolver")

// Dialer opens TCP and UDP connections from inside a network namespace. Its
// DialContext fits http.Transport.DialContext, and NewResolver gives a
// net.Resolver whose queries leave from the namespace too, so neither an
// HTTP client nor a lookup can escape to the caller's namespace. Every
// socket is checked by [GuardControl] for NS's cookie. The zero value is
// unusable: NS is required.
type Dialer struct {
	// NS is the namespace sockets are created in. Required.
	NS *NS
	// Timeout bounds each connect attempt, as net.Dialer.Timeout; zero
	// means only the context bounds it.
	Timeout time.Duration
	// Control, if set, runs after the namespace guard on every socket
	// (SO_MARK and the like). The guard cannot be turned off.
	Control ControlFunc
	// Resolver resolves host names, for instance one from NewResolver.
	// Nil: only IP literals are dialed and names fail with ErrNeedResolver.
	// Addresses are tried one after the other, in the order it returns them.
	Resolver *net.Resolver
}
