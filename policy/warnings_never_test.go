package policy

import (
	"strings"
	"testing"
)

// TestWarningsNeverAllow: a rule naming a high-risk host can never let it
// through (high-risk is decided first): validate, serve and run warn,
// naming the rule and the class; a rule without one gets no such warning.
func TestWarningsNeverAllow(t *testing.T) {
	p, err := Parse(strings.NewReader(`version: 1
allow:
  - name: meta
    hosts: [metadata.google.internal, docs.example.org]
  - name: fine
    hosts: [example.org]
`), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range p.Warnings() {
		if strings.Contains(w, "can never allow") {
			got = append(got, w)
		}
	}
	if len(got) != 1 || !strings.Contains(got[0], `"meta"`) || !strings.Contains(got[0], "metadata.google.internal") || !strings.Contains(got[0], "high-risk") {
		t.Errorf("warnings %q, want one naming rule meta, its host and the class high-risk", got)
	}
}
