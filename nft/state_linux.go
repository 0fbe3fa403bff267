//go:build linux

package nft

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// state is a table reduced to text that can be compared: Check diffs the
// kernel's state against the spec's, Show prints the kernel's, and the golden
// files hold the spec's. Both sides go through the same describe functions,
// so a difference in text is a difference in the kernel.
type state struct {
	name     string // table name
	flags    uint32 // table flags; NFT_TABLE_F_DORMANT switches every hook off
	chains   []chainState
	sets     []setState
	counters []counterState
	others   []string // stateful objects that are not counters
}

type chainState struct {
	name   string
	header string // "type filter hook input priority -10 policy accept"; "" for a regular chain
	rules  []ruleState
}

type ruleState struct {
	text    string // without counter values
	counted string // with counter values, for Show
}

type setState struct {
	name   string
	header string // "type ipv4_addr flags interval"
	elems  []string
}

type counterState struct {
	name string
	Counter
}

// Counter is a packet and byte count.
type Counter struct {
	Packets uint64
	Bytes   uint64
}

// stateOf describes what Apply would install for rs.
func stateOf(rs *ruleset) *state {
	st := &state{name: rs.table.Name}
	for _, cd := range rs.chains {
		st.chains = append(st.chains, describeChain(cd.chain, cd.rules))
	}
	for _, sd := range rs.sets {
		st.sets = append(st.sets, describeSet(sd.set, sd.elems))
	}
	for _, n := range rs.counters {
		st.counters = append(st.counters, counterState{name: n})
	}
	slices.SortFunc(st.counters, func(a, b counterState) int { return strings.Compare(a.name, b.name) })
	return st
}

// readState reads table name of family inet; it returns nil, nil when the
// table does not exist. The reads are separate dumps, not one snapshot: a
// change racing with them can show up as drift, and the repair for drift is
// an idempotent replace.
func readState(c *nftables.Conn, name string) (*state, error) {
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	i := slices.IndexFunc(tables, func(t *nftables.Table) bool { return t.Name == name })
	if i < 0 {
		return nil, nil
	}
	t := tables[i]
	// nftables v0.3.0 decodes NFTA_TABLE_FLAGS (big endian on the wire) in
	// host order; undo that.
	flags := binaryutil.BigEndian.Uint32(binaryutil.NativeEndian.PutUint32(t.Flags))
	st := &state{name: name, flags: flags}

	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, fmt.Errorf("list chains: %w", err)
	}
	for _, ch := range chains {
		if ch.Table == nil || ch.Table.Name != name {
			continue
		}
		rules, err := c.GetRules(t, ch)
		if err != nil {
			return nil, fmt.Errorf("list rules of chain %s: %w", ch.Name, err)
		}
		exprs := make([][]expr.Any, len(rules))
		for j, r := range rules {
			exprs[j] = r.Exprs
		}
		st.chains = append(st.chains, describeChain(ch, exprs))
	}

	sets, err := c.GetSets(t)
	if err != nil {
		return nil, fmt.Errorf("list sets: %w", err)
	}
	for _, s := range sets {
		elems, err := c.GetSetElements(s)
		if err != nil {
			return nil, fmt.Errorf("list elements of set %s: %w", s.Name, err)
		}
		st.sets = append(st.sets, describeSet(s, elems))
	}

	objs, err := c.GetNamedObjects(t)
	if err != nil {
		return nil, fmt.Errorf("list objects: %w", err)
	}
	for _, o := range objs {
		no, ok := o.(*nftables.NamedObj)
		if !ok {
			st.others = append(st.others, fmt.Sprintf("%T", o))
			continue
		}
		if ctr, ok := no.Obj.(*expr.Counter); ok && no.Type == nftables.ObjTypeCounter {
			st.counters = append(st.counters, counterState{name: no.Name, Counter: Counter{ctr.Packets, ctr.Bytes}})
			continue
		}
		st.others = append(st.others, fmt.Sprintf("object %s type %d", no.Name, no.Type))
	}
	slices.SortFunc(st.counters, func(a, b counterState) int { return strings.Compare(a.name, b.name) })
	return st, nil
}

