package policy

import (
	"fmt"
	"strings"
)

// lintScan bounds how many hosts of one rule Lints checks: a lint must not
// slow validate on a rule with a big hosts_files list.
const lintScan = 10_000

// lintLabel is the label Lints puts under a wildcard to ask which rule
// matches "any name under it" first; a rule that listed this very name
// would only make Lints see a shadow that is not there for the others.
const lintLabel = "egressd-lint-probe"

// Lints lists the rules that are valid but do not do what they seem to:
// a rule shadowed by an earlier one (first match wins, so its pages,
// methods and paths never apply), an allowed host that deny.hosts refuses
// anyway, and a rule that allows every host or every address. Each names
// both rules or the key. egressd validate prints them as warnings (exit 0;
// --strict makes them errors). Rules naming a high-risk host are
// Warnings' (they can never allow).
func (p *Policy) Lints() []string {
	var w []string
	denyAt := make(map[string]int, len(p.denyHosts))
	for j, d := range p.denyHosts {
		if _, dup := denyAt[d]; !dup {
			denyAt[d] = j
		}
	}
	for _, r := range p.Rules {
		w = append(w, p.lintEverything(r)...)
		if s := p.lintShadowed(r); s != "" {
			w = append(w, s)
		}
		if s := p.lintDenied(r, denyAt); s != "" {
			w = append(w, s)
		}
	}
	return w
}

// lintEverything names a rule that allows every host or every address.
func (p *Policy) lintEverything(r *Rule) []string {
	var w []string
	n := 0
	for h := range r.Hosts.All() {
		if n++; n > lintScan {
			break
		}
		if h == "*" {
			what := "its pages, methods and paths are the only check"
			if r.HostOnly() {
				what = "with every page type, method and path: a sandbox can reach anything"
			}
			w = append(w, fmt.Sprintf(`allow[%d] (%q) allows every host (hosts: ["*"]), %s; list the hosts it needs`, r.Index, r.Name, what))
			break
		}
	}
	for _, c := range r.CIDRs {
		if c.Bits() == 0 {
			w = append(w, fmt.Sprintf("allow[%d] (%q) allows every address (cidrs: %s): a sandbox can reach any literal address on its ports; list the ranges it needs", r.Index, r.Name, c))
		}
	}
	return w
}

// lintShadowed names the first host of r (on one of r's ports, for a
// client r applies to) that an earlier rule matches first, so r never
// decides it.
func (p *Policy) lintShadowed(r *Rule) string {
	views := []view{{}}
	if len(r.Identities) > 0 {
		views = views[:0]
		for _, id := range r.Identities {
			views = append(views, view{name: id})
		}
	}
	n := 0
	for h := range r.Hosts.All() {
		if n++; n > lintScan {
			break
		}
		name := h
		if h == "*" {
			name = lintLabel + ".invalid"
		} else if s, wild := strings.CutPrefix(h, "*."); wild {
			name = lintLabel + "." + s
		}
		for _, v := range views {
			for _, pr := range r.ports {
				e, _ := p.matchName(name, pr.lo, v)
				if e == nil || e == r || e.Index > r.Index {
					continue
				}
				return fmt.Sprintf("allow[%d] (%q) is shadowed for %s (port %d) by the earlier allow[%d] (%q), which matches it first: allow[%d]'s pages, methods and paths never apply there; move allow[%d] above allow[%d], or narrow allow[%d]",
					r.Index, r.Name, h, pr.lo, e.Index, e.Name, r.Index, r.Index, e.Index, e.Index)
			}
		}
	}
	return ""
}

// lintDenied names the first host of r that a deny.hosts entry refuses
// whole (an entry covering only part of a wildcard is a carve-out, fine).
func (p *Policy) lintDenied(r *Rule, denyAt map[string]int) string {
	if len(denyAt) == 0 {
		return ""
	}
	n := 0
	for h := range r.Hosts.All() {
		if n++; n > lintScan {
			break
		}
		if h == "*" {
			continue
		}
		name, wild := strings.CutPrefix(h, "*.")
		j, ok := -1, false
		if !wild {
			j, ok = denyAt[name]
		}
		for s := name; !ok; {
			if j, ok = denyAt["*."+s]; ok {
				break
			}
			i := strings.IndexByte(s, '.')
			if i < 0 {
				break
			}
			s = s[i+1:]
		}
		if ok {
			return fmt.Sprintf("allow[%d] (%q) allows %s, which deny.hosts[%d] (%s) refuses under every rule: remove one of the two", r.Index, r.Name, h, j, p.denyHosts[j])
		}
	}
	return ""
}
