//go:build linux

package nft

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Root-only system tests. Each acts in a fresh namespace of its own (newNS);
// none touches the test process's namespace, and TestMain checks that.

func TestNamespaceZeroRefused(t *testing.T) {
	t.Parallel()
	// No root needed: the fd is refused before any netlink socket exists.
	if err := Apply(0, goldenSpecs["gateway"]); err == nil || !strings.Contains(err.Error(), "namespace fd 0") {
		t.Fatalf("Apply(0, ...): got %v, want a refusal of namespace fd 0", err)
	}
	if _, err := Check(0, goldenSpecs["gateway"]); err == nil {
		t.Fatal("Check(0, ...): got nil error, want a refusal")
	}
}

func TestSystemApplyCheckDown(t *testing.T) {
	t.Parallel()
	ns, _ := newNS(t)
	s := goldenSpecs["full"]

	if d, err := Check(ns, s); err != nil || len(d) != 1 || d[0] != "table inet egressd_full: missing" {
		t.Fatalf("Check before Apply: got %q, %v; want [table inet egressd_full: missing]", d, err)
	}
	if err := Apply(ns, s); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if d, err := Check(ns, s); err != nil || len(d) != 0 {
		t.Fatalf("Check after Apply: got %q, %v; want no drift", d, err)
	}
	first, err := Show(ns, s.Table)
	if err != nil {
		t.Fatalf("Show: %v", err)
	}

	// Idempotent: a second Apply leaves the same table, no duplicates.
	if err := Apply(ns, s); err != nil {
		t.Fatalf("second Apply: %v", err)
	}
	if d, err := Check(ns, s); err != nil || len(d) != 0 {
		t.Fatalf("Check after second Apply: got %q, %v; want no drift", d, err)
	}
	second, err := Show(ns, s.Table)
	if err != nil {
		t.Fatalf("Show: %v", err)
	}
	if first != second {
		t.Errorf("Show after second Apply differs:\nfirst:\n%s\nsecond:\n%s", first, second)
	}
	c, err := nftables.New(nftables.WithNetNSFd(ns))
	if err != nil {
		t.Fatal(err)
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil || len(tables) != 1 {
		t.Fatalf("tables after two Applies: got %d (%v), want 1", len(tables), err)
	}

	// Show is the golden rendering plus counter figures (all zero here).
	golden, err := os.ReadFile(filepath.Join("testdata", "full.golden"))
	if err != nil {
		t.Fatal(err)
	}
	zeroed := regexp.MustCompile(` packets 0 bytes 0`).ReplaceAllString(second, "")
	if zeroed != string(golden) {
		t.Errorf("Show (counts removed) differs from testdata/full.golden:\ngot:\n%s\nwant:\n%s", zeroed, golden)
	}

	ctrs, err := Counters(ns, s.Table)
	if err != nil {
		t.Fatalf("Counters: %v", err)
	}
	for _, n := range []string{CounterDropHighRisk, CounterDropSpoofed, CounterDropInput, CounterDropForward, CounterDropOutputUID,
		CounterAcceptProxy, CounterAcceptDNS, CounterAcceptExtra, CounterAcceptND} {
		if _, ok := ctrs[n]; !ok {
			t.Errorf("Counters: no %q in %v", n, ctrs)
		}
	}

	if err := Down(ns, s.Table); err != nil {
		t.Fatalf("Down: %v", err)
	}
	if d, err := Check(ns, s); err != nil || len(d) != 1 {
		t.Fatalf("Check after Down: got %q, %v; want the table missing", d, err)
	}
	if err := Down(ns, s.Table); !errors.Is(err, ErrNoTable) {
		t.Fatalf("second Down: got %v, want ErrNoTable", err)
	}
	if _, err := Show(ns, s.Table); !errors.Is(err, ErrNoTable) {
		t.Fatalf("Show after Down: got %v, want ErrNoTable", err)
	}
}

// TestSystemApplyReplacesChangedSpec checks that a replace removes what the
// old spec had and the new one does not.
func TestSystemApplyReplacesChangedSpec(t *testing.T) {
	t.Parallel()
	ns, _ := newNS(t)
	s := goldenSpecs["full"]
	if err := Apply(ns, s); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	smaller := goldenSpecs["v4-no-dns"]
	smaller.Table = s.Table
	if err := Apply(ns, smaller); err != nil {
		t.Fatalf("Apply smaller spec: %v", err)
	}
	if d, err := Check(ns, smaller); err != nil || len(d) != 0 {
		t.Fatalf("Check smaller spec: got %q, %v; want no drift", d, err)
	}
	d, err := Check(ns, s)
	if err != nil || len(d) == 0 {
		t.Fatalf("Check old spec after replace: got %q, %v; want drift", d, err)
	}
}

// TestSystemFailedApplyKeepsOldTable sends a replace batch that the kernel
// rejects (its last rule names a missing set) and checks that the old table
// is still there, whole: a failed Apply never leaves a half-built wall or
// none.
func TestSystemFailedApplyKeepsOldTable(t *testing.T) {
	t.Parallel()
	ns, _ := newNS(t)
	old := goldenSpecs["gateway"]
	if err := Apply(ns, old); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	rs, err := build(goldenSpecs["v4-no-dns"])
	if err != nil {
		t.Fatal(err)
	}
	c, err := dial(ns, rs.batchSize())
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseLasting()
	if err := rs.queue(c); err != nil {
		t.Fatal(err)
	}
	c.AddRule(&nftables.Rule{Table: rs.table, Chain: rs.chains[0].chain, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Lookup{SourceRegister: 1, SetName: "no_such_set"},
	}})
	if err := c.Flush(); err == nil {
		t.Fatal("Flush of a batch with a rule naming a missing set: got nil, want an error")
	} else {
		t.Logf("kernel rejected the batch: %v", err)
	}
	if d, err := Check(ns, old); err != nil || len(d) != 0 {
		t.Fatalf("Check of the old spec after a failed replace: got %q, %v; want no drift", d, err)
	}
}

