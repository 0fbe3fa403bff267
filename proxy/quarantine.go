package proxy

import "github.com/egressd/egressd/policy"

// Quarantine denies everything for identity from now on and closes its
// open tunnels at once; it returns the number of tunnels closed.
func (x *Proxy) Quarantine(identity string) int {
	open := x.ids.quarantine(identity)
	for c, rq := range open {
		x.cutTunnel(c, rq, policy.ReasonQuarantine, "identity "+identity+" quarantined") // the close hook removes it from tunnels
	}
	x.log.Warn("quarantine", "identity", identity, "tunnels_closed", len(open))
	return len(open)
}

// Lift ends a quarantine; it reports whether identity was quarantined.
func (x *Proxy) Lift(identity string) bool {
	ok := x.ids.lift(identity)
	x.log.Info("quarantine lifted", "identity", identity, "was_quarantined", ok)
	return ok
}

// Quarantined lists the quarantined identities.
func (x *Proxy) Quarantined() []string { return x.ids.list() }
