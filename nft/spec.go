package nft

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// DefaultTable is the table name used when Spec.Table is empty.
const DefaultTable = "egressd"

// CurrentNamespace, passed as the namespace argument, makes a function act in
// the network namespace of the calling OS thread (normally the process's own).
const CurrentNamespace = -1

// Limits that keep a spec reviewable and the rendered ruleset small.
const (
	maxIfPrefixLen = 15 // IFNAMSIZ - 1
	maxExtraPorts  = 64
	maxUIDs        = 1024
)

// Names of the table's named counters, which say which wall stopped or let
// through a sandbox packet.
const (
	CounterDropHighRisk  = "drop_highrisk"   // sandbox packet to a high-risk destination
	CounterDropInput     = "drop_input"      // sandbox packet to the gateway host, not proxy/DNS
	CounterDropSpoofed   = "drop_spoofed"    // sandbox packet whose source does not route back via its interface
	CounterDropForward   = "drop_fwd"        // sandbox packet the gateway would have routed on
	CounterDropOutputUID = "drop_output_uid" // local-user sandbox packet, not proxy/DNS
	CounterAcceptProxy   = "accept_proxy"    // sandbox packet to the proxy port
	CounterAcceptDNS     = "accept_dns"      // sandbox packet to the DNS port
	CounterAcceptExtra   = "accept_extra"    // sandbox packet to one of ExtraPorts
	CounterAcceptND      = "accept_nd"       // IPv6 neighbour discovery from a sandbox link
	CounterRedirect      = "redirect"        // sandbox connection redirected to a transparent listener
)

// SetRedirectDyn4 is the transparent-mode set of IPv4 addresses the DNS
// filter answered for allowed names (AddRedirect), each kept for its TTL.
const SetRedirectDyn4 = "redirect_dns4"

// MinRedirectTTL is the shortest time AddRedirect keeps an address: a
// client that connects just after a TTL-0 answer still gets through.
const MinRedirectTTL = 30 * time.Second

// ErrNoTable is returned (wrapped) by Down, Show and Counters when the table
// does not exist in the namespace.
var ErrNoTable = errors.New("table does not exist")

// Spec describes the wall. The zero value is invalid: it names no sandbox and
// no gateway. Validate reports every problem at once.
type Spec struct {
	// Table is the name of the inet table egressd owns; empty means
	// DefaultTable.
	Table string

	// IfPrefixes are name prefixes of sandbox-facing interfaces (veth ends,
	// container bridge ports), matched as nft wildcards ("egsbx" matches
	// "egsbx*"). Packets arriving on such an interface are sandbox traffic.
	// A prefix may not match "lo".
	IfPrefixes []string

	// SourceCIDRs are sandbox source addresses, IPv4 and IPv6. Packets from
	// these addresses (except on lo) are sandbox traffic. Prefer IfPrefixes
	// where possible: a source address can be spoofed, an input interface
	// cannot.
	SourceCIDRs []netip.Prefix

	// UIDs are local users whose sockets are sandboxes; their packets are
	// filtered in the output hook by socket owner. Zero (root) is refused.
	UIDs []uint32

	// Gateways are the addresses on which the proxy and the DNS server
	// listen, IPv4 and/or IPv6. At least one is required.
	Gateways []netip.Addr

	// ProxyPort is the proxy's TCP port on the gateway addresses. Required.
	ProxyPort uint16

	// DNSPort is the DNS server's port (UDP and TCP) on the gateway
	// addresses; zero means the sandbox gets no DNS access.
	DNSPort uint16

	// ExtraPorts are further TCP ports on the gateway addresses (for example
	// a transparent listener); empty means none.
	ExtraPorts []uint16

	// Redirects send a sandbox's TCP connections for a port (to any
	// address) to a port on the gateway instead: transparent mode, for
	// clients that ignore proxy settings. The kernel rewrites the
	// destination to the address of the interface the packet came in on;
	// the target ports are accepted like ExtraPorts. Needs IfPrefixes or
	// SourceCIDRs (local-user sandboxes are not redirected).
	Redirects []Redirect

	// RedirectCIDRs limit the redirects to destinations the policy could
	// allow: the rules' cidrs here, and the addresses the DNS filter
	// answered for allowed names, each for its TTL (AddRedirect puts them
	// in the table's dynamic set). Any other destination is not redirected
	// and meets the forward chain's refusal, as in a sealed box; so do
	// high-risk destinations, even inside these. IPv4 only: IPv6 is never
	// redirected (egressd has no IPv6 transparent listener), so a
	// sandbox's IPv6 TCP is refused like any other.
	RedirectCIDRs []netip.Prefix

	// HighRisk destinations are dropped for sandbox traffic by a rule of
	// their own that runs before any accept, even for gateway addresses.
	HighRisk []netip.Prefix
}

