//go:build linux

package nft

import (
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Names of the chains, sets and named counters the table holds. They are part
// of the operator interface: `egressd nft show` and the self-test report name
// the counter that stopped a packet.
const (
	chainInput   = "input"
	chainForward = "forward"
	chainOutput  = "output"
	chainSbxIn   = "sbx_in"
	chainSbxFwd  = "sbx_fwd"
	chainSbxOut  = "sbx_out"
	chainNAT     = "prerouting"
	chainSbxNAT  = "sbx_nat"

	setSrc4  = "src4"
	setSrc6  = "src6"
	setHR4   = "highrisk4"
	setHR6   = "highrisk6"
	setUIDs  = "uids"
	setRdr4  = "redirect4"     // the rules' IPv4 cidrs: redirected
	setDyn4  = SetRedirectDyn4 // DNS answers for allowed names, each for its TTL: redirected
	setChunk = 1024            // elements per NEWSETELEM message, see ruleset.queue
)

// filterPriority runs the wall before the usual filter chains (priority 0),
// so its counters see sandbox packets before another table can drop them.
// Order does not decide safety: in nftables a drop in any base chain is final,
// while an accept only ends that one chain, so no other table can let through
// what this table drops.
const filterPriority = nftables.ChainPriority(-10)

// ruleset is a spec rendered into nftables objects, ready to be queued on a
// Conn. Apply sends it; Check and the golden tests describe it.
type ruleset struct {
	table    *nftables.Table
	counters []string
	sets     []setDef
	chains   []chainDef
}

type setDef struct {
	set   *nftables.Set
	elems []nftables.SetElement
}

type chainDef struct {
	chain *nftables.Chain
	rules [][]expr.Any
}

// build validates s and renders it. Objects appear only when the spec needs
// them: no UIDs, no output chain; no IPv6 gateway, no IPv6 accept rules.
func build(s Spec) (*ruleset, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	rs := &ruleset{table: &nftables.Table{Family: nftables.TableFamilyINet, Name: s.TableName()}}
	b := builder{rs: rs, used: map[string]bool{}}

	src4, src6 := splitFamilies(s.SourceCIDRs)
	hr4, hr6 := splitFamilies(s.HighRisk)
	// The gateways are matched inline, not through a set: a batch that
	// replaces the table makes its rules live before its sets' elements,
	// so an accept through a set refused a new flow in about one swap in
	// 50 (TestApplyWindow).
	var gws []netip.Addr
	for _, v6 := range []bool{false, true} {
		for _, a := range s.Gateways {
			if a = a.Unmap(); a.Is6() == v6 && !slices.Contains(gws, a) {
				gws = append(gws, a)
			}
		}
	}
	hasGw6 := slices.ContainsFunc(gws, netip.Addr.Is6)
	sets := map[string]*nftables.Set{
		setSrc4: b.addrSet(setSrc4, false, src4),
		setSrc6: b.addrSet(setSrc6, true, src6),
		setHR4:  b.addrSet(setHR4, false, hr4),
		setHR6:  b.addrSet(setHR6, true, hr6),
		setUIDs: b.uidSet(s.UIDs),
	}

	// Rules every sandbox chain starts with: high-risk first, ahead of any
	// accept, with its own counter. Refused like everything else (a
	// metadata client fails at once instead of hanging), never answered to
	// a forged source (forged: the chain's test for one).
	highRisk := func(forged []expr.Any) [][]expr.Any {
		var rules [][]expr.Any
		if set := sets[setHR4]; set != nil {
			rules = append(rules, b.refusal(addrMatch(false, false, set), forged, CounterDropHighRisk)...)
		}
		if set := sets[setHR6]; set != nil {
			rules = append(rules, b.refusal(addrMatch(true, false, set), forged, CounterDropHighRisk)...)
		}
		return rules
	}
	// Accepts for the gateway's service ports, per address family.
	services := func() [][]expr.Any {
		var rules [][]expr.Any
		for _, gw := range gws {
			rules = append(rules, b.rule(cat(addrIs(gw), dport(unix.IPPROTO_TCP, s.ProxyPort)), CounterAcceptProxy, verdict(expr.VerdictAccept)))
			if s.DNSPort != 0 {
				rules = append(rules,
					b.rule(cat(addrIs(gw), dport(unix.IPPROTO_UDP, s.DNSPort)), CounterAcceptDNS, verdict(expr.VerdictAccept)),
					b.rule(cat(addrIs(gw), dport(unix.IPPROTO_TCP, s.DNSPort)), CounterAcceptDNS, verdict(expr.VerdictAccept)))
			}
			for _, p := range s.ExtraPorts {
				rules = append(rules, b.rule(cat(addrIs(gw), dport(unix.IPPROTO_TCP, p)), CounterAcceptExtra, verdict(expr.VerdictAccept)))
			}
			for _, r := range s.Redirects {
				rules = append(rules, b.rule(cat(addrIs(gw), dport(unix.IPPROTO_TCP, r.To)), CounterAcceptExtra, verdict(expr.VerdictAccept)))
			}
		}
		return rules
	}
	// Rules that send a hook's sandbox traffic to its sandbox chain.
	classify := func(to string, withLo bool) [][]expr.Any {
		var rules [][]expr.Any
		if withLo && (sets[setSrc4] != nil || sets[setSrc6] != nil) {
			// The host's own traffic to itself can carry a sandbox source
			// address (the gateway address inside a sandbox CIDR). It already
			// passed the output hook, where uid sandboxes are filtered.
			rules = append(rules, b.rule(ifname(expr.MetaKeyIIFNAME, "lo", false), "", verdict(expr.VerdictAccept)))
		}
		for _, p := range s.IfPrefixes {
			rules = append(rules, b.rule(ifname(expr.MetaKeyIIFNAME, p, true), "", jump(to)))
		}
		if set := sets[setSrc4]; set != nil {
			rules = append(rules, b.rule(addrMatch(false, true, set), "", jump(to)))
		}
		if set := sets[setSrc6]; set != nil {
			rules = append(rules, b.rule(addrMatch(true, true, set), "", jump(to)))
		}
		return rules
	}

	if len(s.IfPrefixes) > 0 || len(s.SourceCIDRs) > 0 {
		in := highRisk(reversePathMissing())
		if hasGw6 {
			// IPv6 to the gateway needs neighbour discovery. Hop limit 255
			// proves the packet was not routed (RFC 4861 §7.1.1), and input
			// only reaches the gateway itself: nothing is forwarded.
			for _, typ := range []byte{ndNeighborSolicit, ndNeighborAdvert} {
				in = append(in, b.rule(ndMatch(typ), CounterAcceptND, verdict(expr.VerdictAccept)))
			}
		}
		// A source that does not route back out of the interface the
		// packet came in on is forged (a raw socket needs only CAP_NET_RAW,
		// Docker's default): the DNS filter keys its rate limit, name
		// budget and the self-test's exemption on the source, so a forged
		// one would buy a fresh budget each time. After ND, whose DAD
		// probes come from "::".
		in = append(in, b.rule(reversePathMissing(), CounterDropSpoofed, verdict(expr.VerdictDrop)))
		in = append(in, services()...)
		// Forged sources are gone by now: a plain refusal.
		in = append(in, b.rule(nil, CounterDropInput, nil, refuse()))

		// The forward chain drops forged sources too (counted as spoofed),
		// before the refusal that would answer them.
		fwd := append(highRisk(reversePathMissing()),
			b.rule(reversePathMissing(), CounterDropSpoofed, verdict(expr.VerdictDrop)),
			b.rule(nil, CounterDropForward, nil, refuse()))

		rs.chains = append(rs.chains,
			chainDef{chain: baseChain(rs.table, chainInput, nftables.ChainHookInput), rules: classify(chainSbxIn, true)},
			chainDef{chain: regularChain(rs.table, chainSbxIn), rules: in},
			chainDef{chain: baseChain(rs.table, chainForward, nftables.ChainHookForward), rules: classify(chainSbxFwd, false)},
			chainDef{chain: regularChain(rs.table, chainSbxFwd), rules: fwd},
		)
	}
	if len(s.Redirects) > 0 {
		// Transparent mode: rewrite the destination before routing, so the
		// connection arrives at the gateway's own listener and the input
		// chain (which accepts the target ports) judges it; nothing of it
		// is forwarded. Only destinations the policy could allow are
		// redirected (a rule's cidrs, a DNS answer for an allowed name):
		// any other meets the forward chain's refusal, as in a sealed box, so
		// a probe sees the same wall with transparent mode on or off.
		// High-risk destinations return first: never redirected, even
		// inside a rule's cidrs.
		var nat [][]expr.Any
		if set := sets[setHR4]; set != nil {
			nat = append(nat, b.rule(addrMatch(false, false, set), "", verdict(expr.VerdictReturn)))
		}
		r4, _ := splitFamilies(s.RedirectCIDRs)
		dsts := []*nftables.Set{b.addrSet(setRdr4, false, r4), b.addSet(&nftables.Set{Table: rs.table, Name: setDyn4, KeyType: nftables.TypeIPAddr, HasTimeout: true}, nil)}
		for _, r := range s.Redirects {
			for _, dst := range dsts {
				if dst == nil {
					continue
				}
				nat = append(nat, b.rule(cat(addrMatch(false, false, dst), dport(unix.IPPROTO_TCP, r.From)), CounterRedirect, nil,
					&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(r.To)},
					// max register and flags (NF_NAT_RANGE_PROTO_SPECIFIED) as
					// the kernel reports them back, so Check sees no drift
					&expr.Redir{RegisterProtoMin: 1, RegisterProtoMax: 1, Flags: 2}))
			}
		}
		rs.chains = append(rs.chains,
			chainDef{chain: natChain(rs.table, chainNAT), rules: classify(chainSbxNAT, false)},
			chainDef{chain: regularChain(rs.table, chainSbxNAT), rules: nat},
		)
	}
	if uids := sets[setUIDs]; uids != nil {
		// A local socket forges a source only with a raw socket
		// (IP_HDRINCL): any source that is not the host's own is forged.
		out := append(highRisk(sourceNotLocal()), services()...)
		out = append(out,
			b.rule(sourceNotLocal(), CounterDropOutputUID, verdict(expr.VerdictDrop)),
			b.rule(nil, CounterDropOutputUID, nil, refuse()))
		rs.chains = append(rs.chains,
			chainDef{chain: baseChain(rs.table, chainOutput, nftables.ChainHookOutput), rules: [][]expr.Any{
				b.rule([]expr.Any{
					&expr.Meta{Key: expr.MetaKeySKUID, Register: 1},
					&expr.Lookup{SourceRegister: 1, SetName: uids.Name, SetID: uids.ID},
				}, "", jump(chainSbxOut)),
			}},
			chainDef{chain: regularChain(rs.table, chainSbxOut), rules: out},
		)
	}

	// Counters in a fixed order, only those a rule refers to.
	for _, n := range []string{CounterDropHighRisk, CounterDropSpoofed, CounterDropInput, CounterDropForward, CounterDropOutputUID,
		CounterAcceptProxy, CounterAcceptDNS, CounterAcceptExtra, CounterAcceptND, CounterRedirect} {
		if b.used[n] {
			rs.counters = append(rs.counters, n)
		}
	}
	return rs, nil
}

