package proxy

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestResolverChecksAnswers: the proxy's resolver takes an upstream's
// answer only as the DNS filter does (one client checks both): a reply
// to the question asked, marked a response to a query, with a final
// rcode. Before the two shared one client, the proxy checked only the
// message ID and took an answer echoing another question.
func TestResolverChecksAnswers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		forge func(q, m *dns.Msg)
		ok    bool
	}{
		{"honest", func(q, m *dns.Msg) {}, true},
		{"another question", func(q, m *dns.Msg) { m.Question[0].Name = "other.test." }, false},
		{"another type", func(q, m *dns.Msg) { m.Question[0].Qtype = dns.TypeMX }, false},
		{"no question", func(q, m *dns.Msg) { m.Question = nil }, false},
		{"not a response", func(q, m *dns.Msg) { m.Response = false }, false},
		{"another opcode", func(q, m *dns.Msg) { m.Opcode = dns.OpcodeNotify }, false},
		{"servfail", func(q, m *dns.Msg) { m.Rcode = dns.RcodeServerFailure }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			up := forgingDNS(t, map[string][]string{"allowed.test": {"127.0.0.1"}}, func(q, m *dns.Msg) {
				if q.Question[0].Qtype == dns.TypeA {
					tt.forge(q, m)
				} else {
					m.Rcode = dns.RcodeServerFailure // only the A answer decides
				}
			})
			r := &Resolver{Upstreams: []netip.AddrPort{netip.MustParseAddrPort(up)}, Timeout: time.Second}
			addrs, err := r.Lookup(context.Background(), "allowed.test")
			if tt.ok && (err != nil || len(addrs) != 1) {
				t.Fatalf("honest answer: %v, %v", addrs, err)
			}
			if !tt.ok && err == nil {
				t.Fatalf("forged answer taken: %v", addrs)
			}
		})
	}
}
