//go:build linux

package selftest_test

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/testnet"
	"github.com/egressd/egressd/selftest"
)

// TestPingReadsTheRefusal: the walls answer an echo request with an ICMP
// administratively prohibited that quotes it; the ping probe reads that
// as blocked at once instead of waiting out its timeout (an unconnected
// raw socket gets no socket error for it, IPv6 in particular). One probe
// per family: the kernel's per-address ICMP rate limit allows a burst of 6.
func TestPingReadsTheRefusal(t *testing.T) {
	l := newLab(t)
	c := l.config(3 * time.Second)
	only := selftest.Config{Timeout: c.Timeout, Dial: c.Dial, ListenICMP: c.ListenICMP, ICMP: []netip.Addr{testnet.OriginAddr4, testnet.OriginAddr6}}
	rep := run(t, only)
	if len(rep.Results) != 2 {
		t.Fatalf("want the two ping probes:\n%s", table(rep))
	}
	for _, r := range rep.Results {
		if r.Status != selftest.Pass || !strings.Contains(r.Result, "prohibited") && !strings.Contains(r.Result, "unreachable") || r.Duration > time.Second {
			t.Errorf("%s: %s %q after %v, want pass on the wall's refusal, under 1s\n%s", r.ID, r.Status, r.Result, r.Duration, table(rep))
		}
	}
}
