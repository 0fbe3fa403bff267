package proxy

import (
	"context"
	"fmt"
	"net"

	"github.com/egressd/egressd/policy"
)

// redecideTunnels decides every open tunnel again under p, as a new
// CONNECT to the same target would be, and closes those p no longer
// allows, logging each as a denial with the new reason. A spliced tunnel
// must also still be allowed to reach the address it reached, and a tunnel
// whose mode changed (spliced ↔ inspected) is closed: a spliced tunnel
// cannot start being inspected, and the client reconnects under the new
// rule. Inspected tunnels also re-decide each request as it comes.
func (x *Proxy) redecideTunnels(p *policy.Policy) {
	for c, rq := range x.ids.openTunnels() {
		x.redecide(p, c, rq)
	}
}

// redecide decides one open tunnel or WebSocket again under p and closes
// it unless p still allows it.
func (x *Proxy) redecide(p *policy.Policy, c net.Conn, rq *request) {
	if rq.ws {
		x.redecideWebSocket(p, c, rq)
		return
	}
	t := rq.target
	d := p.DecideTargetAs(&t, rq.identity)
	reason, detail := policy.ReasonAllowed, ""
	switch {
	case !d.Allow:
		reason, detail = d.Reason, "closed on reload: the new policy denies this tunnel"
	case d.Inspect != rq.d.Inspect:
		reason, detail = policy.ReasonReload, fmt.Sprintf("closed on reload: the tunnel's rule is now %s", mode(d.Inspect))
	default:
		reason, detail = x.recheckAddr(p, d, rq)
	}
	if reason == policy.ReasonAllowed {
		return
	}
	x.cutTunnel(c, rq, reason, detail)
}

// trackTunnel records an open tunnel or WebSocket (c, decided as rq) under ids,
// where a quarantine, a reload's re-decision and the drain find it, and
// applies here any of them that came between the decision and now: the
// tracker refuses a quarantined identity's tunnel, and any after the
// drain, under the lock those take; a reload swaps the policy before it
// reads the tracker, so a tunnel it did not see was decided by a policy
// no longer in force and is decided again here.
func (x *Proxy) trackTunnel(ids []string, c net.Conn, rq *request) {
	id, ok := x.ids.addTunnel(ids, c, rq)
	switch {
	case !ok && id != "":
		x.cutTunnel(c, rq, policy.ReasonQuarantine, "identity "+id+" quarantined")
	case !ok:
		x.cutTunnel(c, rq, policy.ReasonShutdown, "the drain had closed every tunnel")
	default:
		// A self-test's tunnel decided by the candidate stays the
		// candidate's while it is verified.
		if p := x.Policy(); rq.pol != p && rq.pol != x.cand.Load() {
			x.redecide(p, c, rq)
		}
	}
}

func mode(inspect bool) string {
	if inspect {
		return "inspected"
	}
	return "host-only (spliced)"
}

// cutTunnel closes an open tunnel egressd no longer allows. A spliced
// tunnel logs its end as a denial with this reason (and its byte counts);
// an inspected one is logged here.
func (x *Proxy) cutTunnel(c net.Conn, rq *request, reason policy.Reason, detail string) {
	if rq.cutBy.CompareAndSwap(nil, &cutInfo{reason, detail}) && rq.d.Inspect {
		lr := &request{start: rq.start, identity: rq.identity, source: rq.source, probe: rq.probe, target: rq.target, d: rq.d, method: rq.method}
		lr.d.Allow = false
		x.logDecisionReason(context.Background(), lr, 0, reason, detail, 0, 0)
	}
	c.Close()
}

// cutInfo is why egressd closed an open tunnel.
type cutInfo struct {
	reason policy.Reason
	detail string
}

// redecideWebSocket decides an open WebSocket's handshake again under p
// and closes it unless p still allows the request and the upgrade.
func (x *Proxy) redecideWebSocket(p *policy.Policy, c net.Conn, rq *request) {
	t := rq.target
	d := p.DecideRequestAs(&t, rq.identity, rq.method, "", 0)
	switch {
	case !d.Allow:
		x.cutTunnel(c, rq, d.Reason, "closed on reload: the new policy denies its handshake")
	case !d.Rule.WebSocket:
		x.cutTunnel(c, rq, policy.ReasonUpgrade, fmt.Sprintf("closed on reload: rule %q no longer allows upgrade: [websocket]", d.RuleName()))
	default:
		if reason, detail := x.recheckAddr(p, d, rq); reason != policy.ReasonAllowed {
			x.cutTunnel(c, rq, reason, detail)
		}
	}
}

// recheckAddr checks the address an open tunnel or WebSocket reached
// against p's rule d (none known yet: allowed, the dial checks it).
func (x *Proxy) recheckAddr(p *policy.Policy, d policy.Decision, rq *request) (policy.Reason, string) {
	up := x.ids.upAddr(rq)
	if !up.IsValid() {
		return policy.ReasonAllowed, ""
	}
	ok, info := p.CheckAddr(d.Rule, up.Addr())
	switch {
	case ok:
		return policy.ReasonAllowed, ""
	case info.Class == policy.ClassHighRisk:
		return policy.ReasonHighRisk, fmt.Sprintf("closed on reload: %s (%s) is not allowed by the new policy", up.Addr(), info.Class)
	}
	return policy.ReasonSpecialAddr, fmt.Sprintf("closed on reload: %s (%s) is not allowed by the new policy", up.Addr(), info.Class)
}