// TestSystemGoldenNFT compares the nft CLI's listing of the applied table
// with testdata/NAME.nft: the kernel holds what nft itself would print for
// the intended ruleset.
func TestSystemGoldenNFT(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"gateway", "full"} {
		t.Run(name, func(t *testing.T) {
			ns, nsName := newNS(t)
			s := goldenSpecs[name]
			if err := Apply(ns, s); err != nil {
				t.Fatalf("Apply: %v", err)
			}
			got := nftCLI(t, nsName, "list", "table", "inet", s.TableName())
			path := filepath.Join("testdata", name+".nft")
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
				t.Errorf("nft list table differs from %s:\ngot:\n%s\nwant:\n%s", path, got, want)
			}

			// Independent of the golden file: nft's reading of each rule
			// in the kernel is word for word describeRule's.
			show, err := Show(ns, s.TableName())
			if err != nil {
				t.Fatalf("Show: %v", err)
			}
			if gotRules, wantRules := ruleLines(got), ruleLines(show); strings.Join(gotRules, "\n") != strings.Join(wantRules, "\n") {
				t.Errorf("rules as nft reads them:\n%s\nrules as Show reads them:\n%s", strings.Join(gotRules, "\n"), strings.Join(wantRules, "\n"))
			}
		})
	}
}

// ruleLines returns the rule lines of a listing: lines ending in a verdict.
func ruleLines(listing string) []string {
	var out []string
	for _, l := range strings.Split(listing, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasSuffix(l, " accept") && !strings.Contains(l, "policy") || strings.HasSuffix(l, " drop") || strings.Contains(l, " jump ") || strings.Contains(l, " reject") {
			out = append(out, l)
		}
	}
	return out
}

// tamper is a change made behind egressd's back with the raw nftables API.
type tamper struct {
	name string
	do   func(t *testing.T, c *nftables.Conn, tbl *nftables.Table, nsName string)
	want []string // Check's report, exactly
}

func findRule(t *testing.T, c *nftables.Conn, tbl *nftables.Table, chain, text string) *nftables.Rule {
	t.Helper()
	rules, err := c.GetRules(tbl, &nftables.Chain{Name: chain, Table: tbl})
	if err != nil {
		t.Fatalf("GetRules %s: %v", chain, err)
	}
	for _, r := range rules {
		if describeRule(r.Exprs, false) == text {
			return r
		}
	}
	t.Fatalf("chain %s: no rule %q", chain, text)
	return nil
}

const fwdRefusal = `counter counter name "drop_fwd" reject with icmpx admin-prohibited`

