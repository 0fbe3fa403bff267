package runbox

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/egressd/egressd/policy"
)

// TestWithIdentity: `run --identity NAME` names the run's sandbox
// addresses NAME, so its decisions are logged (and trial runs add up)
// under NAME and rules naming NAME apply; the config's own policy is
// untouched, an identity of that name keeps its evaluation mark, and a
// probe identity or a malformed name is refused.
func TestWithIdentity(t *testing.T) {
	t.Parallel()
	p, err := policy.Parse(strings.NewReader("version: 1\nidentities:\n  - {name: agent-a, cidrs: [198.51.100.0/24], evaluation: true}\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sb4, sb6 := netip.MustParseAddr("10.237.0.2"), netip.MustParseAddr("fd00:e9e5::2")
	for _, name := range []string{"agent-a", "agent-b"} {
		q, err := WithIdentity(p, name, []netip.Addr{sb4, sb6})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range []netip.Addr{sb4, sb6} {
			if got := q.SourceIdentity(a); got != name {
				t.Errorf("%s: %s is %q in the run's policy", name, a, got)
			}
		}
		if got := p.SourceIdentity(sb4); got != sb4.String() {
			t.Errorf("%s: the config's policy changed: %s is %q", name, sb4, got)
		}
		if q.Evaluation(name) != (name == "agent-a") {
			t.Errorf("%s: evaluation %v", name, q.Evaluation(name))
		}
	}
	for _, bad := range []string{"", policy.SelftestIdentity, policy.ProbeIdentityPrefix + "x", "a b", strings.Repeat("a", 65)} {
		if _, err := WithIdentity(p, bad, []netip.Addr{sb4}); err == nil {
			t.Errorf("identity %q accepted", bad)
		}
	}
}