// Redirect is one transparent-mode port mapping: sandbox TCP to any
// address on From goes to the gateway's To.
type Redirect struct {
	From, To uint16
}

// TableName returns the table name the spec installs.
func (s Spec) TableName() string {
	if s.Table == "" {
		return DefaultTable
	}
	return s.Table
}

// Validate returns every problem with the spec, joined, or nil.
func (s Spec) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf(format, args...))
	}

	if err := validName(s.TableName()); err != nil {
		bad("table: %w", err)
	}
	if len(s.IfPrefixes) == 0 && len(s.SourceCIDRs) == 0 && len(s.UIDs) == 0 {
		bad("no sandbox selector: set at least one of IfPrefixes, SourceCIDRs, UIDs")
	}
	s.validateIfPrefixes(bad)
	validatePrefixes(bad, "SourceCIDRs", s.SourceCIDRs)
	validatePrefixes(bad, "HighRisk", s.HighRisk)
	validatePrefixes(bad, "RedirectCIDRs", s.RedirectCIDRs)
	s.validateUIDs(bad)
	s.validateGateways(bad)
	s.validatePorts(bad)
	return errors.Join(errs...)
}

// complaint collects one problem found by Validate.
type complaint func(format string, args ...any)

func (s Spec) validateIfPrefixes(bad complaint) {
	seenIf := map[string]bool{}
	for i, p := range s.IfPrefixes {
		switch {
		case p == "":
			bad("IfPrefixes[%d]: empty prefix would match every interface", i)
		case len(p) > maxIfPrefixLen:
			bad("IfPrefixes[%d]: %q is longer than %d bytes", i, p, maxIfPrefixLen)
		case strings.ContainsAny(p, "*/ \t\n\x00"):
			bad("IfPrefixes[%d]: %q: give the prefix without wildcard, slash or space (\"egsbx\", not \"egsbx*\")", i, p)
		case strings.HasPrefix("lo", p):
			bad("IfPrefixes[%d]: %q matches the loopback interface", i, p)
		case seenIf[p]:
			bad("IfPrefixes[%d]: %q listed twice", i, p)
		}
		seenIf[p] = true
	}
}

func validatePrefixes(bad complaint, field string, ps []netip.Prefix) {
	for i, p := range ps {
		switch {
		case !p.IsValid():
			bad("%s[%d]: invalid prefix", field, i)
		case p.Addr().Zone() != "":
			bad("%s[%d]: %s: zones are not allowed", field, i, p)
		case p.Addr().Is4In6():
			bad("%s[%d]: %s: IPv4-mapped IPv6 never appears on the wire; use the IPv4 form", field, i, p)
		case p != p.Masked():
			bad("%s[%d]: %s has host bits set; use %s", field, i, p, p.Masked())
		}
	}
}

func (s Spec) validateUIDs(bad complaint) {
	if len(s.UIDs) > maxUIDs {
		bad("UIDs: %d entries, at most %d", len(s.UIDs), maxUIDs)
	}
	seenUID := map[uint32]bool{}
	for i, u := range s.UIDs {
		switch {
		case u == 0:
			bad("UIDs[%d]: uid 0 (root) cannot be a sandbox: it would cut off egressd itself", i)
		case u == ^uint32(0):
			bad("UIDs[%d]: %d is not a valid uid", i, u)
		case seenUID[u]:
			bad("UIDs[%d]: %d listed twice", i, u)
		}
		seenUID[u] = true
	}
}

func (s Spec) validateGateways(bad complaint) {
	if len(s.Gateways) == 0 {
		bad("Gateways: at least one gateway address is required")
	}
	for i, a := range s.Gateways {
		switch {
		case !a.IsValid():
			bad("Gateways[%d]: invalid address", i)
		case a.Zone() != "":
			bad("Gateways[%d]: %s: zones are not allowed", i, a)
		case a.Is4In6():
			bad("Gateways[%d]: %s: use the IPv4 form", i, a)
		case a.IsUnspecified() || a.IsMulticast():
			bad("Gateways[%d]: %s is not a unicast address", i, a)
		default:
			for _, hr := range s.HighRisk {
				if hr.IsValid() && hr.Contains(a) {
					bad("Gateways[%d]: %s lies in HighRisk %s, so the sandbox could never reach it", i, a, hr)
				}
			}
		}
	}
}