var tampers = []tamper{
	{
		name: "forward refusal deleted",
		do: func(t *testing.T, c *nftables.Conn, tbl *nftables.Table, _ string) {
			if err := c.DelRule(findRule(t, c, tbl, chainSbxFwd, fwdRefusal)); err != nil {
				t.Fatal(err)
			}
		},
		want: []string{`chain sbx_fwd: missing rule ` + fwdRefusal},
	},
	{
		// A reset reads as "the target answered" to every probe: not the
		// wall's answer, so drift.
		name: "forward refusal turned into a TCP reset",
		do: func(t *testing.T, c *nftables.Conn, tbl *nftables.Table, _ string) {
			r := findRule(t, c, tbl, chainSbxFwd, fwdRefusal)
			r.Exprs[len(r.Exprs)-1] = &expr.Reject{Type: unix.NFT_REJECT_TCP_RST}
			c.ReplaceRule(r)
		},
		want: []string{`chain sbx_fwd: missing rule ` + fwdRefusal, `chain sbx_fwd: unexpected rule counter counter name "drop_fwd" reject with tcp reset`},
	},
	{
		name: "accept inserted ahead of the classifier",
		do: func(t *testing.T, c *nftables.Conn, tbl *nftables.Table, _ string) {
			c.InsertRule(&nftables.Rule{Table: tbl, Chain: &nftables.Chain{Name: chainForward, Table: tbl},
				Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}})
		},
		want: []string{"chain forward: unexpected rule accept"},
	},
	{
		name: "high-risk element deleted",
		do: func(t *testing.T, c *nftables.Conn, tbl *nftables.Table, _ string) {
			set := &nftables.Set{Table: tbl, Name: setHR4, KeyType: nftables.TypeIPAddr, Interval: true}
			k := func(s string) []byte { return netip.MustParseAddr(s).AsSlice() }
			if err := c.SetDeleteElements(set, []nftables.SetElement{
				{Key: k("169.254.169.254")}, {Key: k("169.254.169.255"), IntervalEnd: true},
			}); err != nil {
				t.Fatal(err)
			}
		},
		want: []string{"set highrisk4: missing element 169.254.169.254"},
	},
	{
		name: "input policy changed to drop",
		do: func(t *testing.T, c *nftables.Conn, tbl *nftables.Table, _ string) {
			ch := baseChain(tbl, chainInput, nftables.ChainHookInput)
			p := nftables.ChainPolicyDrop
			ch.Policy = &p
			c.AddChain(ch)
		},
		want: []string{`chain input: got "type filter hook input priority -10 policy drop", want "type filter hook input priority -10 policy accept"`},
	},
	{
		name: "table deleted",
		do: func(t *testing.T, c *nftables.Conn, tbl *nftables.Table, _ string) {
			c.DelTable(tbl)
		},
		want: []string{"table inet egressd: missing"},
	},
	{
		name: "table made dormant",
		do: func(t *testing.T, _ *nftables.Conn, _ *nftables.Table, nsName string) {
			nftCLI(t, nsName, "add", "table", "inet", "egressd", "{", "flags", "dormant", ";", "}")
		},
		want: []string{"table inet egressd: flags 0x1, want 0x0 (dormant: every chain is off)"},
	},
}

// TestSystemDriftRepair tampers with the table, checks that Check names
// exactly the change, and that Ensure repairs it.
func TestSystemDriftRepair(t *testing.T) {
	t.Parallel()
	s := goldenSpecs["gateway"]
	for _, tc := range tampers {
		t.Run(tc.name, func(t *testing.T) {
			ns, nsName := newNS(t)
			if err := Apply(ns, s); err != nil {
				t.Fatalf("Apply: %v", err)
			}
			c, err := nftables.New(nftables.WithNetNSFd(ns))
			if err != nil {
				t.Fatal(err)
			}
			tbl := &nftables.Table{Family: nftables.TableFamilyINet, Name: s.TableName()}
			tc.do(t, c, tbl, nsName)
			if err := c.Flush(); err != nil {
				t.Fatalf("tamper: %v", err)
			}

			d, err := Check(ns, s)
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			if strings.Join(d, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("Check after tamper:\ngot  %q\nwant %q", d, tc.want)
			}
			repaired, err := Ensure(ns, s)
			if err != nil || strings.Join(repaired, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("Ensure: got %q, %v; want the same drift and no error", repaired, err)
			}
			if d, err := Check(ns, s); err != nil || len(d) != 0 {
				t.Fatalf("Check after Ensure: got %q, %v; want no drift", d, err)
			}
			if d, err := Ensure(ns, s); err != nil || d != nil {
				t.Fatalf("Ensure when in sync: got %q, %v; want nothing done", d, err)
			}
		})
	}
}

