//go:build linux

package nft

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestSystemRedirectOnlyAllowable: transparent mode redirects only
// destinations in the rules' cidrs or the DNS answers AddRedirect adds
// (IPv4, high-risk returned first); the added answers are no drift, a
// missing cidrs set is.
func TestSystemRedirectOnlyAllowable(t *testing.T) {
	t.Parallel()
	ns, _ := newNS(t)
	s := Spec{
		Table:         "egressd_redirect_set",
		IfPrefixes:    []string{"egsbx"},
		Gateways:      []netip.Addr{netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("2001:db8:1::1")},
		ProxyPort:     3128,
		DNSPort:       53,
		Redirects:     []Redirect{{From: 443, To: 3129}},
		RedirectCIDRs: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/28"), netip.MustParsePrefix("2001:db8:2::/64")},
		HighRisk:      []netip.Prefix{netip.MustParsePrefix("169.254.169.254/32")},
	}
	if err := Apply(ns, s); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if err := AddRedirect(ns, s.Table, []netip.Addr{netip.MustParseAddr("203.0.113.77"), netip.MustParseAddr("2001:db8:2::77")}, time.Minute); err != nil {
		t.Fatalf("AddRedirect: %v", err)
	}
	if d, err := Check(ns, s); err != nil || len(d) != 0 {
		t.Fatalf("Check after AddRedirect: %q, %v; want no drift", d, err)
	}
	text, err := Show(ns, s.Table)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"set redirect4", "203.0.113.0/28", "set " + SetRedirectDyn4, "0xcb00714d", "@highrisk4 counter packets 0 bytes 0 return", "@redirect4 tcp dport 443"} {
		if !strings.Contains(text, want) {
			t.Errorf("Show lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "2001:db8:2::") {
		t.Errorf("an IPv6 destination is redirected:\n%s", text)
	}
	without := s
	without.RedirectCIDRs = nil
	if d, _ := Check(ns, without); len(d) == 0 {
		t.Errorf("Check without the cidrs set: no drift reported")
	}
}
