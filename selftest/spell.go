package selftest

import (
	"fmt"
	"net/netip"
	"strconv"
)

// spelling is one way to write an address as a URL host.
type spelling struct {
	name string // literal, decimal, hex, octal, short, ipv6-mapped
	host string
}

// metadataSpellings returns the spellings of a under which an HTTP client
// (or inet_aton, which many use) reaches a: IPv4 as a literal, one decimal
// number, one hex number, four octal parts, three parts with the last
// holding 16 bits, and IPv4-mapped IPv6; IPv6 as a literal.
func metadataSpellings(a netip.Addr) []spelling {
	if a.Is6() && !a.Is4In6() {
		return []spelling{{"literal", "[" + a.String() + "]"}}
	}
	a = a.Unmap()
	b := a.As4()
	n := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	return []spelling{
		{"literal", a.String()},
		{"decimal", strconv.FormatUint(uint64(n), 10)},
		{"hex", fmt.Sprintf("0x%X", n)},
		{"octal", fmt.Sprintf("0%o.0%o.0%o.0%o", b[0], b[1], b[2], b[3])},
		{"short", fmt.Sprintf("%d.%d.%d", b[0], b[1], uint16(b[2])<<8|uint16(b[3]))},
		{"ipv6-mapped", "[::ffff:" + a.String() + "]"},
	}
}
