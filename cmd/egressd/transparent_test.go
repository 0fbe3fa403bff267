//go:build linux

package main

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/testnet"
	"github.com/egressd/egressd/nft"
)

// startServe runs `egressd serve --walls` in the gateway namespace with cfg
// until it is ready.
func startServe(t *testing.T, topo *testnet.Topo, bin, cfg string) func() {
	t.Helper()
	s := startServeIn(t, topo, bin, "--walls", "--no-selftest", "--allow-unverified", "--config", cfg, "--state-dir", filepath.Join(filepath.Dir(cfg), "state"))
	return s.stop
}

// TestTransparentMode: a client with no proxy settings, in the sandbox,
// reaches an allowed origin over HTTP and HTTPS through the redirect, and is
// refused an unlisted one; without the redirect it cannot connect at all.
func TestTransparentMode(t *testing.T) {
	t.Parallel()
	topo := testnet.New(t)
	bin := buildEgressd(t)
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	base := `version: 1
listen:
  proxy: 198.51.100.1:3128
  dns: 198.51.100.1:53
  admin: 198.51.100.1:9090
TRANSPARENT
resolver:
  upstreams: ["203.0.113.53:53"]
sandbox:
  interface_prefix: ` + topo.IfPrefix + `
allow:
  - name: origin
    hosts: [allowed.test]
    cidrs: [203.0.113.0/24]
    pages: ["*"]
`
	topo.DNS.Set("allowed.test", testnet.OriginAddr4)
	topo.DNS.Set("other.test", testnet.OriginAddr4)
	t.Cleanup(func() { nft.Down(topo.Gateway.Fd(), nft.DefaultTable) })

	// a client that ignores proxies: every name goes straight to the origin address
	client := &http.Client{Timeout: 4 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			_, port, _ := net.SplitHostPort(addr)
			return topo.DialFromSandbox(ctx, network, netip.AddrPortFrom(testnet.OriginAddr4, mustPort(port)).String())
		},
		TLSClientConfig: &tls.Config{RootCAs: topo.CA.Pool},
	}}
	get := func(u string) (int, string, error) {
		resp, err := client.Get(u)
		if err != nil {
			return 0, "", err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("X-Egressd-Deny"), nil
	}

	cfg := filepath.Join(dir, "transparent.yaml")
	os.WriteFile(cfg, []byte(strings.Replace(base, "TRANSPARENT", "  transparent: 198.51.100.1:3129\n  transparent_http: 198.51.100.1:3130", 1)), 0o644)
	stop := startServe(t, topo, bin, cfg)
	before := topo.Origin.Hits()
	if code, _, err := get("http://allowed.test/t"); err != nil || code != 200 {
		t.Errorf("transparent HTTP to the allowed origin: %d %v", code, err)
	}
	if topo.Origin.Hits() == before {
		t.Errorf("the origin saw nothing")
	}
	if code, reason, err := get("http://other.test/t"); err != nil || code != 403 || reason != "no-rule" {
		t.Errorf("transparent HTTP to an unlisted host: %d %q %v", code, reason, err)
	}
	tlsBefore := topo.TLS.Hits()
	if code, _, err := get("https://allowed.test/t"); err != nil || code != 200 || topo.TLS.Hits() == tlsBefore {
		t.Errorf("transparent TLS to the allowed origin: %d %v", code, err)
	}
	if _, _, err := get("https://other.test/t"); err == nil {
		t.Errorf("transparent TLS to an unlisted host succeeded")
	}
	// other ports stay dropped
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	if c, err := topo.DialFromSandbox(ctx, "tcp", "203.0.113.100:8080"); err == nil {
		c.Close()
		t.Errorf("direct TCP to port 8080 connected")
	}
	cancel()
	// The client's idle keep-alive tunnels are live connections to serve,
	// whose drain would wait its whole grace (30 s) for them.
	client.CloseIdleConnections()
	stop()

	// negative control: the same walls without the redirect: no connection at all
	cfg2 := filepath.Join(dir, "plain.yaml")
	os.WriteFile(cfg2, []byte(strings.Replace(base, "TRANSPARENT\n", "", 1)), 0o644)
	stop = startServe(t, topo, bin, cfg2)
	defer stop()
	if _, _, err := get("http://allowed.test/t"); err == nil {
		t.Errorf("without the redirect a proxy-unaware client still connected")
	}
}

func mustPort(s string) uint16 {
	var p uint16
	for _, c := range s {
		p = p*10 + uint16(c-'0')
	}
	return p
}
