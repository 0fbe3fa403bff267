package policy

import (
	"fmt"
	"net/netip"
	"strings"
)

// Warnings lists what is valid in p but weakens the self-test's proof;
// egressd validate prints them (exit 0).
func (p *Policy) Warnings() []string {
	var w []string
	if len(p.Selftest.ExpectReachable) == 0 {
		w = append(w, "selftest.expect_reachable is empty: no positive control, so a self-test that reaches nothing at all (a broken proxy or network) looks sealed; add a URL egressd should let through")
	}
	if p.Selftest.CanaryName == "" && p.Selftest.CanaryURL == "" {
		w = append(w, "selftest has no canary_name or canary_url: nothing checks that an unlisted name and URL are refused; add one that no rule allows")
	}
	if p.UpstreamProxy != nil {
		w = append(w, p.parentPortWarnings()...)
	}
	operatorDenied := map[string]bool{} // deny.hosts: Lints names those with their key
	for _, d := range p.denyHosts {
		operatorDenied[d] = true
	}
	for _, r := range p.Rules {
		if h := p.neverAllowHost(r, operatorDenied); h != "" {
			w = append(w, fmt.Sprintf("allow[%d] (%q) can never allow %s: it is a high-risk name (metadata, link-local or an operator's deny list), refused before any rule; remove it from the rule", r.Index, r.Name, h))
		}
		if r.inlineHosts > bigInlineHosts {
			w = append(w, fmt.Sprintf("allow[%d] (%q) lists %d hosts inline: move them to allow[].hosts_files (one pattern a line), which a list this long loads from faster and in less memory, at start and at every reload (inline, only runs of bare names skip the YAML parser's node per entry; entries with comments or other forms load several times slower)", r.Index, r.Name, r.inlineHosts))
		}
	}
	return w
}

// bigInlineHosts is the longest hosts list a rule holds inline in the YAML
// without a warning: even cut out of the YAML (hostruns.go) a long list
// loads slower and larger than from hosts_files, and uncut (entries with
// comments) several times so.
const bigInlineHosts = 10_000

// parentPortWarnings names the ports rules list, other than 80 and 443,
// that no positive control reaches: a parent proxy that refuses CONNECT to
// one breaks the rules using it while the self-test passes. (For 80 and
// 443 the self-test derives a control from a rule when none is given.)
func (p *Policy) parentPortWarnings() []string {
	covered := map[uint16]bool{}
	for _, u := range p.Selftest.ExpectReachable {
		if t, err := ParseURL(u); err == nil {
			covered[t.Port] = true
		}
	}
	var w []string
	for _, r := range p.Rules {
		if !r.portsGiven {
			continue
		}
		for _, pr := range r.ports {
			if pr.lo != pr.hi || pr.lo == 80 || pr.lo == 443 || covered[pr.lo] {
				continue
			}
			covered[pr.lo] = true
			w = append(w, fmt.Sprintf("allow[%d] (%q) reaches port %d through upstream_proxy, and no selftest.expect_reachable URL uses that port: a parent that refuses CONNECT to it breaks the rule while the self-test passes; add a control URL on port %d", r.Index, r.Name, pr.lo, pr.lo))
		}
	}
	return w
}

// neverAllowScan bounds how many hosts of one rule neverAllowHost checks: a
// warning must not slow the load of a big hosts_files list.
const neverAllowScan = 10_000

// neverAllowHost is the first host a rule names that is high-risk (so the
// rule can never allow it), "" if none among its first neverAllowScan.
// Hosts the operator's own deny.hosts names are left to Lints, which
// names the deny.hosts entry too (one warning a host).
func (p *Policy) neverAllowHost(r *Rule, operatorDenied map[string]bool) string {
	n := 0
	for h := range r.Hosts.All() {
		if n++; n > neverAllowScan {
			break
		}
		if operatorDenied[h] || operatorDenied["*."+strings.TrimPrefix(h, "*.")] {
			continue
		}
		if name := strings.TrimPrefix(h, "*."); name != "*" && p.HighRiskName(name) {
			return h
		}
	}
	return ""
}

// NeverAllowsAddrs is the warning for host, a name rule r lists, when
// every address in addrs (what the name resolves to) is one egressd
// refuses to dial under r (CheckAddr: a special-use address without the
// rule's cidrs naming its block, or a high-risk one): the rule can never
// allow it. "" when one address is dialable, or addrs is empty. validate
// prints it for the rules' names it resolves. (A rule cannot list an
// address as a host, and names that always resolve to loopback, such as
// localhost, are high-risk names: Warnings names those without
// resolving.)
func (p *Policy) NeverAllowsAddrs(r *Rule, host string, addrs []netip.Addr) string {
	if len(addrs) == 0 {
		return ""
	}
	var refused []string
	for _, a := range addrs {
		ok, info := p.CheckAddr(r, a)
		if ok {
			return ""
		}
		if len(refused) < 4 {
			refused = append(refused, fmt.Sprintf("%s (%s)", a, info.Class))
		}
	}
	if more := len(addrs) - len(refused); more > 0 {
		refused = append(refused, fmt.Sprintf("%d more", more))
	}
	return fmt.Sprintf("allow[%d] (%q) can never allow %s: it resolves only to %s, special-use addresses egressd refuses to dial (403 special-address, high-risk ones always) unless the rule's cidrs name their block; name the block in the rule's cidrs, or point the name at a public address", r.Index, r.Name, host, strings.Join(refused, ", "))
}