// TestSystemWatch deletes the forward drop while Watch runs and waits for
// Watch to report and repair it.
func TestSystemWatch(t *testing.T) {
	t.Parallel()
	ns, _ := newNS(t)
	s := goldenSpecs["gateway"]
	if err := Apply(ns, s); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	type event struct {
		drift []string
		err   error
	}
	events := make(chan event, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Watch(ctx, ns, s, 20*time.Millisecond, func(d []string, err error) { events <- event{d, err} })
	}()
	defer func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Watch returned %v, want context.Canceled", err)
		}
	}()

	c, err := nftables.New(nftables.WithNetNSFd(ns))
	if err != nil {
		t.Fatal(err)
	}
	tbl := &nftables.Table{Family: nftables.TableFamilyINet, Name: s.TableName()}
	if err := c.DelRule(findRule(t, c, tbl, chainSbxFwd, fwdRefusal)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-events:
		want := `chain sbx_fwd: missing rule ` + fwdRefusal
		if ev.err != nil || len(ev.drift) != 1 || ev.drift[0] != want {
			t.Fatalf("Watch reported %q, %v; want [%s] repaired", ev.drift, ev.err, want)
		}
		t.Logf("drift reported and repaired %v after the tamper", time.Since(start).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Fatal("Watch did not report the deleted rule within 5s")
	}
	if d, err := Check(ns, s); err != nil || len(d) != 0 {
		t.Fatalf("Check after Watch repair: got %q, %v; want no drift", d, err)
	}
}

// scaleSpec is the gateway spec with n IPv4 and n IPv6 source CIDRs, with
// gaps between them so that none merge.
func scaleSpec(n int) Spec {
	s := goldenSpecs["gateway"]
	s.SourceCIDRs = nil
	for i := range n {
		s.SourceCIDRs = append(s.SourceCIDRs,
			netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 0}), 25),
			netip.PrefixFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0xff, 0, byte(i >> 7), byte(i << 1)}), 64))
	}
	return s
}

// TestSystemScale applies a spec with 10,000 IPv4 and 10,000 IPv6 source
// CIDRs and logs the times of create, replace and check.
func TestSystemScale(t *testing.T) {
	t.Parallel()
	ns, _ := newNS(t)
	timed := func(what string, f func() error) {
		t.Helper()
		start := time.Now()
		if err := f(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		t.Logf("%-40s %v", what, time.Since(start).Round(10*time.Microsecond))
	}
	small := goldenSpecs["gateway"]
	timed("apply gateway table (create)", func() error { return Apply(ns, small) })
	timed("apply gateway table (replace)", func() error { return Apply(ns, small) })
	timed("check gateway table", func() error { return checkClean(ns, small) })

	big := scaleSpec(10000)
	timed("apply 10k+10k CIDRs (replace small)", func() error { return Apply(ns, big) })
	timed("apply 10k+10k CIDRs (replace same)", func() error { return Apply(ns, big) })
	timed("check 10k+10k CIDRs", func() error { return checkClean(ns, big) })
	changed := scaleSpec(9999)
	timed("apply 9,999+9,999 CIDRs (replace)", func() error { return Apply(ns, changed) })
	d, err := Check(ns, big)
	if err != nil || len(d) != 2 {
		t.Fatalf("Check of 10k spec against 9,999 table: got %d lines %q, %v; want 2", len(d), d, err)
	}
}

func checkClean(ns int, s Spec) error {
	d, err := Check(ns, s)
	if err == nil && len(d) > 0 {
		err = errors.New("drift: " + strings.Join(d, "; "))
	}
	return err
}

func BenchmarkApply(b *testing.B) {
	for _, bc := range []struct {
		name string
		spec Spec
	}{{"gateway", goldenSpecs["gateway"]}, {"10k", scaleSpec(10000)}} {
		b.Run(bc.name, func(b *testing.B) {
			ns, _ := newNS(b)
			for b.Loop() {
				if err := Apply(ns, bc.spec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestSystemRedirect: transparent-mode redirects install, read back
// without drift (the kernel reports the NAT flags we send), and a removed
// redirect rule is seen as drift.
func TestSystemRedirect(t *testing.T) {
	t.Parallel()
	ns, _ := newNS(t)
	s := Spec{
		Table:      "egressd_redirect",
		IfPrefixes: []string{"egsbx"},
		Gateways:   []netip.Addr{netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("2001:db8:1::1")},
		ProxyPort:  3128, DNSPort: 53,
		Redirects: []Redirect{{From: 443, To: 3129}, {From: 80, To: 3130}},
		HighRisk:  []netip.Prefix{netip.MustParsePrefix("169.254.169.254/32")},
	}
	if err := Apply(ns, s); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if d, err := Check(ns, s); err != nil || len(d) != 0 {
		t.Fatalf("Check after Apply: %q, %v; want no drift", d, err)
	}
	text, err := Show(ns, s.Table)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"type nat hook prerouting priority -100", "counter name \"redirect\" redirect to :3129", "tcp dport 3129"} {
		if !strings.Contains(text, want) {
			t.Errorf("Show lacks %q:\n%s", want, text)
		}
	}
	without := s
	without.Redirects = s.Redirects[:1]
	if d, _ := Check(ns, without); len(d) == 0 {
		t.Errorf("Check with one redirect fewer: no drift reported")
	}
}
