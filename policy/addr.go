package policy

import (
	"net/netip"
)

// Class is the special-use class of an address. Public is the zero value;
// every other class is denied at dial time unless a rule's cidrs unlock it
// (HighRisk never).
type Class uint8

const (
	ClassPublic Class = iota
	ClassUnspecified
	ClassLoopback
	ClassPrivate
	ClassLinkLocal
	ClassCGNAT
	ClassULA
	ClassMulticast
	ClassBroadcast
	ClassDocumentation
	ClassBenchmark
	ClassReserved
	ClassHighRisk
	numClasses
)

var classNames = [numClasses]string{"public", "unspecified", "loopback", "private", "link-local", "cgnat", "ula", "multicast", "broadcast", "documentation", "benchmark", "reserved", "high-risk"}

func (c Class) String() string {
	if c < numClasses {
		return classNames[c]
	}
	return "unknown"
}

// AddrInfo is the classification of one address: its class, the special-use
// block that gave it (invalid for public), and for an IPv6 address carrying
// an IPv4 address (NAT64, 6to4, Teredo, compatible) that embedded address.
type AddrInfo struct {
	Class    Class
	Block    netip.Prefix
	Embedded netip.Addr
}

type classBlock struct {
	p netip.Prefix
	c Class
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// v4Blocks and v6Blocks are searched most specific first (sorted by the
// prefix length, longest first, at init), so 192.0.0.192/32 (high-risk)
// wins over 192.0.0.0/24 (reserved). Sources: IANA IPv4/IPv6 Special-Purpose
// Address Registries (RFC 6890 and updates).
var v4Blocks = []classBlock{
	{pfx("0.0.0.0/8"), ClassUnspecified}, // "this network": 0.0.0.0 reaches the local host on Linux
	{pfx("10.0.0.0/8"), ClassPrivate},
	{pfx("100.64.0.0/10"), ClassCGNAT},
	{pfx("127.0.0.0/8"), ClassLoopback},
	{pfx("169.254.0.0/16"), ClassLinkLocal},
	{pfx("172.16.0.0/12"), ClassPrivate},
	{pfx("192.0.0.0/24"), ClassReserved}, // IETF protocol assignments
	{pfx("192.0.2.0/24"), ClassDocumentation},
	{pfx("192.31.196.0/24"), ClassReserved}, // AS112
	{pfx("192.52.193.0/24"), ClassReserved}, // AMT
	{pfx("192.88.99.0/24"), ClassReserved},  // deprecated 6to4 relay anycast
	{pfx("192.168.0.0/16"), ClassPrivate},
	{pfx("192.175.48.0/24"), ClassReserved}, // AS112 direct delegation
	{pfx("198.18.0.0/15"), ClassBenchmark},
	{pfx("198.51.100.0/24"), ClassDocumentation},
	{pfx("203.0.113.0/24"), ClassDocumentation},
	{pfx("224.0.0.0/4"), ClassMulticast},
	{pfx("240.0.0.0/4"), ClassReserved},
	{pfx("255.255.255.255/32"), ClassBroadcast},
}

var v6Blocks = []classBlock{
	{pfx("::/128"), ClassUnspecified},
	{pfx("::1/128"), ClassLoopback},
	{pfx("::/8"), ClassReserved},         // compatible (::a.b.c.d) handled as embedded first
	{pfx("100::/64"), ClassReserved},     // discard-only
	{pfx("2001::/23"), ClassReserved},    // IETF protocol assignments (Teredo handled as embedded first)
	{pfx("2001:2::/48"), ClassBenchmark}, // inside 2001::/23, more specific
	{pfx("2001:db8::/32"), ClassDocumentation},
	{pfx("3fff::/20"), ClassDocumentation},
	{pfx("5f00::/16"), ClassReserved}, // SRv6 SIDs
	{pfx("fc00::/7"), ClassULA},
	{pfx("fe80::/10"), ClassLinkLocal},
	{pfx("fec0::/10"), ClassReserved}, // deprecated site-local
	{pfx("ff00::/8"), ClassMulticast},
	// Outside 2000::/3 nothing is assigned for global unicast (IANA IPv6
	// Address Space): reserved, so a fuzzed 101::a9fe:a9fe is not "public".
	{pfx("100::/8"), ClassReserved},
	{pfx("200::/7"), ClassReserved},
	{pfx("400::/6"), ClassReserved},
	{pfx("800::/5"), ClassReserved},
	{pfx("1000::/4"), ClassReserved},
	{pfx("4000::/2"), ClassReserved},
	{pfx("8000::/1"), ClassReserved},
}

func init() {
	sortBlocks(v4Blocks)
	sortBlocks(v6Blocks)
	for _, h := range builtinHighRiskCIDRs {
		hr := classBlock{h, ClassHighRisk}
		if h.Addr().Is4() {
			v4Blocks = append([]classBlock{hr}, v4Blocks...)
		} else {
			v6Blocks = append([]classBlock{hr}, v6Blocks...)
		}
	}
}

func sortBlocks(b []classBlock) {
	// insertion sort: tiny tables, run once
	for i := 1; i < len(b); i++ {
		for j := i; j > 0 && b[j].p.Bits() > b[j-1].p.Bits(); j-- {
			b[j], b[j-1] = b[j-1], b[j]
		}
	}
}

var (
	nat64WKP   = pfx("64:ff9b::/96")
	nat64Local = pfx("64:ff9b:1::/48")
	sixToFour  = pfx("2002::/16")
	teredo     = pfx("2001::/32")
	compatV4   = pfx("::/96")
)

// ClassifyAddr classifies a (possibly IPv4-mapped) address against the
// built-in special-use and high-risk blocks. An IPv6 address that embeds an
// IPv4 address is classified as the worse of the two.
func ClassifyAddr(a netip.Addr) AddrInfo {
	a = a.Unmap()
	if a.Is4() {
		return classify4(a)
	}
	own := classifyIn(a, v6Blocks)
	emb, ok := embeddedV4(a)
	if !ok {
		return own
	}
	ei := classify4(emb)
	ei.Embedded = emb
	if ei.Class == ClassPublic {
		// A public IPv4 behind NAT64/6to4/Teredo is reachable like any
		// public address; keep the IPv6 block's class only if it is worse.
		if nat64WKP.Contains(a) || nat64Local.Contains(a) || sixToFour.Contains(a) || teredo.Contains(a) {
			own = AddrInfo{} // NAT64 and Teredo sit inside reserved blocks; their payload decides
		}
		own.Embedded = emb
		return own
	}
	return ei
}

func classify4(a netip.Addr) AddrInfo { return classifyIn(a, v4Blocks) }

func classifyIn(a netip.Addr, blocks []classBlock) AddrInfo {
	for _, b := range blocks {
		if b.p.Contains(a) {
			return AddrInfo{Class: b.c, Block: b.p}
		}
	}
	return AddrInfo{}
}

// embeddedV4 extracts an IPv4 address carried inside an IPv6 address by a
// translation or tunnelling scheme, since a packet to it may end up there.
func embeddedV4(a netip.Addr) (netip.Addr, bool) {
	b := a.As16()
	switch {
	case nat64WKP.Contains(a), nat64Local.Contains(a), compatV4.Contains(a) && a != netip.IPv6Unspecified() && a != netip.IPv6Loopback():
		return netip.AddrFrom4([4]byte(b[12:16])), true
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte(b[2:6])), true
	case teredo.Contains(a):
		// RFC 4380: the client's public IPv4 is the last 32 bits inverted.
		return netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}), true
	case b[8]&^0x02 == 0 && b[9] == 0 && b[10] == 0x5e && b[11] == 0xfe:
		// ISATAP (RFC 5214): an interface id of [02]00:5efe:a.b.c.d under
		// any /64 tunnels to a.b.c.d.
		return netip.AddrFrom4([4]byte(b[12:16])), true
	}
	return netip.Addr{}, false
}
