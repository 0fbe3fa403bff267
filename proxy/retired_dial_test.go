package proxy

import (
	"context"
	"strings"
	"testing"

	"github.com/egressd/egressd/policy"
)

// TestRetiredPolicyDialsUnderPolicyInForce: a plain request decided under
// the policy in force an instant before a reload dials after it under
// the retired policy's address checks (dialDecidedAt: rq.pol). bea337b
// gave tunnels dialed after a reload the new policy's checks; a request
// whose body is read before the dial (a read-only POST, a mirror rule's
// BodyCap) keeps the window open for as long as its upload takes. Here
// the new policy no longer unlocks loopback for allowed.test; the dial
// decided under the old one still reaches 127.0.0.1.
func TestRetiredPolicyDialsUnderPolicyInForce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	old := h.px.Policy()
	rq := &request{pol: old, identity: "", method: "POST"}
	tg, err := policy.ParseURL("http://allowed.test:" + h.plain.port() + "/x")
	if err != nil {
		t.Fatal(err)
	}
	rq.target = tg
	rq.d = old.DecideTarget(&tg)
	if !rq.d.Allow {
		t.Fatalf("old policy refuses: %v", rq.d.Reason)
	}
	next, err := policy.Parse(strings.NewReader(strings.ReplaceAll(noLoopbackCIDR(testConfig), "{DNS}", old.Resolver.Upstreams[0].String())), "next.yaml")
	if err != nil {
		t.Fatal(err)
	}
	h.px.SetPolicy(next) // the reload lands while the request's body is read
	c, err := h.px.dialDecided(context.Background(), rq)
	if err == nil {
		c.Close()
		t.Error("a request decided before the reload dialed 127.0.0.1 after it, under the retired policy's address checks (the policy in force refuses that address)")
	}
}
