package policy

import (
	"net/netip"
	"strings"
	"testing"
)

// TestNeverAllowsAddrs: a name of a rule can never be allowed when every
// address it resolves to is refused at dial time under that rule; one
// dialable address, or cidrs naming the block, is enough.
func TestNeverAllowsAddrs(t *testing.T) {
	p, err := Parse(strings.NewReader(`version: 1
allow:
  - name: plain
    hosts: [a.example.org]
  - name: unlocked
    hosts: [b.example.org]
    cidrs: [10.0.0.0/24]
  - name: local
    hosts: [dev.localhost]
`), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	a := netip.MustParseAddr
	tests := []struct {
		rule  int
		addrs []netip.Addr
		want  string // "" no warning, else a part of it
	}{
		{0, []netip.Addr{a("10.0.0.5")}, `allow[0] ("plain") can never allow h: it resolves only to 10.0.0.5 (private)`},
		{0, []netip.Addr{a("10.0.0.5"), a("fd00::5")}, "10.0.0.5 (private), fd00::5 (ula)"},
		{0, []netip.Addr{a("169.254.169.254")}, "169.254.169.254 (high-risk)"},
		{0, []netip.Addr{a("10.0.0.5"), a("64.0.0.1")}, ""}, // one public address: dialable
		{0, nil, ""},
		{1, []netip.Addr{a("10.0.0.5")}, ""}, // its cidrs unlock the block
		{1, []netip.Addr{a("10.0.1.5")}, "10.0.1.5 (private)"},                 // outside them
		{1, []netip.Addr{a("169.254.169.254")}, "169.254.169.254 (high-risk)"}, // never unlocked
		{0, []netip.Addr{a("10.0.0.1"), a("10.0.0.2"), a("10.0.0.3"), a("10.0.0.4"), a("10.0.0.5"), a("10.0.0.6")}, "10.0.0.4 (private), 2 more"},
	}
	for _, tt := range tests {
		got := p.NeverAllowsAddrs(p.Rules[tt.rule], "h", tt.addrs)
		if tt.want == "" && got != "" || tt.want != "" && !strings.Contains(got, tt.want) {
			t.Errorf("rule %d, %v: got %q, want %q", tt.rule, tt.addrs, got, tt.want)
		}
	}
	// localhost always resolves to loopback (RFC 6761): a high-risk name,
	// warned once, without resolving.
	var local []string
	for _, w := range p.Warnings() {
		if strings.Contains(w, "can never allow") {
			local = append(local, w)
		}
	}
	if len(local) != 1 || !strings.Contains(local[0], `allow[2] ("local") can never allow dev.localhost`) {
		t.Errorf("Warnings: %q, want one for dev.localhost", local)
	}
}