// builder collects sets and records which named counters rules use.
type builder struct {
	rs   *ruleset
	used map[string]bool
}

// addrSet adds an interval set of one family, or returns nil when ps is empty.
func (b *builder) addrSet(name string, v6 bool, ps []netip.Prefix) *nftables.Set {
	if len(ps) == 0 {
		return nil
	}
	typ := nftables.TypeIPAddr
	if v6 {
		typ = nftables.TypeIP6Addr
	}
	set := &nftables.Set{Table: b.rs.table, Name: name, KeyType: typ, Interval: true}
	var elems []nftables.SetElement
	for _, r := range mergeRanges(ps) {
		elems = append(elems, nftables.SetElement{Key: r.first.AsSlice()})
		// An interval is [start, end): the end element is the first address
		// after it. A range that runs to the family's last address has none.
		if end := r.last.Next(); end.IsValid() {
			elems = append(elems, nftables.SetElement{Key: end.AsSlice(), IntervalEnd: true})
		}
	}
	return b.addSet(set, elems)
}

func (b *builder) uidSet(uids []uint32) *nftables.Set {
	if len(uids) == 0 {
		return nil
	}
	set := &nftables.Set{Table: b.rs.table, Name: setUIDs, KeyType: nftables.TypeUID, KeyByteOrder: binaryutil.NativeEndian}
	var elems []nftables.SetElement
	for _, u := range uids {
		elems = append(elems, nftables.SetElement{Key: binaryutil.NativeEndian.PutUint32(u)})
	}
	return b.addSet(set, elems)
}

