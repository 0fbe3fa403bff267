package plan

import (
	"net/url"

	"github.com/egressd/egressd/policy"
)

// Positive controls through a parent proxy (upstream_proxy): egressd asks
// the parent for CONNECT <address>:<port> for every upstream, plain HTTP
// included, so a parent that allows only 443 breaks an apt mirror on 80
// while an https control passes. parentControls adds, for 80 and 443, a
// control on a host of a rule that lists the port when no expect_reachable
// URL uses it; other ports are policy.Warnings' (no scheme to guess).

// controlPaths are paths the download grammars allow, tried in order (under
// the rule's base_path) until the policy allows one under the rule.
var controlPaths = []string{
	"/", "/simple/", "/-/ping", "/dists/stable/Release", "/golang.org/x/text/@v/list",
	"/maven2/junit/junit/maven-metadata.xml", "/v2/", "/config.json", "/versions",
}

func parentControls(p *policy.Policy) []string {
	if p.UpstreamProxy == nil {
		return nil
	}
	covered := map[uint16]bool{}
	for _, u := range p.Selftest.ExpectReachable {
		if t, err := policy.ParseURL(u); err == nil {
			covered[t.Port] = true
		}
	}
	var out []string
	for _, port := range []uint16{80, 443} {
		if covered[port] {
			continue
		}
		if u := controlFor(p, port); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// controlFor is a URL on port (80 or 443) that the policy allows under a rule listing
// that port, naming no identities (the self-test speaks for none); "" if
// no rule has one.
func controlFor(p *policy.Policy, port uint16) string {
	scheme := map[uint16]string{80: "http", 443: "https"}[port]
	for _, r := range p.Rules {
		h := ruleHost(r)
		if h == "" || !r.PortsGiven() || !r.AllowsPort(port) || len(r.Identities) > 0 {
			continue
		}
		base := r.MirrorOp.BasePath
		if base == "/" {
			base = ""
		}
		for _, path := range controlPaths {
			u := (&url.URL{Scheme: scheme, Host: h, Path: base + path}).String()
			t, err := policy.ParseURL(u)
			if err != nil {
				continue
			}
			if d := p.DecideRequest(&t, "GET", "", 0); d.Allow && d.Rule == r {
				return u
			}
		}
	}
	return ""
}
