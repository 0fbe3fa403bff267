package proxy

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestRegressSplicedCutWaitingForHelloLogged: a spliced CONNECT tunnel (a
// host-only TLS rule) waits for its ClientHello in admitHello. A
// quarantine (or a reload's cut) lands then: cutTunnel claims rq.cutBy
// and, the tunnel not being inspected, logs nothing (it leaves the line to
// spliced). tunnelHello then fails on the closed socket, x.cut finds
// cutBy claimed and returns without logging, and admitHello's false sends
// serveConnect to closeTunnel: the tunnel ends with no decision line.
// Before bea337b x.cut always logged (no-client-hello).
func TestRegressSplicedCutWaitingForHelloLogged(t *testing.T) {
	for _, tc := range []struct {
		name string
		cut  func(h *harness)
	}{
		{"quarantine", func(h *harness) { h.px.Quarantine("127.0.0.1") }},
		{"reload", func(h *harness) { h.px.SetPolicy(noLoopback(t, h)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, testConfig, testNames)
			c := h.connect(t, "allowed.test:"+h.tlsO.port())
			defer c.Close()
			waitOpen(t, h.px, 1)
			time.Sleep(100 * time.Millisecond) // in admitHello, reading the hello
			tc.cut(h)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := h.px.waitTunnels(ctx); err != nil {
				t.Fatalf("tunnel still open")
			}
			time.Sleep(200 * time.Millisecond)
			if l := denyLines(h, "allowed.test"); len(l) != 1 {
				t.Errorf("%d denial lines for one cut tunnel, want 1 (%s):\n%s", len(l), tc.name, strings.Join(l, "\n"))
			}
		})
	}
}

// TestRegressDroppedCandidateKeepsAgentPools: a reload whose candidate is
// dropped changes nothing for agents, yet SetCandidate (to the candidate,
// then nil) closed every pooled upstream connection of the policy in
// force (trs.reset, up.closeIdle): the candidate's rules are other
// *policy.Rule values, so no in-force pool could serve its requests
// anyway. Before 6ad2a0e a dropped reload left the pools alone.
func TestRegressDroppedCandidateKeepsAgentPools(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	cand := editedPolicy(t, h, "hosts: [docs.test]", "hosts: [docs2.test]")
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(h.proxyURL)}}
	u := "http://allowed.test:" + h.plain.port() + "/x"
	resp, err := cl.Get(u) // bodiless: the upstream pool
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	for deadline := time.Now().Add(5 * time.Second); h.px.up.idleCount() < 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the GET's upstream connection never went back to the pool")
		}
	}
	tg := mustTarget(t, u)
	rule := h.px.Policy().DecideTarget(&tg).Rule
	tr := h.px.trs.get(rule) // with a body: the rule's Transport
	h.px.SetCandidate(cand)  // a reload starts verifying...
	h.px.SetCandidate(nil)   // ...and drops its candidate
	if n := h.px.up.idleCount(); n < 1 {
		t.Errorf("a dropped reload's candidate closed the policy in force's pooled connections (%d left)", n)
	}
	if h.px.trs.get(rule) != tr {
		t.Errorf("a dropped reload's candidate dropped the policy in force's Transport of rule %q (its pool)", rule.Name)
	}
}
