package report

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/egressd/egressd/event"
	"github.com/egressd/egressd/honeytoken"
	"github.com/egressd/egressd/selftest"
)

// honeyKey groups honeytoken hits: who sent it, whose it was, what kind,
// where it appeared.
type honeyKey struct{ sender, owner, kind, where string }

type honeyCount struct {
	n           int
	first, last time.Time
}

// countHoney counts a decision or DNS query line refused for a honeytoken
// (alert lines repeat them and are not counted).
func (dl *DecisionLog) countHoney(d *event.Record) {
	if d.Honeytoken == "" || (d.Msg != event.Msg && d.Msg != event.DNSMsg) {
		return
	}
	k := honeyKey{d.Identity, d.HoneytokenOf, d.Honeytoken, d.HoneytokenWhere}
	c := dl.honey[k]
	if c == nil {
		c = &honeyCount{first: d.Time}
		dl.honey[k] = c
	}
	c.n++
	c.first, c.last = minTime(c.first, d.Time), maxTime(c.last, d.Time)
}

func minTime(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// HoneyHitRow is one group of honeytoken hits.
type HoneyHitRow struct {
	Identity string    `json:"identity"` // who sent it
	IssuedTo string    `json:"issued_to"`
	Kind     string    `json:"kind"`
	Where    string    `json:"where"`
	Count    int       `json:"count"`
	First    time.Time `json:"first"`
	Last     time.Time `json:"last"`
}

func honeyHitRows(dl *DecisionLog) []HoneyHitRow {
	if dl == nil {
		return nil
	}
	var out []HoneyHitRow
	for k, c := range dl.honey {
		out = append(out, HoneyHitRow{k.sender, k.owner, k.kind, k.where, c.n, c.first, c.last})
	}
	slices.SortFunc(out, func(a, b HoneyHitRow) int {
		return cmp.Or(strings.Compare(a.Identity, b.Identity), strings.Compare(a.IssuedTo, b.IssuedTo), strings.Compare(a.Kind, b.Kind), strings.Compare(a.Where, b.Where))
	})
	return out
}

// PlantedRow is what egressd placed in one identity's sandbox: kinds and
// variable names, never values.
type PlantedRow struct {
	Identity string   `json:"identity"`
	Kinds    []string `json:"kinds"`
	Names    []string `json:"names"`
	Sets     int      `json:"sets"` // sets issued (one per run or `honeytokens issue`)
	Last     string   `json:"last_issued"`
}

func plantedRows(ts []honeytoken.Token) []PlantedRow {
	by := map[string]*PlantedRow{}
	issued := map[string]map[time.Time]bool{}
	for _, t := range ts {
		r := by[t.Identity]
		if r == nil {
			r = &PlantedRow{Identity: t.Identity}
			by[t.Identity], issued[t.Identity] = r, map[time.Time]bool{}
		}
		if !slices.Contains(r.Kinds, string(t.Kind)) {
			r.Kinds = append(r.Kinds, string(t.Kind))
			r.Names = append(r.Names, t.Name)
		}
		issued[t.Identity][t.Issued] = true
		if s := t.Issued.UTC().Format(time.RFC3339); s > r.Last {
			r.Last = s
		}
	}
	var out []PlantedRow
	for id, r := range by {
		r.Sets = len(issued[id])
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b PlantedRow) int { return strings.Compare(a.Identity, b.Identity) })
	return out
}

func writePlanted(w io.Writer, planted []honeytoken.Token) {
	rows := plantedRows(planted)
	if len(rows) == 0 {
		fmt.Fprintf(w, "egressd placed no honeytokens (`honeytokens: true`, `egressd run --honeytokens`, `egressd honeytokens issue`).\n\n")
		return
	}
	fmt.Fprintf(w, "### Keys egressd placed: honeytokens\n\nCanary credentials that look real and can never be valid (docs/EVIDENCE.md says how they are chosen); any use of one on the way out is refused and alerted (section 8).\n\n")
	fmt.Fprintf(w, "| identity | kinds | variables | sets issued | last issued (UTC) |\n|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s | %s | %d | %s |\n", md(r.Identity), md(strings.Join(r.Kinds, ", ")), md(strings.Join(r.Names, ", ")), r.Sets, r.Last)
	}
	fmt.Fprintf(w, "\n### Keys the scan found\n\n")
}

