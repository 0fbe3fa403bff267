package proxy

import (
	"net/http"
	"sync"

	"github.com/egressd/egressd/policy"
)

// ruleTransports holds one http.Transport per rule that decided a
// request. A pooled upstream connection passed the address checks of the
// rule (and policy) that dialed it, so it serves only requests that rule
// decided: one pool for all let a connection a candidate's rule checked
// (a self-test request) carry the next agent request to that host:port
// under the policy in force, and one identity's rule (its cidrs) carry
// another's. The bodiless path (upstream) keys its pool by rule too.
type ruleTransports struct {
	base *http.Transport // the settings; never dials itself
	mu   sync.Mutex
	m    map[*policy.Rule]*http.Transport
}

// get is rule's Transport.
func (r *ruleTransports) get(rule *policy.Rule) *http.Transport {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.m[rule]
	if t == nil {
		if r.m == nil {
			r.m = map[*policy.Rule]*http.Transport{}
		}
		t = r.base.Clone()
		r.m[rule] = t
	}
	return t
}

// reset drops every Transport and closes their idle connections: a new
// policy or candidate has rules of its own.
func (r *ruleTransports) reset() {
	r.mu.Lock()
	old := r.m
	r.m = nil
	r.mu.Unlock()
	for _, t := range old {
		t.CloseIdleConnections()
	}
}
