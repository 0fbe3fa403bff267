//go:build linux

package nft

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// refusalText is the walls' refusal as describeRule and nft write it.
const refusalText = "reject with icmpx admin-prohibited"

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// goldenSpecs are the specs whose rendering is pinned in testdata/NAME.golden.
var goldenSpecs = map[string]Spec{
	// The test topology's gateway: one veth prefix, v4 and v6.
	"gateway": {
		IfPrefixes: []string{"egsbx"},
		Gateways:   addrs("198.51.100.1", "2001:db8:1::1"),
		ProxyPort:  3128,
		DNSPort:    53,
		HighRisk:   pfx("169.254.169.254/32", "169.254.170.2/32", "fd00:ec2::254/128"),
	},
	// Everything at once, with overlapping and adjacent CIDRs to merge and
	// a high-risk range that runs to the last IPv4 address.
	"full": {
		Table:       "egressd_full",
		IfPrefixes:  []string{"egsbx", "veth"},
		SourceCIDRs: pfx("198.51.100.0/25", "198.51.100.128/25", "10.0.0.0/8", "10.1.0.0/16", "2001:db8:1::/64"),
		UIDs:        []uint32{1001, 1000},
		Gateways:    addrs("198.51.100.1", "2001:db8:1::1"),
		ProxyPort:   3128,
		DNSPort:     53,
		ExtraPorts:  []uint16{8443, 8080},
		HighRisk:    pfx("169.254.0.0/16", "240.0.0.0/4", "100.100.100.200/32", "fd00:ec2::/64"),
	},
	// Local-user sandboxes only: no input or forward chains.
	"uid-only": {
		UIDs:      []uint32{1500},
		Gateways:  addrs("127.0.0.1"),
		ProxyPort: 3128,
	},
	// IPv4 only, no DNS, no high-risk list: no IPv6 accepts, no ND.
	"v4-no-dns": {
		IfPrefixes: []string{"egsbx"},
		Gateways:   addrs("198.51.100.1"),
		ProxyPort:  3128,
	},
}

func TestRenderGolden(t *testing.T) {
	t.Parallel()
	for name, s := range goldenSpecs {
		t.Run(name, func(t *testing.T) {
			rs, err := build(s)
			if err != nil {
				t.Fatalf("build: %v", err)
			}
			got := stateOf(rs).format(false, 0)
			path := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("read golden (run with -update to create): %v", err)
			}
			if got != string(want) {
				t.Errorf("rendering of %s differs from %s:\ngot:\n%s\nwant:\n%s", name, path, got, want)
			}
		})
	}
}

// TestRenderInvariants checks properties that must hold for any spec, so that
// an accidental golden update cannot bless a hole.
func TestRenderInvariants(t *testing.T) {
	t.Parallel()
	for name, s := range goldenSpecs {
		t.Run(name, func(t *testing.T) {
			rs, err := build(s)
			if err != nil {
				t.Fatalf("build: %v", err)
			}
			st := stateOf(rs)
			for _, c := range st.chains {
				if c.header != "" {
					if !strings.Contains(c.header, "priority -10 policy accept") {
						t.Errorf("chain %s: got header %q, want priority -10 and policy accept", c.name, c.header)
					}
					for _, r := range c.rules {
						if !strings.HasSuffix(r.text, " jump sbx_in") && !strings.HasSuffix(r.text, " jump sbx_fwd") &&
							!strings.HasSuffix(r.text, " jump sbx_out") && r.text != `iifname "lo" counter accept` {
							t.Errorf("base chain %s: unexpected rule %q", c.name, r.text)
						}
					}
					continue
				}
				// A sandbox chain: ends in a counted refusal, and
				// high-risk rules come before every accept. Every refusal
				// follows a drop of forged sources (the rule before it
				// with the same match, or the chain's spoof drop): an
				// ICMP error goes to the source.
				last := c.rules[len(c.rules)-1].text
				if !strings.HasPrefix(last, "counter counter name \"drop_") || !strings.HasSuffix(last, " "+refusalText) {
					t.Errorf("chain %s: last rule %q, want an unconditional counted refusal", c.name, last)
				}
				seenAccept, spoofDropped := false, false
				for i, r := range c.rules {
					if r.text == `fib saddr . iif oif missing counter counter name "drop_spoofed" drop` {
						spoofDropped = true
					}
					if m, ok := strings.CutSuffix(r.text, " "+refusalText); ok && !spoofDropped {
						m, _, _ = strings.Cut(m, "counter counter name")
						m = strings.TrimSpace(m)
						guard := "fib saddr . iif oif missing"
						if c.name == chainSbxOut {
							guard = "fib saddr type != local"
						}
						if prev := c.rules[max(i-1, 0)].text; m == "" && !strings.HasPrefix(prev, guard+" ") || m != "" && !strings.HasPrefix(prev, m+" "+guard+" ") || !strings.HasSuffix(prev, " drop") {
							t.Errorf("chain %s: refusal %q without a drop of forged sources before it (got %q)", c.name, r.text, prev)
						}
					}
					if strings.HasSuffix(r.text, " accept") {
						seenAccept = true
					}
					if strings.Contains(r.text, "@highrisk") && seenAccept {
						t.Errorf("chain %s: high-risk rule %q after an accept", c.name, r.text)
					}
					if c.name == chainSbxFwd && strings.HasSuffix(r.text, " accept") {
						t.Errorf("chain %s: forward accepts %q", c.name, r.text)
					}
				}
			}
		})
	}
}