// diff lists every difference between want and got, in a stable order.
func diff(want, got *state) []string {
	if got == nil {
		return []string{fmt.Sprintf("table inet %s: missing", want.name)}
	}
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }

	if got.flags != want.flags {
		add("table inet %s: flags %#x, want %#x (dormant: every chain is off)", want.name, got.flags, want.flags)
	}

	gotChains := map[string]chainState{}
	for _, c := range got.chains {
		gotChains[c.name] = c
	}
	for _, w := range want.chains {
		g, ok := gotChains[w.name]
		if !ok {
			add("chain %s: missing", w.name)
			continue
		}
		delete(gotChains, w.name)
		if g.header != w.header {
			add("chain %s: got %q, want %q", w.name, g.header, w.header)
		}
		out = append(out, diffRules(w.name, w.rules, g.rules)...)
	}
	for _, g := range got.chains {
		if _, extra := gotChains[g.name]; extra {
			add("chain %s: unexpected (%d rules)", g.name, len(g.rules))
		}
	}

	gotSets := map[string]setState{}
	for _, s := range got.sets {
		gotSets[s.name] = s
	}
	for _, w := range want.sets {
		g, ok := gotSets[w.name]
		if !ok {
			add("set %s: missing", w.name)
			continue
		}
		delete(gotSets, w.name)
		if g.header != w.header {
			add("set %s: got %q, want %q", w.name, g.header, w.header)
		}
		if w.name == SetRedirectDyn4 {
			continue // its elements come and go with DNS answers (AddRedirect)
		}
		out = append(out, diffList("set "+w.name, "element", w.elems, g.elems)...)
	}
	for _, g := range got.sets {
		if _, extra := gotSets[g.name]; extra {
			add("set %s: unexpected (%d elements)", g.name, len(g.elems))
		}
	}

	names := func(cs []counterState) []string {
		var ns []string
		for _, c := range cs {
			ns = append(ns, c.name)
		}
		slices.Sort(ns)
		return ns
	}
	out = append(out, diffList("table inet "+want.name, "counter", names(want.counters), names(got.counters))...)
	for _, o := range got.others {
		add("table inet %s: unexpected %s", want.name, o)
	}
	return out
}

// diffRules compares rule lists, which are ordered: the first match decides.
func diffRules(chain string, want, got []ruleState) []string {
	text := func(rs []ruleState) []string {
		var ts []string
		for _, r := range rs {
			ts = append(ts, r.text)
		}
		return ts
	}
	w, g := text(want), text(got)
	if slices.Equal(w, g) {
		return nil
	}
	out := diffList("chain "+chain, "rule", w, g)
	if len(out) == 0 {
		out = append(out, fmt.Sprintf("chain %s: rules out of order: got %q", chain, g))
	}
	return out
}

// maxListed caps the differences listed per set, so that a replaced 10,000
// element set gives a readable report.
const maxListed = 10

// diffList reports entries missing from got and unexpected in got, counting
// duplicates.
func diffList(where, what string, want, got []string) []string {
	count := map[string]int{}
	for _, s := range want {
		count[s]++
	}
	for _, s := range got {
		count[s]--
	}
	var missing, extra []string
	for _, s := range want {
		if count[s] > 0 {
			missing = append(missing, s)
			count[s]--
		}
	}
	for _, s := range got {
		if count[s] < 0 {
			extra = append(extra, s)
			count[s]++
		}
	}
	var out []string
	list := func(kind string, items []string) {
		for i, s := range items {
			if i == maxListed {
				out = append(out, fmt.Sprintf("%s: %d more %s %ss", where, len(items)-maxListed, kind, what))
				break
			}
			out = append(out, fmt.Sprintf("%s: %s %s %s", where, kind, what, s))
		}
	}
	list("missing", missing)
	list("unexpected", extra)
	return out
}

// format prints st in nft-like text. With counts, rules and named counters
// carry their packet and byte figures; without, the text is stable and is
// what the golden files hold. maxElems caps the elements printed per set
// (0: no cap).
func (st *state) format(counts bool, maxElems int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "table inet %s", st.name)
	if st.flags != 0 {
		fmt.Fprintf(&b, " flags %#x", st.flags)
	}
	b.WriteString("\n")
	for _, c := range st.counters {
		if counts {
			fmt.Fprintf(&b, "\tcounter %s packets %d bytes %d\n", c.name, c.Packets, c.Bytes)
		} else {
			fmt.Fprintf(&b, "\tcounter %s\n", c.name)
		}
	}
	for _, o := range st.others {
		fmt.Fprintf(&b, "\t%s\n", o)
	}
	for _, s := range st.sets {
		fmt.Fprintf(&b, "\tset %s %s (%d)\n", s.name, s.header, len(s.elems))
		for i, e := range s.elems {
			if maxElems > 0 && i == maxElems {
				fmt.Fprintf(&b, "\t\t... %d more\n", len(s.elems)-maxElems)
				break
			}
			fmt.Fprintf(&b, "\t\t%s\n", e)
		}
	}
	for _, c := range st.chains {
		fmt.Fprintf(&b, "\tchain %s", c.name)
		if c.header != "" {
			fmt.Fprintf(&b, " %s", c.header)
		}
		b.WriteString("\n")
		for _, r := range c.rules {
			if counts {
				fmt.Fprintf(&b, "\t\t%s\n", r.counted)
			} else {
				fmt.Fprintf(&b, "\t\t%s\n", r.text)
			}
		}
	}
	return b.String()
}

