package dnsfilter

import (
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/egressd/egressd/honeytoken"
)

// TestHoneytokenName: a canary credential as a label under an allowed
// wildcard gets NXDOMAIN with reason honeytoken, never reaches the
// upstream, and is reported with the identity; the same query without it
// is answered.
func TestHoneytokenName(t *testing.T) {
	f := newFixture(t, 1000)
	ts, err := honeytoken.Issue("sandbox-9")
	if err != nil {
		t.Fatal(err)
	}
	reg := honeytoken.NewRegistry()
	reg.Set("run", ts)
	type hit struct{ identity, name, kind, of string }
	var hits []hit
	f.s.honey = reg
	f.s.onHoney = func(identity, name string, tk honeytoken.Token) {
		hits = append(hits, hit{identity, name, string(tk.Kind), tk.Identity})
	}
	label := strings.ToLower(ts[0].Value)
	f.up.set(t, "data.wild.test.", dns.TypeA, "data.wild.test. 60 IN A "+good4)
	f.up.set(t, label+".wild.test.", dns.TypeA, label+".wild.test. 60 IN A "+good4)
	if r := f.ask(t, agent, "data.wild.test.", dns.TypeA); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Fatalf("without a canary: %v", r)
	}
	if r := f.ask(t, agent, label+".wild.test.", dns.TypeA); r.Rcode != dns.RcodeNameError {
		t.Fatalf("with a canary label: rcode %s, want NXDOMAIN", dns.RcodeToString[r.Rcode])
	}
	if len(hits) != 1 || hits[0] != (hit{"agent", label + ".wild.test", "aws-access-key-id", "sandbox-9"}) {
		t.Fatalf("hits %+v", hits)
	}
	for _, q := range f.up.queries() {
		if strings.Contains(q.name, label) {
			t.Fatalf("the canary name reached the upstream: %+v", q)
		}
	}
	var found bool
	for _, l := range f.logs.lines(t) {
		if l["reason"] == "honeytoken" && l["honeytoken"] == "aws-access-key-id" && l["honeytoken_of"] == "sandbox-9" {
			found = true
		}
	}
	if !found {
		t.Fatal("no dns query line names the honeytoken")
	}
}
