package suggest

import (
	"cmp"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/egressd/egressd/policy"
)

// Change is one kind of request a new policy decides differently.
type Change struct {
	Identity, Method, Target string
	Was, Now                 string // "allow" or "deny <reason>"
	Count                    int
}

// Diff is what Replay found.
type Diff struct {
	Replayed, Skipped int // lines decided again; lines that were no policy decision
	Changes           []Change
}

// Loosened reports whether the new policy allows something the old one
// refused: the changes to read before deploying.
func (d *Diff) Loosened() bool {
	return slices.ContainsFunc(d.Changes, func(c Change) bool { return c.Now == "allow" })
}

// Replay decides every logged request again under p, for the identity it
// was logged with, and returns the requests whose decision changed. It
// decides from what the log holds: no query string and no request body
// type, so a page type that hinged on those may differ (noted by the
// caller). Refusals that were no policy decision (quarantine, limits,
// readiness, request hygiene) and tunnel bookkeeping lines are skipped.
func Replay(p *policy.Policy, entries []Entry) Diff {
	var d Diff
	idx := map[Change]int{}
	for i := range entries {
		e := &entries[i]
		was, ok := outcome(e)
		if !ok || e.Host == "" || e.Port <= 0 || e.Port > 65535 {
			d.Skipped++
			continue
		}
		hp := net.JoinHostPort(e.Host, strconv.Itoa(e.Port))
		var dec policy.Decision
		target := hp
		if e.Method == "CONNECT" {
			t, err := policy.ParseAuthority(hp)
			if err != nil {
				d.Skipped++
				continue
			}
			dec = p.DecideTargetAs(&t, who(e))
		} else {
			scheme := "http"
			if e.Inspected || e.Port == 443 {
				scheme = "https"
			}
			target = scheme + "://" + hp + cmp.Or(strings.TrimSuffix(e.Path, "…"), "/")
			t, err := policy.ParseURL(target)
			if err != nil {
				d.Skipped++
				continue
			}
			dec = p.DecideRequestAs(&t, who(e), e.Method, "", 0)
		}
		d.Replayed++
		now := "allow"
		if !dec.Allow {
			now = "deny " + dec.Reason.String()
		}
		if now == was || strings.HasPrefix(was, "deny") && strings.HasPrefix(now, "deny") {
			continue // same outcome (a different deny reason is no change in effect)
		}
		k := Change{Identity: who(e), Method: e.Method, Target: target, Was: was, Now: now}
		if j, ok := idx[k]; ok {
			d.Changes[j].Count++
			continue
		}
		k.Count = 1
		idx[k] = len(d.Changes)
		d.Changes = append(d.Changes, k)
	}
	slices.SortFunc(d.Changes, func(a, b Change) int {
		return cmp.Or(strings.Compare(b.Now[:1], a.Now[:1]), b.Count-a.Count, strings.Compare(a.Target, b.Target))
	})
	return d
}

// outcome is the logged decision as Replay compares it, and whether the
// line was a policy decision at all.
func outcome(e *Entry) (string, bool) {
	if e.Decision == "allow" {
		return "allow", true
	}
	if e.Decision != "deny" || !policyReasons[e.Reason] {
		return "", false
	}
	return "deny " + e.Reason, true
}

// policyReasons are the denials the policy itself decides (not the proxy's
// own refusals such as quarantine or limits, which a replay cannot redo).
var policyReasons = func() map[string]bool {
	m := map[string]bool{}
	for _, r := range []policy.Reason{policy.ReasonNoRule, policy.ReasonPort, policy.ReasonHighRisk, policy.ReasonSpecialAddr,
		policy.ReasonBadTarget, policy.ReasonMethod, policy.ReasonPath, policy.ReasonPageType, policy.ReasonMirror} {
		m[r.String()] = true
	}
	return m
}()

// Write prints the diff for an operator.
func (d *Diff) Write(w io.Writer) {
	fmt.Fprintf(w, "replayed %d decisions (%d decision lines were no policy decision, e.g. quarantine or limits, and were skipped): %d kinds of request decided differently\n", d.Replayed, d.Skipped, len(d.Changes))
	for _, c := range d.Changes {
		fmt.Fprintf(w, "  %-22s -> %-22s %4dx  %s %s", c.Was, c.Now, c.Count, c.Method, c.Target)
		if c.Identity != "" {
			fmt.Fprintf(w, "  (identity %s)", c.Identity)
		}
		fmt.Fprintln(w)
	}
}
