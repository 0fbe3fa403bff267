package suggest

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/egressd/egressd/policy"
)

// Options filter what Suggest reads.
type Options struct {
	Identity string // only denials of this identity ("": all), and the rules name it
}

// group is what the denials of one host showed.
type group struct {
	host     string
	n        int
	ports    map[int]bool
	methods  map[string]bool
	pages    map[string]bool
	reasons  map[string]int
	rules    map[string]bool // existing rules that matched but refused
	requests []policy.Request
	connects int // denied CONNECTs: what the tunnel would carry is unknown
}

// neverSuggested are denials no rule should lift: high-risk targets,
// special-use addresses, and mirror refusals (publishing, uploads, logins
// on a download-only mirror). They are listed, not proposed.
var neverSuggested = map[string]bool{
	policy.ReasonHighRisk.String():    true,
	policy.ReasonSpecialAddr.String(): true,
	policy.ReasonBadTarget.String():   true,
	policy.ReasonMirror.String():      true,
}

// learnable are the policy's own refusals that a rule could lift.
var learnable = map[string]bool{
	policy.ReasonNoRule.String():   true,
	policy.ReasonPort.String():     true,
	policy.ReasonMethod.String():   true,
	policy.ReasonPath.String():     true,
	policy.ReasonPageType.String(): true,
}