func describeChain(c *nftables.Chain, rules [][]expr.Any) chainState {
	cs := chainState{name: c.Name}
	if c.Hooknum != nil {
		var h strings.Builder
		fmt.Fprintf(&h, "type %s hook %s", c.Type, hookName(*c.Hooknum))
		if c.Priority != nil {
			fmt.Fprintf(&h, " priority %d", *c.Priority)
		}
		if c.Policy != nil {
			fmt.Fprintf(&h, " policy %s", policyName(*c.Policy))
		}
		cs.header = h.String()
	}
	for _, r := range rules {
		cs.rules = append(cs.rules, ruleState{text: describeRule(r, false), counted: describeRule(r, true)})
	}
	return cs
}

func hookName(h nftables.ChainHook) string {
	switch h {
	case *nftables.ChainHookPrerouting:
		return "prerouting"
	case *nftables.ChainHookInput:
		return "input"
	case *nftables.ChainHookForward:
		return "forward"
	case *nftables.ChainHookOutput:
		return "output"
	case *nftables.ChainHookPostrouting:
		return "postrouting"
	}
	return strconv.Itoa(int(h))
}

func policyName(p nftables.ChainPolicy) string {
	switch p {
	case nftables.ChainPolicyAccept:
		return "accept"
	case nftables.ChainPolicyDrop:
		return "drop"
	}
	return strconv.Itoa(int(p))
}

func describeSet(s *nftables.Set, elems []nftables.SetElement) setState {
	ss := setState{name: s.Name, header: "type " + s.KeyType.Name}
	var flags []string
	for _, f := range []struct {
		on   bool
		name string
	}{
		{s.Anonymous, "anonymous"}, {s.Constant, "constant"}, {s.Interval, "interval"}, {s.IsMap, "map"},
		{s.HasTimeout, "timeout"}, {s.Dynamic, "dynamic"}, {s.Concatenation, "concat"}, {s.Counter, "counter"},
	} {
		if f.on {
			flags = append(flags, f.name)
		}
	}
	if len(flags) > 0 {
		ss.header += " flags " + strings.Join(flags, ",")
	}
	switch {
	case s.Interval && (s.KeyType == nftables.TypeIPAddr || s.KeyType == nftables.TypeIP6Addr):
		for _, r := range intervals(elems, s.KeyType == nftables.TypeIP6Addr) {
			ss.elems = append(ss.elems, r.String())
		}
	case !s.Interval && s.KeyType == nftables.TypeUID:
		var uids []uint32
		for _, e := range elems {
			if len(e.Key) == 4 {
				uids = append(uids, binaryutil.NativeEndian.Uint32(e.Key))
			} else {
				ss.elems = append(ss.elems, "0x"+hex.EncodeToString(e.Key))
			}
		}
		slices.Sort(uids)
		for _, u := range uids {
			ss.elems = append(ss.elems, strconv.FormatUint(uint64(u), 10))
		}
	default:
		for _, e := range elems {
			k := "0x" + hex.EncodeToString(e.Key)
			if e.IntervalEnd {
				k += " (end)"
			}
			ss.elems = append(ss.elems, k)
		}
		slices.Sort(ss.elems)
	}
	return ss
}

