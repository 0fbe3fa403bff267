//go:build linux

package main

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/configs"
	"github.com/egressd/egressd/internal/testnet"
	"github.com/egressd/egressd/nft"
	"github.com/egressd/egressd/selftest"
)

// proofConfig: one allowed origin (its address unlocked by a /32, as a
// registry on the documentation range needs), transparent mode on (run's
// default). 203.0.113.53 (the topology's DNS host) is an outside address
// no rule allows.
const proofConfig = `version: 1
resolver:
  upstreams: ["203.0.113.53:53"]
upstream_ca: {CA}
allow:
  - name: origin
    hosts: [allowed.test]
    cidrs: [203.0.113.100/32]
selftest:
  timeout: 3s
  tcp: [203.0.113.53:443, 203.0.113.53:8080]
  ipv6: ["[2001:db8:2::53]:443"]
  metadata: [169.254.169.254]
  canary_name: canary.test
  canary_url: http://canary.test/
  expect_reachable: [http://allowed.test/]
`

// seedProbe is the probe script the seed tells operators to paste into
// an agent's entrypoint (raw TCP to an outside address, the canary's DNS
// and URL, the metadata address with curl -s and no -f), pointed at the
// test topology. Exit 0 and "OK: sandbox is sealed" only if nothing got
// through.
const seedProbe = `set -u
CANARY="canary.test"
LEAKED=0
fail(){ echo "LEAK: $1"; LEAKED=1; }
for hostport in 203.0.113.53/443 203.0.113.53/80; do
  ip=${hostport%/*}; port=${hostport#*/}
  if timeout 3 bash -c "exec 3<>/dev/tcp/$ip/$port" 2>/dev/null; then
    fail "raw TCP to $ip:$port succeeded"
  fi
done
if timeout 4 getent hosts "$CANARY" >/dev/null 2>&1; then
  fail "DNS resolved $CANARY"
fi
if timeout 6 curl -s --connect-timeout 4 "https://$CANARY/probe/x" >/dev/null 2>&1; then
  fail "HTTP request to canary returned"
fi
if timeout 3 curl -s --connect-timeout 2 http://169.254.169.254/latest/meta-data/ >/dev/null 2>&1; then
  fail "cloud metadata endpoint 169.254.169.254 is reachable"
fi
[ "$LEAKED" -eq 0 ] && { echo "OK: sandbox is sealed"; exit 0; } || exit 1
`

// TestRunSeedProbeSealed: inside `egressd run` (transparent mode on), the
// seed's probe script prints sealed, and `egressd probe` agrees with the
// run's own probe (exit 0). Before, transparent mode redirected every
// destination on 443 and 80 (the raw TCP handshake completed with
// egressd's listener, the metadata request got egressd's 403: an HTTP
// answer) and the script reported three leaks; `egressd probe` reported
// metadata-direct as a leak the run's own probe had passed.
func TestRunSeedProbeSealed(t *testing.T) {
	t.Parallel()
	l := newRunLab(t, proofConfig)
	out, code := l.run(t, nil, "bash", "-c", seedProbe)
	if code != 0 || !strings.Contains(out, "OK: sandbox is sealed") {
		t.Errorf("the seed's probe script inside run: exit %d\n%s", code, out)
	}
	out, code = l.run(t, nil, l.bin, "probe")
	if code != 0 {
		t.Errorf("egressd probe inside run: exit %d, want 0 (sealed, as run's own probe found)\n%s", code, out)
	}
	// transparent mode still works where a decision is possible: a client
	// that ignores the proxy settings reaches the allowed origin
	before := l.topo.Origin.Hits()
	out, code = l.run(t, nil, "curl", "-sS", "-m", "10", "--noproxy", "*", "http://allowed.test/transparent")
	if code != 0 || l.topo.Origin.Hits() == before {
		t.Errorf("transparent HTTP to the allowed origin: exit %d\n%s", code, out)
	}
	l.assertNothingLeft(t)
}