// addSet gives the set a batch-local ID, so that rules in the same batch can
// refer to it, and keeps AddSet from drawing on the library's global counter.
func (b *builder) addSet(set *nftables.Set, elems []nftables.SetElement) *nftables.Set {
	set.ID = uint32(len(b.rs.sets) + 1)
	b.rs.sets = append(b.rs.sets, setDef{set: set, elems: elems})
	return set
}

// rule assembles match, an anonymous counter (per-rule figures for `show`),
// the named counter when one is given, and the verdict.
// rule is match, an anonymous and (if named) a named counter, then the
// verdict v or, when v is nil, the terminal statements in tail.
func (b *builder) rule(match []expr.Any, counter string, v *expr.Verdict, tail ...expr.Any) []expr.Any {
	r := append(append([]expr.Any{}, match...), &expr.Counter{})
	if counter != "" {
		b.used[counter] = true
		r = append(r, &expr.Objref{Type: int(nftables.ObjTypeCounter), Name: counter})
	}
	if v != nil {
		r = append(r, v)
	}
	return append(r, tail...)
}

// refusal is the rules that stop traffic matching match, counted in
// counter: dropped silently when forged also matches (the source is
// forged), refused otherwise. An ICMP error goes to the packet's source
// and quotes the packet: answering a forged source would carry the
// sandbox's bytes to any address it writes there.
func (b *builder) refusal(match, forged []expr.Any, counter string) [][]expr.Any {
	return [][]expr.Any{
		b.rule(cat(match, forged), counter, verdict(expr.VerdictDrop)),
		b.rule(match, counter, nil, refuse()),
	}
}