// scannedOnly drops from a sandbox's scan the keys egressd placed there
// itself: a variable named like one of that identity's honeytokens. A
// real key put in the same variable would be dropped too; the scan
// reports names only, never values, so it cannot tell them apart.
func scannedOnly(identity string, found []selftest.Credential, planted []honeytoken.Token) []selftest.Credential {
	names := map[string]bool{}
	for _, t := range planted {
		if t.Identity == identity {
			names[t.Name] = true
		}
	}
	if len(names) == 0 {
		return found
	}
	var out []selftest.Credential
	for _, c := range found {
		// Files stay: a planted .aws/credentials and a real one have the
		// same name, and hiding a real key would be the worse mistake.
		if c.Location != "env" || !names[c.Name] {
			out = append(out, c)
		}
	}
	return out
}

func writeHoneyHits(w io.Writer, dl *DecisionLog, planted []honeytoken.Token) {
	rows := honeyHitRows(dl)
	switch {
	case dl == nil:
		fmt.Fprintf(w, "No decision log given.\n\n")
		return
	case len(rows) == 0 && len(planted) == 0:
		fmt.Fprintf(w, "No honeytokens placed, none seen.\n\n")
		return
	case len(rows) == 0:
		fmt.Fprintf(w, "No honeytoken appeared in this log: no sandbox tried to use a planted credential on the way out.\n\n")
		return
	}
	fmt.Fprintf(w, "Each row is a proven exfiltration attempt, refused: a credential that exists only inside a sandbox left it in a request or a DNS name. Treat it as an incident until proven otherwise.\n\n")
	fmt.Fprintf(w, "| identity (sender) | issued to | kind | where | count | first (UTC) | last (UTC) |\n|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %d | %s | %s |\n", md(r.Identity), md(r.IssuedTo), md(r.Kind), md(r.Where), r.Count,
			r.First.UTC().Format(time.RFC3339), r.Last.UTC().Format(time.RFC3339))
	}
	fmt.Fprintln(w)
}

func writeSeal(w io.Writer, s *Seal) {
	if s == nil {
		fmt.Fprintf(w, "This pack is not signed. `egressd report --sign --out FILE` writes FILE and a detached signature FILE.sig with the audit signing key (`audit.sign_key`).\n")
		return
	}
	fmt.Fprintf(w, "This pack has a detached Ed25519 signature (the `.sig` file next to it) by key `%s`. It covers this file's bytes and:\n\n", s.KeyID)
	fmt.Fprintf(w, "- the policy in force: `%s`, SHA-256 `%s`;\n", s.Config, orDash(s.PolicySHA256))
	fmt.Fprintf(w, "- the self-test and probe history: SHA-256 `%s`;\n", orDash(s.HistorySHA256))
	fmt.Fprintf(w, "- the walls with their counters (section 1): SHA-256 `%s`;\n", s.WallsSHA256)
	if c := s.AuditCheckpoint; c != nil {
		fmt.Fprintf(w, "- the audit log `%s` up to its signed checkpoint seq %d (%s, key `%s`, chained to `%s`).\n\n", s.AuditLog, c.Seq, c.Time, c.KeyID, c.Prev)
	} else {
		fmt.Fprintf(w, "- no audit checkpoint (`--audit-log` not given).\n\n")
	}
	fmt.Fprintf(w, "To verify, with the public key `audit.pub` obtained from its owner, never from the host that made this pack:\n\n")
	fmt.Fprintf(w, "```sh\negressd report verify --key audit.pub --audit-log AUDIT_LOG PACK   # this file, PACK.sig, and that the log still holds the checkpoint\nsha256sum egressd.yaml                                     # compare with the policy hash above\negressd audit verify --key audit.pub --live AUDIT_LOG     # every line of the log covered by a signature\n```\n\n")
	fmt.Fprintf(w, "A signature proves the pack is the one this key signed and unchanged since; it does not prove the host that held the key was honest (whoever controls the egressd host can sign anything).\n")
}
