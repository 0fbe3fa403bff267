package dnsfilter

import (
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestAnswerAddrs: what Config.Answered is told: the addresses of the A
// and AAAA records kept (not CNAMEs), with their shortest TTL.
func TestAnswerAddrs(t *testing.T) {
	rr := func(s string) dns.RR {
		r, err := dns.NewRR(s)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	tests := []struct {
		name string
		rrs  []dns.RR
		want []string
		ttl  time.Duration
	}{
		{"none", nil, nil, 0},
		{"cname only", []dns.RR{rr("a.test. 60 IN CNAME b.test.")}, nil, 0},
		{"two families, shortest ttl", []dns.RR{rr("a.test. 300 IN CNAME b.test."), rr("b.test. 60 IN A 203.0.113.7"), rr("b.test. 30 IN AAAA 2001:db8::7")},
			[]string{"203.0.113.7", "2001:db8::7"}, 30 * time.Second},
		{"ttl zero", []dns.RR{rr("a.test. 0 IN A 203.0.113.8")}, []string{"203.0.113.8"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addrs, ttl := answerAddrs(tt.rrs)
			var got []string
			for _, a := range addrs {
				got = append(got, a.String())
			}
			if !slices.Equal(got, tt.want) || ttl != tt.ttl {
				t.Errorf("got %q %v, want %q %v", got, ttl, tt.want, tt.ttl)
			}
			for _, a := range addrs {
				if a != a.Unmap() || !a.IsValid() {
					t.Errorf("%v: not a plain address", a)
				}
			}
		})
	}
}