// intervals reads the elements of an interval set as the kernel matches
// them: sorted by key, a start element opens a range and the next end
// element closes it before its key; a range left open runs to the last
// address. Stray end elements (nft adds one at address zero) match nothing.
func intervals(elems []nftables.SetElement, v6 bool) []addrRange {
	size := 4
	if v6 {
		size = 16
	}
	sorted := slices.Clone(elems)
	slices.SortStableFunc(sorted, func(a, b nftables.SetElement) int {
		// At equal keys the end of one range sorts before the start of the next.
		return cmp.Or(bytes.Compare(a.Key, b.Key), boolOrder(!a.IntervalEnd, !b.IntervalEnd))
	})
	var out []addrRange
	var open netip.Addr
	for _, e := range sorted {
		a, ok := netip.AddrFromSlice(e.Key)
		if !ok || len(e.Key) != size {
			continue
		}
		switch {
		case !e.IntervalEnd && !open.IsValid():
			open = a
		case e.IntervalEnd && open.IsValid():
			if a.Compare(open) > 0 {
				out = append(out, addrRange{open, a.Prev()})
			}
			open = netip.Addr{}
		}
	}
	if open.IsValid() {
		last := lastAddr(netip.PrefixFrom(open, 0))
		out = append(out, addrRange{open, last})
	}
	return out
}

func boolOrder(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}

// describeRule renders a rule's expressions as nft-like text. It knows the
// expressions this package emits and prints them as nft would ("ip daddr
// @gw4 tcp dport 3128"); a protocol dependency (meta nfproto, meta l4proto)
// is left out only when the header field that needs it follows at once, and
// a header field without its dependency is printed raw ("@nh,128,32"), so
// two rules that match differently never read the same. Anything else is
// printed as a raw expression.
// metaCmp describes a meta load compared by c, or records, without a
// word, the family or transport protocol that the payload load after it
// reads (nft prints those as part of the field: "ip daddr").
func metaCmp(e *expr.Meta, c *expr.Cmp, after expr.Any, family, l4 *byte) string {
	switch {
	case e.Key == expr.MetaKeyNFPROTO && c.Op == expr.CmpOpEq && len(c.Data) == 1 && isLoad(after, expr.PayloadBaseNetworkHeader):
		*family = c.Data[0]
	case e.Key == expr.MetaKeyL4PROTO && c.Op == expr.CmpOpEq && len(c.Data) == 1 && isLoad(after, expr.PayloadBaseTransportHeader):
		*l4 = c.Data[0]
	default:
		return metaName(e.Key) + " " + cmpText(c, metaValue(e.Key, c.Data))
	}
	return ""
}

// loadedText describes a register loaded with field and then compared or
// looked up by next; false when next does neither.
func loadedText(field string, value func([]byte) string, reg uint32, next expr.Any) (string, bool) {
	if c, ok := next.(*expr.Cmp); ok && c.Register == reg {
		return field + " " + cmpText(c, value(c.Data)), true
	}
	if l, ok := next.(*expr.Lookup); ok && l.SourceRegister == reg && !l.IsDestRegSet {
		return field + " " + lookupText(l), true
	}
	return "", false
}

// exprAt is exprs[i], or nil past the end.
func exprAt(exprs []expr.Any, i int) expr.Any {
	if i < len(exprs) {
		return exprs[i]
	}
	return nil
}

// verdictText is a verdict as nft writes it.
func verdictText(e *expr.Verdict) string {
	switch e.Kind {
	case expr.VerdictAccept:
		return "accept"
	case expr.VerdictDrop:
		return "drop"
	case expr.VerdictReturn:
		return "return"
	case expr.VerdictContinue:
		return "continue"
	case expr.VerdictJump:
		return "jump " + e.Chain
	case expr.VerdictGoto:
		return "goto " + e.Chain
	}
	return fmt.Sprintf("verdict %d", e.Kind)
}

// rejectText is a reject as nft writes it in the inet family; only the
// walls' own (refuse) and a TCP reset have words, so that any other reads
// as drift.
func rejectText(e *expr.Reject) string {
	switch {
	case e.Type == unix.NFT_REJECT_ICMPX_UNREACH && e.Code == unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED:
		return "reject with icmpx admin-prohibited"
	case e.Type == unix.NFT_REJECT_TCP_RST:
		return "reject with tcp reset"
	}
	return fmt.Sprintf("reject type %d code %d", e.Type, e.Code)
}

// fibText reads a fib expression and the comparison after it; only the
// reverse-path check (reversePathMissing) and the local-source check
// (sourceNotLocal) have words.
func fibText(e *expr.Fib, next expr.Any) (string, bool) {
	c, ok := next.(*expr.Cmp)
	if !ok || c.Register != e.Register {
		return "", false
	}
	switch {
	case *e == (expr.Fib{Register: e.Register, FlagSADDR: true, FlagIIF: true, ResultOIF: true, FlagPRESENT: true}) &&
		c.Op == expr.CmpOpEq && bytes.Equal(c.Data, []byte{0, 0, 0, 0}):
		return "fib saddr . iif oif missing", true
	case *e == (expr.Fib{Register: e.Register, FlagSADDR: true, ResultADDRTYPE: true}) &&
		c.Op == expr.CmpOpNeq && bytes.Equal(c.Data, binaryutil.NativeEndian.PutUint32(unix.RTN_LOCAL)):
		return "fib saddr type != local", true
	}
	return "", false
}

