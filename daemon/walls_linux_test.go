//go:build linux

package daemon

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/egressd/egressd/internal/testnet"
	"github.com/egressd/egressd/nft"
	"github.com/egressd/egressd/policy"
)

// TestApplyRemovesALeftTrial, in a real gateway namespace: egressd stopped
// in the middle of a reload leaves the candidate's trial on the probe
// link beside the walls in force (Try without EndTry). The next start's
// Apply takes the trial table and the skip rule away in the transaction
// that ensures the walls, hands the trial over once as drift (LeftTrial,
// which the start reports), and leaves walls that Check reads as clean.
func TestApplyRemovesALeftTrial(t *testing.T) {
	t.Parallel()
	topo := testnet.New(t)
	gw := topo.Gateway.Fd()
	inForce := nft.Spec{
		IfPrefixes: []string{topo.IfPrefix},
		Gateways:   []netip.Addr{testnet.GatewayAddr4, testnet.GatewayAddr6},
		ProxyPort:  3128, DNSPort: 53,
		HighRisk: []netip.Prefix{netip.MustParsePrefix("169.254.169.254/32")},
	}
	cand := inForce
	cand.HighRisk = append(slices.Clone(inForce.HighRisk), netip.MustParsePrefix("169.254.170.2/32"))
	verified, candidate := &policy.Policy{}, &policy.Policy{}
	spec := func(p *policy.Policy) (nft.Spec, error) {
		if p == candidate {
			return cand, nil
		}
		return inForce, nil
	}
	ctx := context.Background()
	trial := nft.TrialTable(inForce.TableName())

	first := &nftWalls{spec: spec, ns: gw}
	if err := first.Apply(ctx, verified); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if left := first.LeftTrial(); left != nil {
		t.Fatalf("LeftTrial on fresh walls = %q, want none", left)
	}
	if err := first.Try(ctx, candidate, topo.SandboxLink.GatewayName); err != nil {
		t.Fatalf("Try: %v", err)
	}
	if ts, err := nft.Tables(gw, trial); err != nil || !slices.Contains(ts, trial) {
		t.Fatalf("after Try: tables %q, %v; want %s (the trial did not happen)", ts, err, trial)
	}
	if drift, err := nft.Check(gw, inForce); err != nil || len(drift) == 0 {
		t.Fatalf("Check beside a trial: drift %q, %v; want the skip rule read as drift", drift, err)
	}

	// The process ends here; the next one starts with the verified policy.
	next := &nftWalls{spec: spec, ns: gw}
	if err := next.Apply(ctx, verified); err != nil {
		t.Fatalf("Apply after a left trial: %v", err)
	}
	left := next.LeftTrial()
	if len(left) == 0 || !strings.Contains(strings.Join(left, "; "), trial) {
		t.Errorf("LeftTrial after Apply = %q, want the trial table %s named", left, trial)
	}
	if again := next.LeftTrial(); again != nil {
		t.Errorf("LeftTrial a second time = %q, want nil (handed over once)", again)
	}
	if ts, err := nft.Tables(gw, trial); err != nil || slices.Contains(ts, trial) {
		t.Errorf("after Apply: tables %q, %v; want no %s", ts, err, trial)
	}
	if drift, err := nft.Check(gw, inForce); err != nil || len(drift) != 0 {
		t.Errorf("Check after Apply: drift %q, %v; want clean walls (no skip rule left)", drift, err)
	}
}
