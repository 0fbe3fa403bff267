//go:build linux

package nft

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
)

// TryOn puts cand's walls on the interface iface (an exact name: the
// self-test's probe link) beside table inet <table> in namespace ns, which
// stays in force for every other interface; see the package's trial notes
// (trial.go). Only the walls of link sandboxes are tried: cand's source
// addresses and uids select nobody in the trial table. A trial already
// there is replaced. One transaction: the kernel holds the trial or none.
func TryOn(ns int, table string, cand Spec, iface string) error {
	if table == "" {
		table = DefaultTable
	}
	if err := validIface(iface); err != nil {
		return fmt.Errorf("nft: trial interface: %w", err)
	}
	rs, err := buildTrial(table, cand, iface)
	if err != nil {
		return fmt.Errorf("nft: invalid trial spec: %w", err)
	}
	c, err := dial(ns, rs.batchSize())
	if err != nil {
		return err
	}
	defer c.CloseLasting()
	chains, err := classifyingChains(c, table)
	if err != nil {
		return err
	}
	if len(chains) == 0 {
		return fmt.Errorf("nft: table inet %s has no input, forward or prerouting chain to keep the probe path out of: %w", table, ErrNoTable)
	}
	if err := queueEndTry(c, table); err != nil {
		return err
	}
	for _, ch := range chains {
		c.InsertRule(&nftables.Rule{Table: ch.Table, Chain: ch, Exprs: skipRule(iface), UserData: []byte(skipTag)})
	}
	if err := rs.queue(c); err != nil {
		return fmt.Errorf("nft: render table inet %s: %w", rs.table.Name, err)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nft: install trial table inet %s on %s: %w", rs.table.Name, iface, err)
	}
	return nil
}

// EndTry removes the trial of table inet <table> in namespace ns: the rules
// TryOn added to it and the trial table, in one transaction. The table in
// force is otherwise left as it is. No trial there: nothing to do.
func EndTry(ns int, table string) error {
	if table == "" {
		table = DefaultTable
	}
	c, err := dial(ns, 0)
	if err != nil {
		return err
	}
	defer c.CloseLasting()
	if err := queueEndTry(c, table); err != nil {
		return err
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nft: end the trial beside table inet %s: %w", table, err)
	}
	return nil
}

// Settle installs s as Apply does and removes any trial beside it, in one
// transaction: a tried candidate goes in force for every sandbox, and the
// trial table is gone with it.
func Settle(ns int, s Spec) error {
	return install(ns, s, func(c *nftables.Conn, rs *ruleset) {
		// the table in force is replaced whole: its trial rules go with it
		trial := &nftables.Table{Family: nftables.TableFamilyINet, Name: TrialTable(rs.table.Name)}
		c.AddTable(trial)
		c.DelTable(trial)
	})
}

// LeftTrial is the drift of a trial table beside table inet <table> in
// namespace ns, if one is there (TryOn without EndTry or Settle: egressd
// stopped during a reload).
func LeftTrial(ns int, table string) []string {
	trial := TrialTable(table)
	ts, err := Tables(ns, trial)
	if err != nil {
		return []string{"trial check failed: " + err.Error()}
	}
	if slices.Contains(ts, trial) {
		return []string{"table inet " + trial + ": a trial left beside the walls in force"}
	}
	return nil
}

// queueEndTry queues the removal of table's trial rules and trial table
// (the table added first, so that deleting it never fails for its absence).
func queueEndTry(c *nftables.Conn, table string) error {
	chains, err := classifyingChains(c, table)
	if err != nil {
		return err
	}
	for _, ch := range chains {
		rules, err := c.GetRules(ch.Table, ch)
		if err != nil {
			return fmt.Errorf("nft: read chain %s of table inet %s: %w", ch.Name, table, err)
		}
		for _, r := range rules {
			if bytes.Equal(r.UserData, []byte(skipTag)) {
				if err := c.DelRule(r); err != nil {
					return fmt.Errorf("nft: remove the trial rule from chain %s of table inet %s: %w", ch.Name, table, err)
				}
			}
		}
	}
	trial := &nftables.Table{Family: nftables.TableFamilyINet, Name: TrialTable(table)}
	c.AddTable(trial)
	c.DelTable(trial)
	return nil
}

// classifyingChains are the base chains of table inet <table> that send
// sandbox packets to a sandbox chain by interface or source: where a trial
// keeps the probe path out.
func classifyingChains(c *nftables.Conn, table string) ([]*nftables.Chain, error) {
	all, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, fmt.Errorf("nft: list chains: %w", err)
	}
	var out []*nftables.Chain
	for _, ch := range all {
		if ch.Table.Name == table && (ch.Name == chainInput || ch.Name == chainForward || ch.Name == chainNAT) {
			out = append(out, ch)
		}
	}
	return out, nil
}

// skipRule accepts the probe interface's packets in the table in force:
// the chain ends for them there, the trial table judges them.
func skipRule(iface string) []expr.Any {
	return append(ifname(expr.MetaKeyIIFNAME, iface, false), &expr.Counter{}, verdict(expr.VerdictAccept))
}

// buildTrial renders cand as the trial table beside table: its sandbox
// selector is iface alone, matched by its exact name.
func buildTrial(table string, cand Spec, iface string) (*ruleset, error) {
	cand.Table = TrialTable(table)
	cand.IfPrefixes, cand.SourceCIDRs, cand.UIDs = []string{iface}, nil, nil
	rs, err := build(cand)
	if err != nil {
		return nil, err
	}
	prefix, exact := []byte(iface), ifname(expr.MetaKeyIIFNAME, iface, false)[1].(*expr.Cmp).Data
	for _, cd := range rs.chains {
		for _, r := range cd.rules {
			for i, e := range r {
				if m, ok := e.(*expr.Meta); ok && m.Key == expr.MetaKeyIIFNAME && i+1 < len(r) {
					if cmp, ok := r[i+1].(*expr.Cmp); ok && bytes.Equal(cmp.Data, prefix) {
						r[i+1] = &expr.Cmp{Op: cmp.Op, Register: cmp.Register, Data: exact}
					}
				}
			}
		}
	}
	return rs, nil
}

// validIface accepts an interface name a trial can match exactly.
func validIface(n string) error {
	var errs []error
	Spec{IfPrefixes: []string{n}}.validateIfPrefixes(func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) })
	return errors.Join(errs...)
}