func TestDescribeRule(t *testing.T) {
	t.Parallel()
	set := &nftables.Set{Name: "gw4", ID: 1}
	tests := []struct {
		name  string
		exprs []expr.Any
		want  string
	}{
		{"rendered accept", cat(addrMatch(false, false, set), dport(unix.IPPROTO_TCP, 3128),
			[]expr.Any{&expr.Counter{Packets: 2, Bytes: 120}, &expr.Objref{Type: 1, Name: "accept_proxy"}, verdict(expr.VerdictAccept)}),
			`ip daddr @gw4 tcp dport 3128 counter counter name "accept_proxy" accept`},
		{"ifname prefix and exact", cat(ifname(expr.MetaKeyIIFNAME, "egsbx", true), ifname(expr.MetaKeyOIFNAME, "lo", false)),
			`iifname "egsbx*" oifname "lo"`},
		{"nd", ndMatch(ndNeighborSolicit), `ip6 hoplimit 255 icmpv6 type nd-neighbor-solicit`},
		{"reverse path", reversePathMissing(), `fib saddr . iif oif missing`},
		// any other fib is not the reverse-path check: it must not read like it
		{"other fib", []expr.Any{&expr.Fib{Register: 1, FlagDADDR: true, FlagIIF: true, ResultOIF: true, FlagPRESENT: true}, reversePathMissing()[1]},
			`[*expr.Fib &{Register:1 ResultOIF:true ResultOIFNAME:false ResultADDRTYPE:false FlagSADDR:false FlagDADDR:true FlagMARK:false FlagIIF:true FlagOIF:false FlagPRESENT:true}] [*expr.Cmp &{Op:0 Register:1 Data:[0 0 0 0]}]`},
		// Without its nfproto dependency the same offset matches IPv6
		// bytes too: it must not read like the rendered rule.
		{"address without nfproto", addrMatch(false, false, set)[2:], `@nh,128,32 @gw4`},
		{"port without l4proto", dport(unix.IPPROTO_TCP, 3128)[2:], `@th,16,16 0x0c38`},
		{"wrong family for offset", cat(addrMatch(false, false, set)[:2], addrMatch(true, false, set)[2:]), `@nh,192,128 @gw4`},
		{"nfproto on its own", addrMatch(true, false, set)[:2], `meta nfproto ipv6`},
		{"inverted lookup", []expr.Any{
			&expr.Meta{Key: expr.MetaKeySKUID, Register: 1},
			&expr.Lookup{SourceRegister: 1, SetName: "uids", Invert: true},
		}, `meta skuid != @uids`},
		{"register mismatch", []expr.Any{
			&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 2, Data: []byte("egsbx")},
		}, `[*expr.Meta &{Key:6 SourceRegister:false Register:1}] [*expr.Cmp &{Op:0 Register:2 Data:[101 103 115 98 120]}]`},
		{"unknown expression", []expr.Any{&expr.Ct{Register: 1, Key: expr.CtKeySTATE}, jump("x")},
			`[*expr.Ct &{Register:1 SourceRegister:false Key:0 Direction:0}] jump x`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := describeRule(tt.exprs, false); got != tt.want {
				t.Errorf("describeRule: got %q, want %q", got, tt.want)
			}
		})
	}
	withCounts := describeRule([]expr.Any{&expr.Counter{Packets: 2, Bytes: 120}, verdict(expr.VerdictDrop)}, true)
	if want := "counter packets 2 bytes 120 drop"; withCounts != want {
		t.Errorf("describeRule with counts: got %q, want %q", withCounts, want)
	}
}