// TestTransparentDNSAnswersRedirected: in transparent mode the addresses
// the DNS filter answers for an allowed name go into the walls' dynamic
// redirect set before the client has them (a name-only rule on a public
// address has no cidrs to redirect by), and a refused name adds nothing.
func TestTransparentDNSAnswersRedirected(t *testing.T) {
	t.Parallel()
	topo := testnet.New(t, testnet.WithRecords(map[string][]netip.Addr{"allowed.test": {testnet.OriginAddr4}, "other.test": {testnet.DNSAddr4}}))
	bin := buildEgressd(t)
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	cfg := filepath.Join(dir, "transparent.yaml")
	os.WriteFile(cfg, []byte(`version: 1
listen:
  proxy: 198.51.100.1:3128
  dns: 198.51.100.1:53
  admin: 198.51.100.1:9090
  transparent: 198.51.100.1:3129
resolver:
  upstreams: ["203.0.113.53:53"]
sandbox:
  interface_prefix: `+topo.IfPrefix+`
allow:
  - name: origin
    hosts: [allowed.test]
    cidrs: [203.0.113.100/32]
`), 0o644)
	t.Cleanup(func() { nft.Down(topo.Gateway.Fd(), nft.DefaultTable) })
	defer startServe(t, topo, bin, cfg)()
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return topo.DialFromSandbox(ctx, network, "198.51.100.1:53")
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := r.LookupNetIP(ctx, "ip4", "other.test"); err == nil {
		t.Errorf("other.test resolved: no rule allows it")
	}
	if got, err := r.LookupNetIP(ctx, "ip4", "allowed.test"); err != nil || len(got) != 1 || got[0] != testnet.OriginAddr4 {
		t.Fatalf("allowed.test: %v %v", got, err)
	}
	text, err := nft.Show(topo.Gateway.Fd(), nft.DefaultTable)
	if err != nil {
		t.Fatal(err)
	}
	_, dyn, _ := strings.Cut(text, "set "+nft.SetRedirectDyn4)
	dyn, _, _ = strings.Cut(dyn, "set ")
	dyn, _, _ = strings.Cut(dyn, "chain ")
	if !strings.Contains(dyn, "0xcb007164") || strings.Contains(dyn, "0xcb007135") {
		t.Errorf("dynamic redirect set after the answers: want allowed.test's 203.0.113.100 only:\n%s", text)
	}
}

// TestRunDefaultConfigOffline: `run` on the embedded default config, with
// IPv6 on the sandbox's link and no upstream reachable (every registry
// unresolvable: an offline machine), reaches CMD: the IPv6 probes meet
// the drop (nothing redirects IPv6 to a listener that is not there), the
// write probes are untestable live, and the failed positive control is
// an outage, said loudly, not a leak. Before, run exited 3.
func TestRunDefaultConfigOffline(t *testing.T) {
	t.Parallel()
	// The default probe timeout suits a quiet machine; beside the other
	// tests a refusal may answer later, which reads as "no answer"
	// (incomplete: exit 3, seen once). Silence passes whatever the
	// timeout, so a longer one proves the same.
	timeout := regexp.MustCompile(`(?m)^  timeout: .*$`)
	if n := len(timeout.FindAllString(string(configs.Default), -1)); n != 1 {
		t.Fatalf("configs/default.yaml has %d timeout lines, want its selftest.timeout alone: update this test", n)
	}
	l := newRunLab(t, timeout.ReplaceAllString(string(configs.Default), "  timeout: 3s"))
	start := time.Now()
	out, code := l.run(t, nil, "sh", "-c", "echo CMD-RAN")
	t.Logf("run on the default config offline, start to exit: %v", time.Since(start).Round(time.Millisecond))
	if code != 0 || !strings.Contains(out, "CMD-RAN") {
		t.Fatalf("run on the default config offline: exit %d\n%s", code, out)
	}
	if strings.Contains(out, "LEAK") || strings.Contains(out, "not sealed") {
		t.Errorf("an outage reported as a leak:\n%s", out)
	}
	for _, want := range []string{"untestable live", "positive control"} {
		if !strings.Contains(out, want) {
			t.Errorf("run does not say %q:\n%s", want, out)
		}
	}
	if t.Failed() {
		if hs, _, err := selftest.ReadHistory(filepath.Join(l.state, selftest.HistoryFile)); err == nil && len(hs) > 0 {
			t.Logf("run's probe:\n%s", tableOf(hs[len(hs)-1].Report))
		}
	}
}

// TestRunIdentity: `run --identity NAME` logs the sandbox's decisions as
// NAME (trial runs of one agent add up for `suggest --identity NAME`),
// and suggest leaves the run's own probe traffic out.
func TestRunIdentity(t *testing.T) {
	t.Parallel()
	l := newRunLab(t, runConfig)
	logFile := filepath.Join(l.dir, "decisions.jsonl")
	l.run(t, []string{"--identity", "agent-x", "--log", logFile}, "curl", "-sS", "-m", "10", "http://unlisted.test/x")
	b, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for line := range strings.SplitSeq(string(b), "\n") {
		found = found || strings.Contains(line, `"identity":"agent-x"`) && strings.Contains(line, `"host":"unlisted.test"`)
	}
	if !found {
		t.Fatalf("the run's decision for unlisted.test is not logged as agent-x:\n%s", b)
	}
	code, sug, errs := runCmd("suggest", "--log", logFile, "--identity", "agent-x")
	if code != exitOK || !strings.Contains(sug, "hosts: [unlisted.test]") || strings.Contains(sug, "canary") || strings.Contains(sug, "egressd-selftest-unlisted") {
		t.Errorf("suggest --identity agent-x on the run's log: exit %d\n%s%s", code, sug, errs)
	}
	if _, code := l.run(t, []string{"--identity", "egressd-selftest"}, "true"); code != exitUsage {
		t.Errorf("--identity egressd-selftest: exit %d, want %d (that name labels egressd's own probes)", code, exitUsage)
	}
}