// refuse is the walls' answer to what they stop: "reject with icmpx
// admin-prohibited" (ICMP code 13, ICMPv6 code 1), so the client fails at
// once (EHOSTUNREACH, EACCES), as in a sealed box, instead of waiting out
// its timeout. Never a TCP reset or port-unreachable: those say that the
// packet reached its target, which is how egressd's own probes tell a
// leak (selftest/direct.go).
func refuse() *expr.Reject {
	return &expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED}
}

func baseChain(t *nftables.Table, name string, hook *nftables.ChainHook) *nftables.Chain {
	// Policy accept: the wall judges only sandbox traffic; the sandbox
	// chains it jumps to always end in a refusal.
	policy := nftables.ChainPolicyAccept
	return &nftables.Chain{Table: t, Name: name, Type: nftables.ChainTypeFilter, Hooknum: hook,
		Priority: nftables.ChainPriorityRef(filterPriority), Policy: &policy}
}

// natChain is the prerouting hook of transparent mode, at dstnat priority.
func natChain(t *nftables.Table, name string) *nftables.Chain {
	policy := nftables.ChainPolicyAccept
	return &nftables.Chain{Table: t, Name: name, Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookPrerouting,
		Priority: nftables.ChainPriorityNATDest, Policy: &policy}
}

