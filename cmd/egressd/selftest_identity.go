package main

import (
	"fmt"
	"slices"

	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/selftest"
)

// identityProbes derives, per declared identity that a sandbox names by
// proxy user, one request to a host that only rules of other identities
// allow: sent as that identity, the proxy must refuse it. A regression
// that let any identity use any rule would pass it through. Identities
// known only by source cidrs cannot be spoken for from the self-test's
// own address and get no probe; and a rule naming such an identity is no
// probe target, since the self-test's own address might be in its cidrs
// (then the proxy would rightly allow it).
func identityProbes(p *policy.Policy) []selftest.Request {
	bySource := map[string]bool{} // identities a source address can make a client
	for _, id := range p.Identities {
		bySource[id.Name] = len(id.CIDRs) > 0
	}
	var out []selftest.Request
	for _, id := range p.Identities {
		if id.User == "" {
			continue
		}
		for _, r := range p.Rules {
			if len(r.Identities) == 0 || r.AppliesTo(id.Name) || slices.ContainsFunc(r.Identities, func(n string) bool { return bySource[n] }) {
				continue
			}
			host := ruleHost(r)
			var raw string
			switch {
			case host == "":
				continue
			case r.AllowsPort(443):
				raw = "https://" + host + "/"
			case r.AllowsPort(80):
				raw = "http://" + host + "/"
			default:
				continue
			}
			t, err := policy.ParseURL(raw)
			if err != nil {
				continue
			}
			d := p.DecideRequestAs(&t, id.Name, "GET", "", 0)
			if d.Allow {
				continue // a shared rule also covers the host
			}
			out = append(out, selftest.Request{
				ID:     "identity/" + id.Name + "/" + r.Name,
				Route:  fmt.Sprintf("proxy: identity %s on rule %s of %v", id.Name, r.Name, r.Identities),
				Method: "GET", URL: raw, Reason: d.Reason.String(), ProxyUser: id.User,
			})
			break
		}
	}
	return out
}
