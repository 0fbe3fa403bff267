package dnsfilter

import (
	"fmt"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/egressd/egressd/policy"
)

func (f *fixture) setPolicy(t *testing.T, extraLimits string) {
	t.Helper()
	cfg := fmt.Sprintf(testPolicy, `"`+f.up.addr.String()+`"`, 1000) + extraLimits
	p, err := policy.Parse(strings.NewReader(cfg), "test.yaml")
	if err != nil {
		t.Fatalf("parse policy: %v", err)
	}
	f.pol.Store(p)
}

// TestWildcardNameBudget is issue 12 item 4: names under an allowed
// wildcard carried data to its name servers without limit.
func TestWildcardNameBudget(t *testing.T) {
	f := newFixture(t, 1000)
	f.setPolicy(t, "  dns_wildcard_names: 3\n")
	hexName := func(i int) string {
		return fmt.Sprintf("%063x.%063x.wild.test.", i, i)
	}
	for i := range 6 {
		f.up.set(t, hexName(i), dns.TypeA, hexName(i)+" 60 IN A "+good4)
	}
	f.up.set(t, "allowed.test.", dns.TypeA, "allowed.test. 60 IN A "+good4)
	for i := range 3 {
		if m := f.ask(t, agent, hexName(i), dns.TypeA); m.Rcode != dns.RcodeSuccess {
			t.Fatalf("name %d within budget: rcode %s", i, dns.RcodeToString[m.Rcode])
		}
	}
	for i := 3; i < 6; i++ {
		if m := f.ask(t, agent, hexName(i), dns.TypeA); m.Rcode != dns.RcodeNameError {
			t.Fatalf("name %d over budget: rcode %s, want NXDOMAIN", i, dns.RcodeToString[m.Rcode])
		}
	}
	if m := f.ask(t, agent, hexName(1), dns.TypeA); m.Rcode != dns.RcodeSuccess {
		t.Errorf("a name already resolved is refused after the budget is spent")
	}
	if m := f.ask(t, agent, "allowed.test.", dns.TypeA); m.Rcode != dns.RcodeSuccess {
		t.Errorf("an exact name is refused after the wildcard budget is spent")
	}
	for _, q := range f.up.queries() {
		for i := 3; i < 6; i++ {
			if strings.EqualFold(q.name, hexName(i)) {
				t.Errorf("over-budget name %d reached the upstream", i)
			}
		}
	}
	if got := f.counter(t, "egressd_dns_wildcard_budget_refused_total", "identity", "agent"); got != 3 {
		t.Errorf("budget counter = %v, want 3", got)
	}
	warns := 0
	for _, l := range f.logs.lines(t) {
		if l["level"] == "WARN" {
			warns++
			if !strings.Contains(fmt.Sprint(l["msg"]), "budget") {
				t.Errorf("unexpected warning %v", l)
			}
		}
	}
	if warns != 1 {
		t.Errorf("%d warnings, want exactly 1", warns)
	}
}

func TestExactOnlyDNS(t *testing.T) {
	f := newFixture(t, 1000)
	f.setPolicy(t, "  dns_exact_only: true\n")
	f.up.set(t, "x.wild.test.", dns.TypeA, "x.wild.test. 60 IN A "+good4)
	f.up.set(t, "allowed.test.", dns.TypeA, "allowed.test. 60 IN A "+good4)
	if m := f.ask(t, agent, "x.wild.test.", dns.TypeA); m.Rcode != dns.RcodeNameError {
		t.Errorf("dns_exact_only: wildcard name rcode %s, want NXDOMAIN", dns.RcodeToString[m.Rcode])
	}
	if m := f.ask(t, agent, "allowed.test.", dns.TypeA); m.Rcode != dns.RcodeSuccess {
		t.Errorf("dns_exact_only: exact name rcode %s", dns.RcodeToString[m.Rcode])
	}
}