func regularChain(t *nftables.Table, name string) *nftables.Chain {
	return &nftables.Chain{Table: t, Name: name}
}

func verdict(k expr.VerdictKind) *expr.Verdict { return &expr.Verdict{Kind: k} }

func jump(chain string) *expr.Verdict { return &expr.Verdict{Kind: expr.VerdictJump, Chain: chain} }

func cat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// ifname matches an interface name: a prefix (nft "egsbx*") compares only
// the given bytes; an exact name compares all IFNAMSIZ bytes, NUL-padded.
func ifname(key expr.MetaKey, name string, prefix bool) []expr.Any {
	data := []byte(name)
	if !prefix {
		data = make([]byte, unix.IFNAMSIZ)
		copy(data, name)
	}
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: data},
	}
}

// IPv4 and IPv6 header offsets.
const (
	ip4SaddrOff = 12
	ip4DaddrOff = 16
	ip6HopOff   = 7
	ip6SaddrOff = 8
	ip6DaddrOff = 24

	ndNeighborSolicit = 135
	ndNeighborAdvert  = 136
)

// addrMatch is "ip saddr @set" and its relatives; the nfproto check keeps an
// IPv4 offset from being read in an IPv6 header in the inet family.
func addrMatch(v6, src bool, set *nftables.Set) []expr.Any {
	proto, off, n := byte(unix.NFPROTO_IPV4), uint32(ip4DaddrOff), uint32(4)
	switch {
	case v6 && src:
		proto, off, n = unix.NFPROTO_IPV6, ip6SaddrOff, 16
	case v6:
		proto, off, n = unix.NFPROTO_IPV6, ip6DaddrOff, 16
	case src:
		off = ip4SaddrOff
	}
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n},
		&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID},
	}
}

// addrIs is "ip daddr A" / "ip6 daddr A": one address, inline.
func addrIs(a netip.Addr) []expr.Any {
	proto, off := byte(unix.NFPROTO_IPV4), uint32(ip4DaddrOff)
	if a.Is6() {
		proto, off = unix.NFPROTO_IPV6, ip6DaddrOff
	}
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: uint32(a.BitLen() / 8)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: a.AsSlice()},
	}
}

// dport is "tcp dport N" / "udp dport N". meta l4proto skips IPv6 extension
// headers, and the transport payload fails to load on a non-first fragment,
// so a fragment never matches an accept.
func dport(proto byte, port uint16) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
	}
}

// reversePathMissing is "fib saddr . iif oif missing": no route back to
// the packet's source leaves through the interface it arrived on (a strict
// reverse-path check, as rp_filter=1, for sandbox traffic only).
func reversePathMissing() []expr.Any {
	return []expr.Any{
		&expr.Fib{Register: 1, FlagSADDR: true, FlagIIF: true, ResultOIF: true, FlagPRESENT: true},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0, 0, 0, 0}},
	}
}

// sourceNotLocal is "fib saddr type != local": the source is none of the
// host's addresses (the output hook's test for a forged source).
func sourceNotLocal() []expr.Any {
	return []expr.Any{
		&expr.Fib{Register: 1, FlagSADDR: true, ResultADDRTYPE: true},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(unix.RTN_LOCAL)},
	}
}

// ndMatch is "ip6 hoplimit 255 icmpv6 type T".
func ndMatch(typ byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV6}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: ip6HopOff, Len: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{255}},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_ICMPV6}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{typ}},
	}
}
