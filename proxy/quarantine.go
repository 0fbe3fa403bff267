package proxy

// Quarantine denies everything for identity from now on and closes its
// open tunnels at once; it returns the number of tunnels closed.
func (x *Proxy) Quarantine(identity string) int {
	n := x.ids.quarantine(identity)
	x.log.Warn("quarantine", "identity", identity, "tunnels_closed", n)
	return n
}

// Lift ends a quarantine; it reports whether identity was quarantined.
func (x *Proxy) Lift(identity string) bool {
	ok := x.ids.lift(identity)
	x.log.Info("quarantine lifted", "identity", identity, "was_quarantined", ok)
	return ok
}

// Quarantined lists the quarantined identities.
func (x *Proxy) Quarantined() []string { return x.ids.list() }
