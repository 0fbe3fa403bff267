package plan

import (
	"fmt"
	"slices"

	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/selftest"
)

// identityProbes derives, per identity a client proves with a proxy user
// and token, one request to a host only rules of that identity allow,
// sent with its user name and a password that is not its token: the proxy
// must refuse it. It fails if the rule applied to everyone (identities
// ignored) or if an unproven label chose the identity. A rule naming an
// identity known by cidrs is no target (the self-test's address might be
// in them), nor is a host that a client of no identity, or of a cidrs
// identity, may reach anyway: the live request is decided in the view of
// the self-test's own address.
func identityProbes(p *policy.Policy) []selftest.Request {
	bySource := map[string]bool{}
	var sourceViews = []string{""} // the views the self-test's address can have
	for _, id := range p.Identities {
		if len(id.CIDRs) > 0 {
			bySource[id.Name] = true
			sourceViews = append(sourceViews, id.Name)
		}
	}
	var out []selftest.Request
	for _, id := range p.Identities {
		if id.User == "" {
			continue
		}
		for _, r := range p.Rules {
			if !slices.Contains(r.Identities, id.Name) || slices.ContainsFunc(r.Identities, func(n string) bool { return bySource[n] }) {
				continue
			}
			raw := ruleURL(r)
			t, err := policy.ParseURL(raw)
			if raw == "" || err != nil {
				continue
			}
			reason, ok := "", true
			for i, v := range sourceViews {
				d := p.DecideRequestAs(&t, v, "GET", "", 0)
				switch {
				case d.Allow:
					ok = false
				case i == 0:
					reason = d.Reason.String()
				case reason != d.Reason.String():
					reason = "" // the views disagree: any refusal will do
				}
			}
			if !ok {
				continue
			}
			out = append(out, selftest.Request{
				ID:     "identity-label/" + id.Name + "/" + r.Name,
				Route:  fmt.Sprintf("proxy: user %s without its token, on rule %s of %v", id.User, r.Name, r.Identities),
				Method: "GET", URL: raw, Reason: reason, ProxyUser: id.User,
			})
			break
		}
	}
	return out
}

// ruleURL is a URL under a rule's first concrete host, "" if none.
func ruleURL(r *policy.Rule) string {
	host := ruleHost(r)
	switch {
	case host == "":
		return ""
	case r.AllowsPort(443):
		return "https://" + host + "/"
	case r.AllowsPort(80):
		return "http://" + host + "/"
	}
	return ""
}
