package policy

import (
	"fmt"
	"strings"
	"testing"
)

// TestLints: each mistake that opens a door (or a rule that does nothing)
// gets one warning naming both rules or the key; the look-alike configs
// that are fine get none.
func TestLints(t *testing.T) {
	cases := []struct {
		name string
		yaml string
		want []string // substrings of one warning; nil: no warning
	}{
		{"shadowed by a wildcard with every page", `
allow:
  - name: gh
    hosts: ["*.github.com"]
    pages: ["*"]
  - name: gh-api-read
    hosts: [api.github.com]
    pages: [read]
`, []string{"allow[1]", `"gh-api-read"`, "allow[0]", `"gh"`, "api.github.com", "shadowed"}},
		{"narrow rule first is not shadowed", `
allow:
  - name: gh-api-read
    hosts: [api.github.com]
    pages: [read]
  - name: gh
    hosts: ["*.github.com"]
    pages: ["*"]
`, nil},
		{"wildcard shadowed by a wider wildcard", `
allow:
  - name: all-example
    hosts: ["*.example.com"]
  - name: sub
    hosts: ["*.sub.example.com"]
    pages: [read]
`, []string{"allow[1]", "allow[0]", "*.sub.example.com"}},
		{"other ports do not shadow", `
allow:
  - name: ssh
    hosts: ["*.example.com"]
    ports: [22]
    pages: ["*"]
    tls: false
  - name: web
    hosts: [git.example.com]
    pages: [read]
`, nil},
		{"an identity's rule does not shadow everyone's", `
identities:
  - name: a
    cidrs: [10.0.0.1/32]
allow:
  - name: only-a
    hosts: [example.org]
    pages: ["*"]
    identities: [a]
  - name: everyone
    hosts: [example.org]
    pages: [read]
`, nil},
		{"everyone's rule shadows an identity's", `
identities:
  - name: a
    cidrs: [10.0.0.1/32]
allow:
  - name: everyone
    hosts: [example.org]
    pages: [read]
  - name: only-a
    hosts: [example.org]
    pages: ["*"]
    identities: [a]
`, []string{"allow[1]", `"only-a"`, "allow[0]", `"everyone"`, "example.org"}},
		{"allowed and denied", `
allow:
  - name: paste
    hosts: [docs.example.org, paste.example.com]
deny:
  hosts: [other.example.net, paste.example.com]
`, []string{"allow[0]", `"paste"`, "deny.hosts[1]", "paste.example.com"}},
		{"allowed under a denied wildcard", `
allow:
  - name: tracker
    hosts: [a.tracker.example]
deny:
  hosts: ["*.tracker.example"]
`, []string{"allow[0]", `"tracker"`, "deny.hosts[0]", "a.tracker.example"}},
		{"a carve-out from an allowed wildcard is fine", `
allow:
  - name: example
    hosts: ["*.example.com"]
deny:
  hosts: [secret.example.com]
`, nil},
		{"every host", `
allow:
  - name: open
    hosts: ["*"]
    pages: ["*"]
`, []string{"allow[0]", `"open"`, "every host"}},
		{"every address", `
allow:
  - name: open4
    hosts: [example.org]
    cidrs: [0.0.0.0/0]
`, []string{"allow[0]", `"open4"`, "0.0.0.0/0"}},
		{"every IPv6 address", `
allow:
  - name: open6
    hosts: [example.org]
    cidrs: ["::/0"]
`, []string{"allow[0]", `"open6"`, "::/0"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := Parse(strings.NewReader("version: 1\n"+c.yaml), "t.yaml")
			if err != nil {
				t.Fatal(err)
			}
			got := p.Lints()
			if c.want == nil {
				if len(got) != 0 {
					t.Errorf("lints %q, want none", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("lints %q, want exactly one", got)
			}
			for _, s := range c.want {
				if !strings.Contains(got[0], s) {
					t.Errorf("lint %q does not name %q", got[0], s)
				}
			}
		})
	}
}

// TestLintsBounded: a rule with a big host list is scanned only up to
// lintScan hosts, so validate stays fast on 40M-name policies.
func TestLintsBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("version: 1\nallow:\n  - name: wide\n    hosts: [\"*.example.com\"]\n  - name: big\n    hosts:\n")
	for i := range lintScan + 10 {
		fmt.Fprintf(&b, "      - h%d.example.org\n", i)
	}
	b.WriteString("      - late.example.com\n")
	p, err := Parse(strings.NewReader(b.String()), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Lints(); len(got) != 0 {
		t.Errorf("lints %q: a host past the scan bound was checked", got)
	}
}

// TestShadowedIsReal: the shadow Lints names is what decides: with the
// issue's config a POST to api.github.com is allowed by the wildcard rule,
// never refused by the read-only one below it.
func TestShadowedIsReal(t *testing.T) {
	p, err := Parse(strings.NewReader(`version: 1
allow:
  - name: gh
    hosts: ["*.github.com"]
    pages: ["*"]
  - name: gh-api-read
    hosts: [api.github.com]
    pages: [read]
`), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tg, err := ParseURL("https://api.github.com/repos/x/y/issues")
	if err != nil {
		t.Fatal(err)
	}
	d := p.DecideRequest(&tg, "POST", "application/json", 10)
	if !d.Allow || d.RuleName() != "gh" {
		t.Fatalf("POST decided %v by %q: the shadow is not what the lint says", d.Allow, d.RuleName())
	}
	if l := p.Lints(); len(l) != 1 || !strings.Contains(l[0], `"gh-api-read"`) {
		t.Errorf("lints %q", l)
	}
}