// redirectText reads an immediate port and the redirect to it.
func redirectText(e *expr.Immediate, next expr.Any) (string, bool) {
	r, ok := next.(*expr.Redir)
	if !ok || r.RegisterProtoMin != e.Register || r.RegisterProtoMax != e.Register || r.Flags != 2 || len(e.Data) != 2 {
		return "", false
	}
	return fmt.Sprintf("redirect to :%d", binary.BigEndian.Uint16(e.Data)), true
}

func describeRule(exprs []expr.Any, counts bool) string {
	var (
		words  []string
		family byte // set by a left-out meta nfproto
		l4     byte // set by a left-out meta l4proto
	)
	say := func(s string) { words = append(words, s) }
	for i := 0; i < len(exprs); i++ {
		next, after := exprAt(exprs, i+1), exprAt(exprs, i+2)
		switch e := exprs[i].(type) {
		case *expr.Meta:
			if e.SourceRegister {
				break
			}
			if c, ok := next.(*expr.Cmp); ok && c.Register == e.Register {
				if w := metaCmp(e, c, after, &family, &l4); w != "" {
					say(w)
				}
				i++
				continue
			}
			if l, ok := next.(*expr.Lookup); ok && l.SourceRegister == e.Register && !l.IsDestRegSet {
				say(metaName(e.Key) + " " + lookupText(l))
				i++
				continue
			}
		case *expr.Payload:
			if e.OperationType != expr.PayloadLoad || e.CsumType != 0 {
				break
			}
			field, value := payloadField(e, family, l4)
			if w, ok := loadedText(field, value, e.DestRegister, next); ok {
				say(w)
				i++
				continue
			}
		case *expr.Fib:
			if w, ok := fibText(e, next); ok {
				say(w)
				i++
				continue
			}
		case *expr.Immediate:
			if w, ok := redirectText(e, next); ok {
				say(w)
				i++
				continue
			}
		case *expr.Counter:
			if counts {
				say(fmt.Sprintf("counter packets %d bytes %d", e.Packets, e.Bytes))
			} else {
				say("counter")
			}
			continue
		case *expr.Objref:
			if e.Type == int(nftables.ObjTypeCounter) {
				say(fmt.Sprintf("counter name %q", e.Name))
				continue
			}
		case *expr.Verdict:
			say(verdictText(e))
			continue
		case *expr.Reject:
			say(rejectText(e))
			continue
		}
		say(fmt.Sprintf("[%T %+v]", exprs[i], exprs[i]))
	}
	return strings.Join(words, " ")
}

func isLoad(e expr.Any, base expr.PayloadBase) bool {
	p, ok := e.(*expr.Payload)
	return ok && p.OperationType == expr.PayloadLoad && p.Base == base
}

func lookupText(l *expr.Lookup) string {
	if l.Invert {
		return "!= @" + l.SetName
	}
	return "@" + l.SetName
}

func cmpText(c *expr.Cmp, value string) string {
	switch c.Op {
	case expr.CmpOpEq:
		return value
	case expr.CmpOpNeq:
		return "!= " + value
	case expr.CmpOpLt:
		return "< " + value
	case expr.CmpOpLte:
		return "<= " + value
	case expr.CmpOpGt:
		return "> " + value
	case expr.CmpOpGte:
		return ">= " + value
	}
	return fmt.Sprintf("op%d %s", c.Op, value)
}

func metaName(k expr.MetaKey) string {
	switch k {
	case expr.MetaKeyIIFNAME:
		return "iifname"
	case expr.MetaKeyOIFNAME:
		return "oifname"
	case expr.MetaKeyNFPROTO:
		return "meta nfproto"
	case expr.MetaKeyL4PROTO:
		return "meta l4proto"
	case expr.MetaKeySKUID:
		return "meta skuid"
	case expr.MetaKeyMARK:
		return "meta mark"
	}
	return fmt.Sprintf("meta key%d", k)
}