func TestIntervals(t *testing.T) {
	t.Parallel()
	k := func(s string) []byte { return netip.MustParseAddr(s).AsSlice() }
	tests := []struct {
		name  string
		elems []nftables.SetElement
		want  string
	}{
		{"pair", []nftables.SetElement{{Key: k("10.0.0.0")}, {Key: k("11.0.0.0"), IntervalEnd: true}}, "10.0.0.0/8"},
		{"reverse order as dumped", []nftables.SetElement{{Key: k("11.0.0.0"), IntervalEnd: true}, {Key: k("10.0.0.0")}}, "10.0.0.0/8"},
		{"nft zero end marker", []nftables.SetElement{{Key: k("0.0.0.0"), IntervalEnd: true}, {Key: k("10.0.0.0")}, {Key: k("11.0.0.0"), IntervalEnd: true}}, "10.0.0.0/8"},
		{"open end", []nftables.SetElement{{Key: k("240.0.0.0")}}, "240.0.0.0/4"},
		{"touching ranges", []nftables.SetElement{{Key: k("10.0.0.0")}, {Key: k("10.0.0.128"), IntervalEnd: true}, {Key: k("10.0.0.128")}, {Key: k("10.0.1.0"), IntervalEnd: true}},
			"10.0.0.0/25 10.0.0.128/25"},
		{"two starts", []nftables.SetElement{{Key: k("10.0.0.0")}, {Key: k("10.0.0.64")}, {Key: k("10.0.1.0"), IntervalEnd: true}}, "10.0.0.0/24"},
		{"ipv6 host", []nftables.SetElement{{Key: k("fd00:ec2::254")}, {Key: k("fd00:ec2::255"), IntervalEnd: true}}, "fd00:ec2::254"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, r := range intervals(tt.elems, len(tt.elems[0].Key) == 16) {
				got = append(got, r.String())
			}
			if g := strings.Join(got, " "); g != tt.want {
				t.Errorf("intervals: got %q, want %q", g, tt.want)
			}
		})
	}
}

func TestDiff(t *testing.T) {
	t.Parallel()
	rs, err := build(goldenSpecs["gateway"])
	if err != nil {
		t.Fatal(err)
	}
	want := stateOf(rs)
	tests := []struct {
		name   string
		tamper func(st *state)
		want   []string
	}{
		{"in sync", func(*state) {}, nil},
		{"dormant", func(st *state) { st.flags = unix.NFT_TABLE_F_DORMANT },
			[]string{"table inet egressd: flags 0x1, want 0x0 (dormant: every chain is off)"}},
		{"rule removed", func(st *state) { st.chains[3].rules = st.chains[3].rules[2:] }, []string{
			`chain sbx_fwd: missing rule ip daddr @highrisk4 fib saddr . iif oif missing counter counter name "drop_highrisk" drop`,
			`chain sbx_fwd: missing rule ip daddr @highrisk4 counter counter name "drop_highrisk" reject with icmpx admin-prohibited`,
		}},
		{"accept inserted", func(st *state) {
			st.chains[2].rules = append([]ruleState{{text: "accept"}}, st.chains[2].rules...)
		}, []string{"chain forward: unexpected rule accept"}},
		{"order", func(st *state) {
			r := st.chains[3].rules
			r[0], r[2] = r[2], r[0]
		}, []string{`chain sbx_fwd: rules out of order: got ["ip6 daddr @highrisk6 fib saddr . iif oif missing counter counter name \"drop_highrisk\" drop" "ip daddr @highrisk4 counter counter name \"drop_highrisk\" reject with icmpx admin-prohibited" "ip daddr @highrisk4 fib saddr . iif oif missing counter counter name \"drop_highrisk\" drop" "ip6 daddr @highrisk6 counter counter name \"drop_highrisk\" reject with icmpx admin-prohibited" "fib saddr . iif oif missing counter counter name \"drop_spoofed\" drop" "counter counter name \"drop_fwd\" reject with icmpx admin-prohibited"]`}},
		{"policy", func(st *state) {
			st.chains[0].header = strings.Replace(st.chains[0].header, "accept", "drop", 1)
		}, []string{`chain input: got "type filter hook input priority -10 policy drop", want "type filter hook input priority -10 policy accept"`}},
		{"chain gone and one added", func(st *state) { st.chains = append(st.chains[1:], chainState{name: "evil"}) },
			[]string{"chain input: missing", "chain evil: unexpected (0 rules)"}},
		{"element swapped", func(st *state) { st.sets[0].elems = []string{"169.254.169.254", "169.254.170.3"} },
			[]string{"set highrisk4: missing element 169.254.170.2", "set highrisk4: unexpected element 169.254.170.3"}},
		{"set gone", func(st *state) { st.sets = st.sets[2:] }, []string{"set highrisk4: missing", "set highrisk6: missing"}},
		{"counter gone", func(st *state) { st.counters = st.counters[1:] }, []string{"table inet egressd: missing counter accept_dns"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := stateOf(rs)
			tt.tamper(got)
			d := diff(want, got)
			if strings.Join(d, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("diff:\ngot  %q\nwant %q", d, tt.want)
			}
		})
	}
	if d := diff(want, nil); len(d) != 1 || d[0] != "table inet egressd: missing" {
		t.Errorf("diff with no table: got %q, want [table inet egressd: missing]", d)
	}
}