func (s Spec) validatePorts(bad complaint) {
	if s.ProxyPort == 0 {
		bad("ProxyPort: required")
	}
	if len(s.ExtraPorts) > maxExtraPorts {
		bad("ExtraPorts: %d entries, at most %d", len(s.ExtraPorts), maxExtraPorts)
	}
	seenPort := map[uint16]string{}
	if s.ProxyPort != 0 {
		seenPort[s.ProxyPort] = "ProxyPort"
	}
	if s.DNSPort != 0 && s.DNSPort != s.ProxyPort {
		seenPort[s.DNSPort] = "DNSPort"
	} else if s.DNSPort != 0 {
		bad("DNSPort: %d is also ProxyPort", s.DNSPort)
	}
	if len(s.Redirects) > maxExtraPorts {
		bad("Redirects: %d entries, at most %d", len(s.Redirects), maxExtraPorts)
	}
	if len(s.Redirects) > 0 && len(s.IfPrefixes) == 0 && len(s.SourceCIDRs) == 0 {
		bad("Redirects need IfPrefixes or SourceCIDRs: only link sandboxes are redirected")
	}
	for i, r := range s.Redirects {
		if r.From == 0 || r.To == 0 {
			bad("Redirects[%d]: port 0", i)
		}
		if other, dup := seenPort[r.To]; dup {
			bad("Redirects[%d]: target %d is already %s", i, r.To, other)
		}
		seenPort[r.To] = fmt.Sprintf("Redirects[%d]", i)
	}
	for i, p := range s.ExtraPorts {
		if p == 0 {
			bad("ExtraPorts[%d]: port 0", i)
			continue
		}
		if other, ok := seenPort[p]; ok {
			bad("ExtraPorts[%d]: %d is already %s", i, p, other)
			continue
		}
		seenPort[p] = fmt.Sprintf("ExtraPorts[%d]", i)
	}
}

// validName accepts the names this package creates: short, and safe to paste
// into an nft command line.
func validName(n string) error {
	if n == "" || len(n) > 32 {
		return fmt.Errorf("%q: want 1 to 32 characters", n)
	}
	for i, r := range n {
		ok := r == '_' || r == '-' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (i > 0 && r >= '0' && r <= '9')
		if !ok {
			return fmt.Errorf("%q: want a letter first, then letters, digits, '_' or '-'", n)
		}
	}
	return nil
}

// addrRange is the inclusive range [first, last] of one address family.
type addrRange struct {
	first, last netip.Addr
}

func (r addrRange) String() string {
	if p, ok := r.prefix(); ok {
		if p.IsSingleIP() {
			return p.Addr().String()
		}
		return p.String()
	}
	return r.first.String() + "-" + r.last.String()
}

// prefix reports whether the range is exactly one CIDR prefix.
func (r addrRange) prefix() (netip.Prefix, bool) {
	for bits := 0; bits <= r.first.BitLen(); bits++ {
		p := netip.PrefixFrom(r.first, bits)
		if p.Masked().Addr() == r.first && lastAddr(p) == r.last {
			return p, true
		}
	}
	return netip.Prefix{}, false
}

// lastAddr returns the highest address in p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// mergeRanges turns prefixes of one family into sorted, disjoint,
// non-adjacent ranges. The kernel refuses overlapping intervals in a set, and
// merging adjacent ones gives one canonical form to compare read-backs with.
func mergeRanges(ps []netip.Prefix) []addrRange {
	rs := make([]addrRange, 0, len(ps))
	for _, p := range ps {
		rs = append(rs, addrRange{p.Masked().Addr(), lastAddr(p)})
	}
	slices.SortFunc(rs, func(a, b addrRange) int {
		return cmp.Or(a.first.Compare(b.first), a.last.Compare(b.last))
	})
	var out []addrRange
	for _, r := range rs {
		if n := len(out); n > 0 {
			cur := &out[n-1]
			next := cur.last.Next() // invalid when cur ends at the family's last address
			if !next.IsValid() || r.first.Compare(next) <= 0 {
				if r.last.Compare(cur.last) > 0 {
					cur.last = r.last
				}
				continue
			}
		}
		out = append(out, r)
	}
	return out
}

// splitFamilies returns the IPv4 and IPv6 prefixes of ps.
func splitFamilies(ps []netip.Prefix) (v4, v6 []netip.Prefix) {
	for _, p := range ps {
		if p.Addr().Is4() {
			v4 = append(v4, p)
		} else {
			v6 = append(v6, p)
		}
	}
	return v4, v6
}