func metaValue(k expr.MetaKey, data []byte) string {
	switch k {
	case expr.MetaKeyIIFNAME, expr.MetaKeyOIFNAME:
		return ifnameValue(data)
	case expr.MetaKeyNFPROTO:
		if len(data) == 1 {
			switch data[0] {
			case unix.NFPROTO_IPV4:
				return "ipv4"
			case unix.NFPROTO_IPV6:
				return "ipv6"
			}
		}
	case expr.MetaKeyL4PROTO:
		if len(data) == 1 {
			return protoName(data[0])
		}
	case expr.MetaKeySKUID:
		if len(data) == 4 {
			return strconv.FormatUint(uint64(binaryutil.NativeEndian.Uint32(data)), 10)
		}
	}
	return rawValue(data)
}

// ifnameValue prints an interface-name comparison as nft does: a full,
// NUL-padded name as "lo", a prefix (no NUL) as "egsbx*".
func ifnameValue(data []byte) string {
	if i := bytes.IndexByte(data, 0); i >= 0 {
		if len(data) == unix.IFNAMSIZ && !bytes.ContainsFunc(data[i:], func(r rune) bool { return r != 0 }) {
			return strconv.Quote(string(data[:i]))
		}
		return rawValue(data)
	}
	return strconv.Quote(string(data) + "*")
}

func protoName(p byte) string {
	switch p {
	case unix.IPPROTO_TCP:
		return "tcp"
	case unix.IPPROTO_UDP:
		return "udp"
	case unix.IPPROTO_ICMP:
		return "icmp"
	case unix.IPPROTO_ICMPV6:
		return "ipv6-icmp"
	}
	return strconv.Itoa(int(p))
}

func rawValue(data []byte) string { return "0x" + hex.EncodeToString(data) }

// payloadField names a header field load and returns the printer for the
// value it is compared with. family and l4 are the protocol dependencies
// already established in the rule.
func payloadField(p *expr.Payload, family, l4 byte) (string, func([]byte) string) {
	addr := func(b []byte) string {
		if a, ok := netip.AddrFromSlice(b); ok {
			return a.String()
		}
		return rawValue(b)
	}
	num := func(b []byte) string {
		switch len(b) {
		case 1:
			return strconv.Itoa(int(b[0]))
		case 2:
			return strconv.Itoa(int(binaryutil.BigEndian.Uint16(b)))
		}
		return rawValue(b)
	}
	icmp6Type := func(b []byte) string {
		if len(b) == 1 {
			switch b[0] {
			case ndNeighborSolicit:
				return "nd-neighbor-solicit"
			case ndNeighborAdvert:
				return "nd-neighbor-advert"
			}
		}
		return num(b)
	}
	type key struct {
		base     expr.PayloadBase
		proto    byte
		off, len uint32
	}
	nh, th := expr.PayloadBaseNetworkHeader, expr.PayloadBaseTransportHeader
	fields := map[key]struct {
		name  string
		value func([]byte) string
	}{
		{nh, unix.NFPROTO_IPV4, ip4SaddrOff, 4}:  {"ip saddr", addr},
		{nh, unix.NFPROTO_IPV4, ip4DaddrOff, 4}:  {"ip daddr", addr},
		{nh, unix.NFPROTO_IPV6, ip6SaddrOff, 16}: {"ip6 saddr", addr},
		{nh, unix.NFPROTO_IPV6, ip6DaddrOff, 16}: {"ip6 daddr", addr},
		{nh, unix.NFPROTO_IPV6, ip6HopOff, 1}:    {"ip6 hoplimit", num},
		{th, unix.IPPROTO_TCP, 0, 2}:             {"tcp sport", num},
		{th, unix.IPPROTO_TCP, 2, 2}:             {"tcp dport", num},
		{th, unix.IPPROTO_UDP, 0, 2}:             {"udp sport", num},
		{th, unix.IPPROTO_UDP, 2, 2}:             {"udp dport", num},
		{th, unix.IPPROTO_ICMPV6, 0, 1}:          {"icmpv6 type", icmp6Type},
	}
	dep := family
	if p.Base == th {
		dep = l4
	}
	if f, ok := fields[key{p.Base, dep, p.Offset, p.Len}]; ok {
		return f.name, f.value
	}
	base := map[expr.PayloadBase]string{expr.PayloadBaseLLHeader: "@ll", nh: "@nh", th: "@th"}[p.Base]
	if base == "" {
		base = fmt.Sprintf("@base%d", p.Base)
	}
	return fmt.Sprintf("%s,%d,%d", base, p.Offset*8, p.Len*8), rawValue
}
