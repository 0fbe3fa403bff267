//go:build linux

package main

import (
	"context"
	"io"

	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/testnet"
	"github.com/egressd/egressd/nft"
	"github.com/miekg/dns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// TestServeWalls runs `egressd serve --walls` in the gateway namespace of
// the test topology: the sandbox reaches the origin only through the proxy,
// and a wall removed behind egressd's back is put back by the drift check.
func TestServeWalls(t *testing.T) {
	t.Parallel()
	topo := testnet.New(t, testnet.WithRecords(map[string][]netip.Addr{"allowed.test": {testnet.OriginAddr4}}))
	bin := buildEgressd(t)
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	cfg := filepath.Join(dir, "egressd.yaml")
	os.WriteFile(cfg, []byte(`version: 1
listen:
  proxy: 198.51.100.1:3128
  dns: 198.51.100.1:53
  admin: 198.51.100.1:9090
resolver:
  upstreams: ["203.0.113.53:53"]
sandbox:
  interface_prefix: `+topo.IfPrefix+`
allow:
  - name: origin
    hosts: [allowed.test]
    cidrs: [203.0.113.0/24]
    pages: ["*"]
`), 0o644)
	t.Cleanup(func() { nft.Down(topo.Gateway.Fd(), nft.DefaultTable) }) // the walls outlive serve by design
	serve := startServeIn(t, topo, bin, "--walls", "--walls-interval", "200ms", "--no-selftest", "--allow-unverified", "--config", cfg, "--state-dir", filepath.Join(dir, "state"))
	proxyURL := &url.URL{Scheme: "http", Host: "198.51.100.1:3128"}
	client := topo.HTTPClientInSandbox(proxyURL, nil)
	client.Timeout = 5 * time.Second
	resp, err := client.Get("http://allowed.test/walled")
	if err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("through the proxy: %d", resp.StatusCode)
	}
	// HTTPS through the proxy (a host-only rule: spliced after the SNI check)
	tlsClient := topo.HTTPClientInSandbox(proxyURL, topo.CA.Pool)
	if r, err := tlsClient.Get("https://allowed.test/walled-tls"); err != nil || r.StatusCode != 200 {
		t.Fatalf("HTTPS through the proxy: %v %v", r, err)
	} else {
		r.Body.Close()
	}
	// egressd's DNS answers the allowed name and NXDOMAINs the rest; the
	// internet's resolver is unreachable directly
	query := func(server, name string) (*dns.Msg, error) {
		c, err := topo.DialFromSandbox(context.Background(), "udp", server)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		m := new(dns.Msg)
		m.SetQuestion(dns.Fqdn(name), dns.TypeA)
		cl := &dns.Client{Timeout: 2 * time.Second}
		resp, _, err := cl.ExchangeWithConnContext(context.Background(), m, &dns.Conn{Conn: c})
		return resp, err
	}
	if resp, err := query("198.51.100.1:53", "allowed.test"); err != nil || resp.Rcode != dns.RcodeSuccess || len(resp.Answer) != 1 {
		t.Errorf("egressd DNS, allowed name: %v %v", resp, err)
	}
	if resp, err := query("198.51.100.1:53", "canary.example.com"); err != nil || resp.Rcode != dns.RcodeNameError {
		t.Errorf("egressd DNS, unlisted name: %v %v", resp, err)
	}
	if _, err := query("203.0.113.53:53", "allowed.test"); err == nil {
		t.Errorf("the internet's resolver answered the sandbox directly")
	}
	direct := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
		defer cancel()
		c, err := topo.DialFromSandbox(ctx, "tcp", "203.0.113.100:80")
		if err == nil {
			c.Close()
		}
		return err
	}
	if direct() == nil {
		t.Fatal("direct TCP from the sandbox connected with the walls up")
	}
	// behind egressd's back: remove the table; the direct route opens...
	if err := nft.Down(topo.Gateway.Fd(), nft.DefaultTable); err != nil {
		t.Fatal(err)
	}
	// ...and the drift check closes it again
	if _, err := serve.wait("walls drifted from the spec and were re-applied"); err != nil {
		t.Fatalf("the removed table was not re-applied: %v", err)
	}
	if direct() == nil {
		t.Fatal("direct TCP connected after the repair")
	}
	// the admin endpoint is reached from the gateway itself, over its lo
	if h, err := netlink.NewHandleAt(netns.NsHandle(topo.Gateway.Fd())); err == nil {
		if lo, err := h.LinkByName("lo"); err == nil {
			h.LinkSetUp(lo)
		}
		h.Close()
	}
	var metrics string
	gwClient := &http.Client{Transport: &http.Transport{DialContext: topo.GatewayDialer().DialContext}, Timeout: 5 * time.Second}
	if r, err := gwClient.Get("http://198.51.100.1:9090/metrics"); err == nil {
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		metrics = string(b)
	}
	// the walls' counters are on /metrics too: the direct attempts above
	// were dropped and counted
	if !strings.Contains(metrics, "egressd_walls_readable 1") || !strings.Contains(metrics, `egressd_walls_packets_total{counter="drop_fwd"}`) {
		t.Errorf("walls counters not exported: %q %q", grepLine(metrics, "egressd_walls_readable"), grepLine(metrics, "egressd_walls_packets_total"))
	}
	if !strings.Contains(metrics, "egressd_walls_drift_total 1") && !strings.Contains(metrics, "egressd_walls_drift_total 2") {
		t.Errorf("drift metric: %q", grepLine(metrics, "egressd_walls_drift_total"))
	}
}

func grepLine(s, prefix string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}