func TestDiffCapsElements(t *testing.T) {
	t.Parallel()
	var many []string
	for i := range 25 {
		many = append(many, fmt.Sprintf("10.0.%d.0/24", i))
	}
	d := diffList("set src4", "element", many, nil)
	if len(d) != maxListed+1 || d[maxListed] != "set src4: 15 more missing elements" {
		t.Errorf("diffList of 25 missing: got %d lines ending %q, want %d ending with a count of 15 more", len(d), d[len(d)-1], maxListed+1)
	}
}

// recorder captures netlink messages without a kernel (no root needed).
type recorder struct{ msgs []netlink.Message }

func (r *recorder) conn(t *testing.T) *nftables.Conn {
	c, err := nftables.New(nftables.WithTestDial(func(req []netlink.Message) ([]netlink.Message, error) {
		r.msgs = append(r.msgs, req...)
		var acks []netlink.Message
		for _, m := range req {
			if m.Header.Flags&netlink.Acknowledge != 0 {
				acks = append(acks, netlink.Message{
					Header: netlink.Header{Type: netlink.Error, Sequence: m.Header.Sequence, PID: m.Header.PID},
					Data:   []byte{0, 0, 0, 0},
				})
			}
		}
		return acks, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestBatch checks the message sequence of a replace: one batch that adds,
// deletes and re-adds the table before anything else, with large sets split
// into element messages that fit a 16-bit attribute length.
func TestBatch(t *testing.T) {
	t.Parallel()
	s := goldenSpecs["gateway"]
	for i := range 10000 {
		// 10,000 disjoint /25s: the merge keeps them apart.
		s.SourceCIDRs = append(s.SourceCIDRs, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 0}), 25))
	}
	rs, err := build(s)
	if err != nil {
		t.Fatal(err)
	}
	var rec recorder
	c := rec.conn(t)
	if err := rs.queue(c); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}

	name := func(m netlink.Message) string {
		switch m.Header.Type {
		case netlink.HeaderType(unix.NFNL_MSG_BATCH_BEGIN):
			return "begin"
		case netlink.HeaderType(unix.NFNL_MSG_BATCH_END):
			return "end"
		}
		return map[int]string{
			unix.NFT_MSG_NEWTABLE: "newtable", unix.NFT_MSG_DELTABLE: "deltable", unix.NFT_MSG_NEWOBJ: "newobj",
			unix.NFT_MSG_NEWSET: "newset", unix.NFT_MSG_NEWSETELEM: "newsetelem", unix.NFT_MSG_NEWCHAIN: "newchain",
			unix.NFT_MSG_NEWRULE: "newrule",
		}[int(m.Header.Type)&0xff]
	}
	var seq []string
	elemMsgs := 0
	for _, m := range rec.msgs {
		n := name(m)
		if n == "newsetelem" {
			elemMsgs++
			if len(m.Data) > 0xffff {
				t.Errorf("element message of %d bytes: an attribute cannot hold more than 65535", len(m.Data))
			}
		}
		if len(seq) == 0 || seq[len(seq)-1] != n {
			seq = append(seq, n)
		}
	}
	wantSeq := "begin newtable deltable newtable newobj newset newsetelem newset newsetelem newset newsetelem newchain newrule end"
	if got := strings.Join(seq, " "); got != wantSeq {
		t.Errorf("message sequence:\ngot  %s\nwant %s", got, wantSeq)
	}
	// src4 holds 20,000 elements (start and end per /25): 20 chunks, plus
	// one message for each of the other two sets (the high-risk ones; the
	// gateways are matched inline).
	if want := 20000/setChunk + 1 + 2; elemMsgs != want {
		t.Errorf("element messages: got %d, want %d", elemMsgs, want)
	}
	if got, want := rs.batchSize(), 20000*64; got < want {
		t.Errorf("batchSize: got %d, want at least %d", got, want)
	}
}

func TestUIDSetByteOrder(t *testing.T) {
	t.Parallel()
	rs, err := build(goldenSpecs["uid-only"])
	if err != nil {
		t.Fatal(err)
	}
	for _, sd := range rs.sets {
		if sd.set.Name == setUIDs {
			if got := binaryutil.NativeEndian.Uint32(sd.elems[0].Key); got != 1500 {
				t.Errorf("uid element: got %d, want 1500 in host byte order (meta skuid loads host order)", got)
			}
			return
		}
	}
	t.Fatal("no uids set rendered")
}
