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
	m    map[*policy.Rule]*ruleTransport
	n    uint64 // gets so far: the clock of used
}

// maxRuleTransports bounds the Transports kept at once; the least
// recently used goes (its idle connections closed) for a new one. Each
// keeps at most 1/maxRuleTransports of base's MaxIdleConns idle but no
// fewer than one host's (MaxIdleConnsPerHost: a busy host pools as it did),
// so with New's 1024 and 64 all of them together keep no more idle
// upstream sockets than one Transport did.
const maxRuleTransports = 16

type ruleTransport struct {
	t    *http.Transport
	used uint64 // the get count when it was last used
}

// get is rule's Transport.
func (r *ruleTransports) get(rule *policy.Rule) *http.Transport {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	if rt := r.m[rule]; rt != nil {
		rt.used = r.n
		return rt.t
	}
	if r.m == nil {
		r.m = map[*policy.Rule]*ruleTransport{}
	}
	if len(r.m) >= maxRuleTransports {
		var lru *policy.Rule
		for k, rt := range r.m {
			if lru == nil || rt.used < r.m[lru].used {
				lru = k
			}
		}
		// Connections still in use close when they come back: a
		// Transport whose idle connections were closed does not pool.
		r.m[lru].t.CloseIdleConnections()
		delete(r.m, lru)
	}
	t := r.base.Clone()
	t.MaxIdleConns = max(r.base.MaxIdleConns/maxRuleTransports, r.base.MaxIdleConnsPerHost, 1)
	r.m[rule] = &ruleTransport{t: t, used: r.n}
	return t
}

// drop drops the Transports of rules (a dropped candidate's) and closes
// their idle connections.
func (r *ruleTransports) drop(rules []*policy.Rule) {
	r.mu.Lock()
	var gone []*http.Transport
	for _, rule := range rules {
		if rt := r.m[rule]; rt != nil {
			gone = append(gone, rt.t)
			delete(r.m, rule)
		}
	}
	r.mu.Unlock()
	for _, t := range gone {
		t.CloseIdleConnections()
	}
}

// reset drops every Transport and closes their idle connections: a new
// policy has rules of its own.
func (r *ruleTransports) reset() {
	r.mu.Lock()
	old := r.m
	r.m = nil
	r.mu.Unlock()
	for _, rt := range old {
		rt.t.CloseIdleConnections() // and those in use close when they come back
	}
}
