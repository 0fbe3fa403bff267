package nft

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
)

// ListenAddr splits a listen key ("addr:port") into the address and the
// fixed port the walls need; an empty host is the IPv4 unspecified address.
func ListenAddr(hp string) (netip.Addr, uint16, error) {
	h, ps, err := net.SplitHostPort(hp)
	if err != nil {
		return netip.Addr{}, 0, err
	}
	port, err := strconv.ParseUint(ps, 10, 16)
	if err != nil || port == 0 {
		return netip.Addr{}, 0, fmt.Errorf("%q: the walls need a fixed port", hp)
	}
	if h == "" {
		return netip.IPv4Unspecified(), uint16(port), nil
	}
	a, err := netip.ParseAddr(h)
	if err != nil {
		return netip.Addr{}, 0, fmt.Errorf("%q: the walls need an address", hp)
	}
	return a.Unmap(), uint16(port), nil
}