// Suggest writes proposed allow rules, as commented YAML to review and
// paste, for the denials in entries. It decides nothing and writes no
// config: a proposal takes effect only when an operator puts it in one.
func Suggest(w io.Writer, entries []Entry, o Options) {
	groups := map[string]*group{}
	never := map[string]int{} // "reason host" → count
	for i := range entries {
		e := &entries[i]
		if e.Decision != "deny" || o.Identity != "" && who(e) != o.Identity && e.Identity != o.Identity {
			continue
		}
		if e.HighRisk || neverSuggested[e.Reason] {
			never[e.Reason+" "+e.Host]++
			continue
		}
		if !learnable[e.Reason] || e.Host == "" {
			continue
		}
		g := groups[e.Host]
		if g == nil {
			g = &group{host: e.Host, ports: map[int]bool{}, methods: map[string]bool{}, pages: map[string]bool{}, reasons: map[string]int{}, rules: map[string]bool{}}
			groups[e.Host] = g
		}
		g.n++
		g.ports[e.Port] = true
		g.reasons[e.Reason]++
		if e.Rule != "" {
			g.rules[e.Rule] = true
		}
		if e.Method == "CONNECT" {
			g.connects++
			continue
		}
		g.methods[e.Method] = true
		g.pages[cmp.Or(e.PageType, "read")] = true
		path, query, _ := strings.Cut(strings.TrimSuffix(e.Path, "…"), "?")
		g.requests = append(g.requests, policy.Request{Method: e.Method, Host: e.Host, Port: uint16(e.Port), Path: path, Query: query}) // bodiless: the log has no length, and downloads carry none
	}
	list := make([]*group, 0, len(groups))
	for _, g := range groups {
		list = append(list, g)
	}
	slices.SortFunc(list, func(a, b *group) int { return cmp.Or(b.n-a.n, strings.Compare(a.host, b.host)) })

	fmt.Fprintf(w, "# egressd suggest: %d hosts from the denials of a trial run", len(list))
	if o.Identity != "" {
		fmt.Fprintf(w, " (identity %s)", o.Identity)
	}
	fmt.Fprintf(w, ".\n# Proposals only: nothing is allowed until you review a rule and paste it\n# under allow: in your config. Check each with `egressd replay`.\n")
	if len(list) > 0 {
		fmt.Fprintln(w, "allow:")
	}
	for _, g := range list {
		writeRule(w, g, o)
	}
	if len(never) > 0 {
		keys := make([]string, 0, len(never))
		for k := range never {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		fmt.Fprintf(w, "# Not proposed (high-risk, special-use addresses, mirror refusals: no rule should lift these):\n")
		for _, k := range keys {
			reason, host, _ := strings.Cut(k, " ")
			fmt.Fprintf(w, "#   %s %s (%d)\n", reason, host, never[k])
		}
	}
}

func writeRule(w io.Writer, g *group, o Options) {
	fmt.Fprintf(w, "  # denied %dx: %s", g.n, counts(g.reasons))
	if len(g.rules) > 0 {
		fmt.Fprintf(w, "; refused under existing rule %s: widen it instead of adding this one", strings.Join(keys(g.rules), ", "))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  - name: %s\n", ruleName(g.host))
	if o.Identity != "" {
		fmt.Fprintf(w, "    identities: [%s]\n", o.Identity)
	}
	fmt.Fprintf(w, "    hosts: [%s]\n", g.host)
	nums := make([]int, 0, len(g.ports))
	for p := range g.ports {
		nums = append(nums, p)
	}
	slices.Sort(nums)
	ports := make([]string, len(nums))
	for i, p := range nums {
		ports[i] = fmt.Sprint(p)
	}
	fmt.Fprintf(w, "    ports: [%s]\n", strings.Join(ports, ", "))
	if m, base, others := recogniseBase(g.requests); m != policy.MirrorNone {
		fmt.Fprintf(w, "    mirror: %s   # all %d requests fit the %s download grammar", m, len(g.requests), m)
		if base != "" {
			fmt.Fprint(w, " under base_path")
		}
		if len(others) > 0 {
			fmt.Fprintf(w, " (also: %s)", strings.Join(others, ", "))
		}
		fmt.Fprintln(w)
		if base != "" {
			fmt.Fprintf(w, "    base_path: %s   # the repository's prefix: other paths on this host stay denied\n", base)
		}
		return
	}
	if len(g.requests) == 0 {
		fmt.Fprintf(w, "    # only CONNECTs were seen: what the tunnel carries is unknown, so the\n    # default pages (read, download) apply and the tunnel is inspected\n")
		return
	}
	pages := keys(g.pages)
	var writes []string
	for _, p := range pages {
		if t, ok := policy.ParsePageType(p); ok && t.IsWrite() {
			writes = append(writes, p)
		}
	}
	fmt.Fprintf(w, "    pages: [%s]\n", strings.Join(pages, ", "))
	if len(writes) > 0 {
		fmt.Fprintf(w, "    # REVIEW: write pages seen (%s): an agent could send data out through them\n", strings.Join(writes, ", "))
	}
	fmt.Fprintf(w, "    methods: [%s]\n", strings.Join(keys(g.methods), ", "))
	fmt.Fprintf(w, "    # no mirror grammar fits these paths, at the root or under a prefix\n")
}

// recogniseBase finds the mirror, and the base_path when one is needed,
// that accepts every request seen: first under a repository manager's
// prefix (layoutDepth), then at the root, then under the shortest common
// prefix that fits.
func recogniseBase(reqs []policy.Request) (m policy.Mirror, base string, others []string) {
	common := commonSegments(reqs)
	if k := layoutDepth(common); k > 0 {
		base = "/" + strings.Join(common[:k], "/")
		if m, others = recognise(reqs, base); m != policy.MirrorNone {
			return m, base, others
		}
	}
	if m, others = recognise(reqs, ""); m != policy.MirrorNone {
		return m, "", others
	}
	for k := 1; k <= len(common); k++ {
		base = "/" + strings.Join(common[:k], "/")
		if policy.BasePathOK(base) != "" {
			break
		}
		if m, others = recognise(reqs, base); m != policy.MirrorNone {
			return m, base, others
		}
	}
	return policy.MirrorNone, "", nil
}

// maxBaseSegs bounds the prefixes tried: real repository prefixes have at
// most seven segments (GitLab's group level).
const maxBaseSegs = 8

// commonSegments returns the leading path segments every request shares,
// without the last segment of any (a prefix is a directory), at most
// maxBaseSegs; none when a segment holds an escape or is empty.
func commonSegments(reqs []policy.Request) []string {
	var common []string
	for i, r := range reqs {
		segs := strings.Split(strings.TrimPrefix(r.Path, "/"), "/")
		segs = segs[:max(len(segs)-1, 0)]
		if i == 0 {
			common = segs[:min(len(segs), maxBaseSegs)]
			continue
		}
		n := 0
		for n < len(common) && n < len(segs) && common[n] == segs[n] {
			n++
		}
		common = common[:n]
	}
	for i, s := range common {
		if s == "" || strings.ContainsAny(s, "%;") {
			return common[:i]
		}
	}
	return common
}

// layouts are the repository prefixes of repository managers, segment by
// segment ("*": any one segment): Artifactory, Nexus, GitLab (project,
// group and instance level) and devpi (an index before +simple or +f).
var layouts = [][]string{
	{"artifactory", "api", "*", "*"},
	{"api", "v4", "projects", "*", "packages", "*"},
	{"api", "v4", "groups", "*", "-", "packages", "*"},
	{"api", "v4", "packages", "*"},
	{"artifactory", "*"},
	{"repository", "*"},
	{"*", "*", "+simple"},
	{"*", "*", "+f"},
}

// layoutDepth is how many of the leading segments s name one repository
// on a repository manager, or 0.
func layoutDepth(s []string) int {
	for _, l := range layouts {
		if len(s) < len(l) {
			continue
		}
		ok := true
		for i, x := range l {
			ok = ok && (x == "*" || s[i] == x)
		}
		if !ok {
			continue
		}
		if x := l[len(l)-1]; x[0] == '+' {
			return len(l) - 1 // devpi: the index, not its +simple
		}
		return len(l)
	}
	return 0
}

// recognise returns the first mirror whose download grammar accepts every
// request seen under base ("": at the root) (none: MirrorNone), and the
// other mirrors that also do.
func recognise(reqs []policy.Request, base string) (policy.Mirror, []string) {
	if len(reqs) == 0 {
		return policy.MirrorNone, nil
	}
	var found policy.Mirror
	var others []string
	for m := policy.MirrorPyPI; m.String() != "unknown"; m++ {
		if m == policy.MirrorGeneric {
			continue // any path: it recognises nothing
		}
		ok := true
		for i := range reqs {
			if !policy.CheckMirror(m, &reqs[i], &policy.MirrorOptions{BasePath: base}).Allow {
				ok = false
				break
			}
		}
		switch {
		case !ok:
		case found == policy.MirrorNone:
			found = m
		default:
			others = append(others, m.String())
		}
	}
	return found, others
}

func ruleName(host string) string {
	return strings.ReplaceAll(strings.TrimPrefix(host, "www."), ".", "-")
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func counts(m map[string]int) string {
	var parts []string
	for _, k := range keys(m) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
