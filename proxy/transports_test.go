package proxy

import (
	"net/http"
	"testing"

	"github.com/egressd/egressd/policy"
)

// TestRuleTransportsBounded: a Transport per rule must not multiply the
// idle upstream sockets one Transport kept (MaxIdleConns, 1024 in New):
// at most maxRuleTransports are kept, the least recently used goes, and
// together they keep no more idle than the base allows.
func TestRuleTransportsBounded(t *testing.T) {
	t.Parallel()
	r := &ruleTransports{base: &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 64}}
	hot := &policy.Rule{Name: "hot"}
	first := r.get(hot)
	for i := range 3 * maxRuleTransports {
		r.get(&policy.Rule{Name: "cold"})
		if i%4 == 0 {
			r.get(hot) // recently used: stays
		}
	}
	if n := len(r.m); n > maxRuleTransports {
		t.Fatalf("%d Transports kept, want at most %d", n, maxRuleTransports)
	}
	idle := 0
	for _, rt := range r.m {
		idle += rt.t.MaxIdleConns
	}
	if idle > 1024 {
		t.Errorf("the kept Transports may hold %d idle connections together, want at most the base's 1024", idle)
	}
	// A busy host pools as it did with one Transport (a per-rule share
	// of 1024/32 = 32 made its second wave of 40 requests dial 8 again).
	if m := r.get(&policy.Rule{Name: "busy"}).MaxIdleConns; m < 64 {
		t.Errorf("a rule's Transport keeps %d idle connections, fewer than one host's 64", m)
	}
	if r.get(hot) != first {
		t.Errorf("the most used rule's Transport was evicted")
	}
}
