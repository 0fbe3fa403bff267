//go:build linux

package nft

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/nftables"

	"github.com/egressd/egressd/internal/testnet"
)

// TestTrialSkipLeftAlone: the trial's skip rule left in the table in force
// without its trial table (the trial table deleted by hand, or by anything
// but EndTry and Settle) lets the link it names through unjudged. Check
// must read it as drift, and Ensure must remove it, so that the drift
// check repairs the wall instead of passing it.
func TestTrialSkipLeftAlone(t *testing.T) {
	topo := testnet.New(t)
	gatewayServices(t, topo)
	gw := topo.Gateway.Fd()
	ap := netip.AddrPortFrom
	proxy := probe{grpService, "tcp", ap(testnet.GatewayAddr4, leakProxyPort)}
	direct := probe{grpInet, "tcp", ap(testnet.OriginAddr4, 80)}
	spec := Spec{
		IfPrefixes: []string{topo.IfPrefix},
		Gateways:   []netip.Addr{testnet.GatewayAddr4, testnet.GatewayAddr6},
		ProxyPort:  leakProxyPort, DNSPort: leakDNSPort,
		HighRisk: pfx("169.254.169.254/32"),
	}
	if err := Apply(gw, spec); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if err := TryOn(gw, spec.TableName(), spec, topo.SandboxLink.GatewayName); err != nil {
		t.Fatalf("TryOn: %v", err)
	}
	c, err := nftables.New(nftables.WithNetNSFd(gw))
	if err != nil {
		t.Fatal(err)
	}
	c.DelTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: TrialTable(spec.TableName())})
	if err := c.Flush(); err != nil {
		t.Fatalf("delete the trial table alone: %v", err)
	}
	flushNeigh6(t, topo.Sandbox, topo.Gateway)
	open := openProbes(t, topo, []probe{proxy, direct})
	if !slices.Contains(open, direct.String()) {
		t.Fatalf("open probes %q: the skip rule alone should let %s through (the attack did not happen)", open, direct)
	}
	drift, err := Check(gw, spec)
	if err != nil || len(drift) == 0 {
		t.Fatalf("Check with the skip rule left alone: drift %q, err %v; want drift", drift, err)
	}
	t.Logf("drift read: %s", strings.Join(drift, "; "))
	if _, err := Ensure(gw, spec); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	flushNeigh6(t, topo.Sandbox, topo.Gateway)
	if open := openProbes(t, topo, []probe{proxy, direct}); slices.Contains(open, direct.String()) {
		t.Errorf("after Ensure: open probes %q, want %s refused", open, direct)
	}
}
