//go:build linux

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
)

// DialContext connects to address ("host:port") from inside d.NS. network
// is one of tcp, tcp4, tcp6, udp, udp4, udp6. A name host is resolved
// with d.Resolver (see ErrNeedResolver); the addresses are dialed in turn,
// each on a thread inside d.NS, never in parallel goroutines.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	if d.NS == nil || d.NS.fd < 0 {
		return nil, fmt.Errorf("sandbox: dial %s %s: %w", network, address, ErrClosed)
	}
	lookupNet, err := ipNetwork(network)
	if err != nil {
		return nil, fmt.Errorf("sandbox: dial %s %s: %w", network, address, err)
	}
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("sandbox: dial %s %s: %w", network, address, err)
	}
	addrs, err := d.resolve(ctx, lookupNet, host)
	if err != nil {
		return nil, fmt.Errorf("sandbox: dial %s %s: %w", network, address, err)
	}
	nd := net.Dialer{Timeout: d.Timeout, Control: d.control()}
	var errs []error
	for _, a := range addrs {
		var c net.Conn
		err := Do(d.NS, func() error {
			var err error
			c, err = nd.DialContext(ctx, network, net.JoinHostPort(a.String(), port))
			return err
		})
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("sandbox: dial in %s: %w", d.NS, errors.Join(errs...))
}

// NewResolver returns a pure-Go resolver that sends every query to server,
// from inside d.NS, through d's guard. It ignores the nameservers of the
// host's /etc/resolv.conf (though Go still reads its options, search list
// and /etc/hosts).
func (d *Dialer) NewResolver(server netip.AddrPort) *net.Resolver {
	inner := &Dialer{NS: d.NS, Timeout: d.Timeout, Control: d.Control}
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return inner.DialContext(ctx, network, server.String())
		},
	}
}

func (d *Dialer) control() ControlFunc {
	guard := GuardControl(d.NS.cookie)
	if d.Control == nil {
		return guard
	}
	return func(network, address string, c syscall.RawConn) error {
		if err := guard(network, address, c); err != nil {
			return err
		}
		return d.Control(network, address, c)
	}
}

func (d *Dialer) resolve(ctx context.Context, lookupNet, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	if host == "" {
		return nil, errors.New("missing host")
	}
	if d.Resolver == nil {
		return nil, ErrNeedResolver
	}
	addrs, err := d.Resolver.LookupNetIP(ctx, lookupNet, host)
	if err != nil {
		return nil, err
	}
	for i := range addrs {
		addrs[i] = addrs[i].Unmap()
	}
	return addrs, nil
}

// ipNetwork maps a dial network to the resolver's network and refuses the
// ones the guard was not built for.
func ipNetwork(network string) (string, error) {
	switch network {
	case "tcp", "udp":
		return "ip", nil
	case "tcp4", "udp4":
		return "ip4", nil
	case "tcp6", "udp6":
		return "ip6", nil
	}
	return "", fmt.Errorf("unsupported network %q", network)
}

// DialContext connects to address from inside ns; see [Dialer.DialContext].
// address must hold an IP literal.
func DialContext(ctx context.Context, ns *NS, network, address string) (net.Conn, error) {
	return (&Dialer{NS: ns}).DialContext(ctx, network, address)
}

// Listen opens a stream listener inside ns (tcp, tcp4, tcp6), checked by
// the namespace guard. The host part of address must be an IP literal or
// empty (all addresses of ns).
func Listen(ns *NS, network, address string) (net.Listener, error) {
	var l net.Listener
	err := listen(ns, network, address, func(lc *net.ListenConfig) error {
		var err error
		l, err = lc.Listen(context.Background(), network, address)
		return err
	})
	return l, err
}

// ListenPacket opens a packet socket inside ns (udp, udp4, udp6), checked
// by the namespace guard. The host part of address must be an IP literal
// or empty.
func ListenPacket(ns *NS, network, address string) (net.PacketConn, error) {
	var pc net.PacketConn
	err := listen(ns, network, address, func(lc *net.ListenConfig) error {
		var err error
		pc, err = lc.ListenPacket(context.Background(), network, address)
		return err
	})
	return pc, err
}

func listen(ns *NS, network, address string, f func(*net.ListenConfig) error) error {
	if ns == nil || ns.fd < 0 {
		return fmt.Errorf("sandbox: listen %s %s: %w", network, address, ErrClosed)
	}
	if _, err := ipNetwork(network); err != nil {
		return fmt.Errorf("sandbox: listen %s %s: %w", network, address, err)
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("sandbox: listen %s %s: %w", network, address, err)
	}
	if _, perr := netip.ParseAddr(host); host != "" && perr != nil {
		// A name would be resolved on the host's resolver.
		return fmt.Errorf("sandbox: listen %s %s: host must be an IP literal", network, address)
	}
	lc := &net.ListenConfig{Control: GuardControl(ns.cookie)}
	if err := Do(ns, func() error { return f(lc) }); err != nil {
		return fmt.Errorf("sandbox: listen in %s: %w", ns, err)
	}
	return nil
}
