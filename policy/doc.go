// Package policy decides what may leave a sandbox: it parses and compiles the
// egressd config (YAML, version 1, strict, errors located by file:line:field)
// into an immutable Policy, normalizes targets in every spelling (inet_aton
// IPv4 forms, IPv6 with embedded IPv4, IDNA), classifies addresses, and
// returns a Decision value — allow or deny, with the rule, the reason, the
// page type and whether the target is high-risk.
//
// The request classifiers (page types, the mirror grammars of each package
// ecosystem, the git and read-only POST body grammars) live in
// policy/classify; policy re-exports their types. NameBudget is the one
// stateful helper: the per-identity budget of names under wildcard rules
// that the DNS filter and the proxy's resolver share the logic of.
//
// It is pure: no sockets, no logging. The proxy and the DNS filter call it.
//
//	p, err := policy.Load("egressd.yaml")
//	t, err := policy.ParseURL("http://0xA9FEA9FE/latest/meta-data/")
//	d := p.DecideRequest(&t, "GET", "", 0) // d.Allow == false, d.HighRisk == true
package policy
