package policy

import (
	"fmt"
	"testing"
	"time"
)

func TestNameBudget(t *testing.T) {
	p := mustParse(t, "version: 1\nlimits:\n  dns_wildcard_names: 3\nallow:\n  - hosts: [\"*.example.com\", api.example.com, \"*.example.org\"]\n")
	var b NameBudget
	now := time.Unix(1e9, 0)
	for i := range 3 {
		if v, _, _ := b.Allow(p, "a", fmt.Sprintf("n%d.example.com", i), now); v != NameAllowed {
			t.Fatalf("name %d refused within budget", i)
		}
	}
	v, wc, first := b.Allow(p, "a", "deadbeef.example.com", now)
	if v != NameOverBudget || wc != "*.example.com" || !first {
		t.Fatalf("4th new name: %v %q first=%v, want over budget, first", v, wc, first)
	}
	if _, _, first := b.Allow(p, "a", "cafe.example.com", now); first {
		t.Errorf("second refusal logged again")
	}
	checks := []struct {
		id, name string
		want     NameVerdict
	}{
		{"a", "n1.example.com", NameAllowed},    // seen before
		{"a", "api.example.com", NameAllowed},   // exact: never counted
		{"a", "x.example.org", NameAllowed},     // another wildcard, its own budget
		{"b", "other.example.com", NameAllowed}, // another identity
	}
	for _, c := range checks {
		if v, _, _ := b.Allow(p, c.id, c.name, now); v != c.want {
			t.Errorf("%s %s: %v, want %v", c.id, c.name, v, c.want)
		}
	}
	if v, _, _ := b.Allow(p, "a", "later.example.com", now.Add(NameBudgetWindow)); v != NameAllowed {
		t.Errorf("budget did not start afresh after the window")
	}
	q := mustParse(t, "version: 1\nlimits:\n  dns_exact_only: true\nallow:\n  - hosts: [\"*.example.com\", api.example.com]\n")
	if v, _, _ := b.Allow(q, "a", "x.example.com", now); v != NameExactOnly {
		t.Errorf("dns_exact_only: wildcard name %v", v)
	}
	if v, _, _ := b.Allow(q, "a", "api.example.com", now); v != NameAllowed {
		t.Errorf("dns_exact_only: exact name %v", v)
	}
}
