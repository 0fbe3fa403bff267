package policy

import (
	"fmt"
	"iter"
	"strings"

	"github.com/egressd/egressd/policy/classify"
)

// Base paths: one repository manager host (Artifactory, Nexus, GitLab)
// serves many repositories, each under its own path prefix and each its own
// mirror rule with a base_path. The target decision (CONNECT) takes the
// first rule that covers the host, as always; when that rule has a
// base_path, each request inside is decided by the rule whose base_path it
// falls under (the longest, then the first), and a request under none of
// them (the product's UI, login, admin and REST API) is denied.

// routeBase returns the rule among those covering the target (in view v)
// whose base_path holds path, or nil when none does.
func (p *Policy) routeBase(t *Target, v view, path string) *Rule {
	best := (*Rule)(nil)
	consider := func(r *Rule) {
		if r.MirrorOp.BasePath == "" || !v.sees(r) || !r.AllowsPort(t.Port) {
			return
		}
		if _, ok := classify.UnderBasePath(r.MirrorOp.BasePath, path); !ok {
			return
		}
		if best == nil || len(r.MirrorOp.BasePath) > len(best.MirrorOp.BasePath) ||
			len(r.MirrorOp.BasePath) == len(best.MirrorOp.BasePath) && r.Index < best.Index {
			best = r
		}
	}
	p.eachTargetRule(t, consider)
	return best
}

// eachTargetRule calls fn with every rule that covers the target's name,
// or its address (a special-use one only where the rule unlocks it), on
// any port and in any view.
func (p *Policy) eachTargetRule(t *Target, fn func(r *Rule)) {
	if !t.Addr.IsValid() {
		p.eachNameRule(t.Name, func(idx int32, _ bool) { fn(p.Rules[idx]) })
		return
	}
	info := ClassifyAddr(t.Addr)
	for _, i := range p.cidrRule {
		r := p.Rules[i]
		if r.coversAddr(t.Addr) && (info.Class == ClassPublic || r.unlocks(t.Addr, info)) {
			fn(r)
		}
	}
}

// basePaths refuses configs whose base_path rules cannot work as written:
// a host (or cidr) that rules with and without base_path both name (the
// one written first would take every request), and two rules with the same
// base_path on one host.
func (c *compiler) basePaths(rules []*Rule, raw []rawRule) {
	type owner struct {
		rule *Rule
		base string
	}
	keysOf := func(r *Rule) iter.Seq[string] {
		return func(yield func(string) bool) {
			for h := range r.Hosts.All() {
				if !yield(h) {
					return
				}
			}
			for _, pr := range r.CIDRs {
				if !yield(pr.String()) {
					return
				}
			}
		}
	}
	// Only the hosts of base_path rules are compared: a big hosts file
	// elsewhere costs a lookup per name, not a map entry.
	seen := map[string][]owner{}
	for _, r := range rules {
		if r.MirrorOp.BasePath != "" {
			for k := range keysOf(r) {
				seen[k] = nil
			}
		}
	}
	if len(seen) == 0 {
		return
	}
	for _, r := range rules {
		for k := range keysOf(r) {
			if _, ok := seen[k]; !ok {
				continue
			}
			for _, o := range seen[k] {
				if !r.sharesView(o.rule) || !r.sharesPort(o.rule) {
					continue
				}
				line := raw[r.Index].BasePath.Line
				if line == 0 {
					line = firstLine(&raw[r.Index])
				}
				f := fmt.Sprintf("allow[%d].base_path", r.Index)
				switch {
				case (o.base == "") != (r.MirrorOp.BasePath == ""):
					c.errf(line, f, "%s is also named by rule %q, and only one of the two has a base_path: on a host with base_path rules every rule for it needs one (the rule written first would decide every request)", k, o.rule.Name)
				case o.base != "" && o.base == r.MirrorOp.BasePath:
					c.errf(line, f, "%s: rule %q already serves base_path %q", k, o.rule.Name, o.base)
				}
			}
			seen[k] = append(seen[k], owner{r, r.MirrorOp.BasePath})
		}
	}
}

// sharesView reports whether some client sees both rules.
func (r *Rule) sharesView(o *Rule) bool {
	if len(r.Identities) == 0 || len(o.Identities) == 0 {
		return true
	}
	for _, id := range r.Identities {
		if o.AppliesTo(id) {
			return true
		}
	}
	return false
}

// sharesPort reports whether the rules' ports overlap.
func (r *Rule) sharesPort(o *Rule) bool {
	for _, a := range r.ports {
		for _, b := range o.ports {
			if a.lo <= b.hi && b.lo <= a.hi {
				return true
			}
		}
	}
	return false
}

// baseDetail is the Detail of a request under none of the host's base
// paths.
func (p *Policy) baseDetail(t *Target, v view) string {
	var bases []string
	seen := func(r *Rule) {
		if r.MirrorOp.BasePath != "" && v.sees(r) && r.AllowsPort(t.Port) && len(bases) < 8 {
			bases = append(bases, r.MirrorOp.BasePath)
		}
	}
	p.eachTargetRule(t, seen)
	return "path outside every base_path on this host (" + strings.Join(bases, ", ") + ")"
}
