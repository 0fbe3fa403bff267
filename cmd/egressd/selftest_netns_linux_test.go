//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"cmp"

	"github.com/egressd/egressd/daemon"
	"github.com/egressd/egressd/internal/testnet"
	"github.com/egressd/egressd/nft"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/sandbox"
	"github.com/egressd/egressd/selftest"
)

// These tests run the egressd binary itself inside the gateway namespace of
// the test topology: `serve --walls` as the gateway, and `selftest` and
// `report` beside it, which build their own probe namespace there, wired
// like a sandbox on the sandbox interface prefix.

// stConfig is the deployment under test. The probe namespace takes a slot
// of pool4 (198.51.100.128/25, inside the sandbox side of the topology) on
// the walls' interface prefix. {EXTRA} takes a negative control's rule.
const stConfig = `version: 1
listen:
  proxy: 198.51.100.1:3128
  dns: 198.51.100.1:53
  admin: 198.51.100.1:9090
resolver:
  upstreams: ["203.0.113.53:53"]
upstream_ca: {CA}
sandbox:
  interface_prefix: {PREFIX}
  pool4: 198.51.100.128/25
  pool6: 2001:db8:3::/64
allow:
  - name: web
    hosts: [allowed.test]
    cidrs: [203.0.113.0/24, 2001:db8::/32]
    pages: ["*"]
  - name: pypi
    hosts: [pypi.test]
    cidrs: [203.0.113.0/24, 2001:db8::/32]
    mirror: pypi
  - name: app
    hosts: [app.test]
    cidrs: [203.0.113.0/24, 2001:db8::/32]
    pages: [read, download]
{EXTRA}
selftest:
  interval: 1h
  timeout: 3s
  tcp: ["203.0.113.100:80", "203.0.113.100:443", "203.0.113.100:22", "203.0.113.100:25", "203.0.113.100:53", "203.0.113.100:8080", "203.0.113.100:4444"]
  udp: ["203.0.113.100:53", "203.0.113.100:123"]
  ipv6: ["[2001:db8:2::100]:443"]
  resolvers: ["203.0.113.53:53"]
  canary_name: canary.test
  canary_url: http://canary-web.test/
  metadata: [169.254.169.254]
  expect_reachable: [http://allowed.test/, https://allowed.test/, https://app.test/]
`

type stLab struct {
	topo  *testnet.Topo
	bin   string
	dir   string
	cfg   string
	state string
	serve *serveProc
	// wrap runs serve under another command (setpriv ... --); until is
	// the log line startServe waits for (default: "ready").
	wrap  []string
	until string
	// timeout, when set, replaces the config's selftest.timeout (3s: a
	// sealed verdict under a loaded parallel suite); a measurement sets
	// the embedded default config's.
	timeout string
}

func newSTLab(t *testing.T) *stLab {
	t.Helper()
	origin := []netip.Addr{testnet.OriginAddr4, testnet.OriginAddr6}
	topo := testnet.New(t, testnet.WithRecords(map[string][]netip.Addr{
		"allowed.test": origin, "pypi.test": origin, "app.test": origin, "canary.test": origin, "canary-web.test": origin,
	}))
	// serve's admin endpoint is reached from the gateway itself, over lo
	h, err := netlink.NewHandleAt(netns.NsHandle(topo.Gateway.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	if lo, err := h.LinkByName("lo"); err == nil {
		h.LinkSetUp(lo)
	}
	h.Close()
	l := &stLab{topo: topo, bin: buildEgressd(t), dir: t.TempDir()}
	// nobody runs the binary and reads the config too
	for _, d := range []string{l.dir, filepath.Dir(l.dir)} { // t.TempDir's, ours; buildEgressd made the binary's readable
		os.Chmod(d, 0o755)
	}
	l.state = filepath.Join(l.dir, "state")
	ca := filepath.Join(l.dir, "upstream-ca.pem")
	os.WriteFile(ca, topo.CA.CertPEM, 0o644)
	l.cfg = l.writeConfig(t, "")
	return l
}

func (l *stLab) writeConfig(t *testing.T, extra string) string {
	t.Helper()
	cfg := strings.NewReplacer("{CA}", filepath.Join(l.dir, "upstream-ca.pem"), "{PREFIX}", l.topo.IfPrefix, "{EXTRA}", extra).Replace(stConfig)
	if l.timeout != "" {
		cfg = strings.Replace(cfg, "  timeout: 3s\n", "  timeout: "+l.timeout+"\n", 1)
	}
	path := filepath.Join(l.dir, "egressd.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// egressd runs the binary in the gateway namespace and returns its exit
// code, stdout and stderr.
func (l *stLab) egressd(t *testing.T, cred *syscall.Credential, args ...string) (int, string, string) {
	t.Helper()
	return l.egressdIn(t, l.topo.Gateway, cred, nil, args...)
}

// egressdIn runs the binary in namespace ns (the gateway, or the sandbox)
// with env (nil: this process's).
func (l *stLab) egressdIn(t *testing.T, ns *sandbox.NS, cred *syscall.Credential, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := sandbox.NSExecCommandAs(l.bin, ns.Path(), "", cred, append([]string{l.bin}, args...))
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	timer := time.AfterFunc(60*time.Second, func() { cmd.Process.Kill() })
	defer timer.Stop()
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("egressd %v: %v", args, err)
	}
	return code, out.String(), errb.String()
}

// startServe runs `egressd serve --walls` in the gateway and waits until
// it is ready.
func (l *stLab) startServe(t *testing.T, extra ...string) {
	t.Helper()
	t.Cleanup(func() { nft.Down(l.topo.Gateway.Fd(), nft.DefaultTable) }) // the walls outlive serve by design
	l.serve = startServeWrapped(t, l.topo, l.bin, l.wrap, cmp.Or(l.until, `"msg":"ready"`), append([]string{"--walls", "--walls-interval", "1h", "--config", l.cfg, "--state-dir", l.state}, extra...)...)
}

// readyz returns serve's readiness as the admin endpoint says it.
func (l *stLab) readyz(t *testing.T) (int, string) {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DialContext: l.topo.GatewayDialer().DialContext}, Timeout: 5 * time.Second}
	resp, err := c.Get("http://198.51.100.1:9090/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

func selftestJSON(t *testing.T, out, errs string) *selftest.Report {
	t.Helper()
	var rep selftest.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("selftest --json: %v\nstdout: %s\nstderr: %s", err, out, errs)
	}
	return &rep
}

func failureIDs(rep *selftest.Report) []string {
	var ids []string
	for _, r := range rep.Failures() {
		ids = append(ids, r.ID)
	}
	slices.Sort(ids)
	return ids
}

func tableOf(rep *selftest.Report) string {
	var b bytes.Buffer
	rep.WriteTable(&b)
	return b.String()
}

// TestSelftestCommand: `egressd selftest` against `serve --walls` finds
// the deployment sealed (exit 0), names a hole opened in the walls (exit
// 1), records both runs, and `report` shows them with the walls' counters;
// without root it runs only the proxy-level probes, says so, and exits 2.
func TestSelftestCommand(t *testing.T) {
	t.Parallel()
	l := newSTLab(t)
	l.startServe(t, "--no-selftest", "--allow-unverified") // proven by the command below

	start := time.Now()
	code, out, errs := l.egressd(t, nil, "selftest", "--json", "--config", l.cfg, "--state-dir", l.state)
	rep := selftestJSON(t, out, errs)
	t.Logf("selftest: %s; the whole command, probe namespace included, took %v", rep.Summary(), time.Since(start).Round(time.Millisecond))
	if code != exitOK || !rep.Sealed() {
		t.Fatalf("sealed deployment: exit %d, %s\n%s\n%s", code, rep.Outcome(), tableOf(rep), errs)
	}
	for _, want := range []string{"tcp/203.0.113.100:443", "icmp/203.0.113.53", "dns-canary/canary.test", "mirror-publish/pypi", "page-login/app", "sni-mismatch/allowed.test:443", "host-trick", "expect/https://app.test/"} {
		if !slices.ContainsFunc(rep.Results, func(r selftest.Result) bool { return r.ID == want }) {
			t.Errorf("the derived catalog lacks %s", want)
		}
	}
	if n := l.topo.Metadata.Hits(); n != 0 {
		t.Errorf("metadata server saw %d requests", n)
	}

	// negative control: one hole in the walls, named and nothing else
	testnet.InsertAccept(t, l.topo.Gateway.Fd(), nft.DefaultTable, unix.IPPROTO_TCP, netip.MustParseAddrPort("203.0.113.100:443"))
	code, out, errs = l.egressd(t, nil, "selftest", "--json", "--config", l.cfg, "--state-dir", l.state)
	rep = selftestJSON(t, out, errs)
	if got := failureIDs(rep); code != exitDeny || !slices.Equal(got, []string{"tcp/203.0.113.100:443"}) {
		t.Errorf("hole in the walls: exit %d, failures %q, want 1 and [tcp/203.0.113.100:443]\n%s", code, got, tableOf(rep))
	}
	code, out, _ = l.egressd(t, nil, "selftest", "--config", l.cfg, "--state-dir", l.state)
	if code != exitDeny || !strings.Contains(out, "LEAK tcp/203.0.113.100:443: a direct TCP connection to 203.0.113.100:443 succeeded") {
		t.Errorf("table output: exit %d:\n%s", code, out)
	}

	code, out, errs = l.egressd(t, nil, "report", "--config", l.cfg, "--state-dir", l.state)
	for _, want := range []string{"3 self-test runs", "2 leaks found", "| selftest | namespace | sealed |", "| selftest | namespace | leak |", "counter drop_fwd packets", "**LEAK** `tcp/203.0.113.100:443`"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q (exit %d, %s):\n%s", want, code, errs, out)
		}
	}

	// without root: the probes through the proxy and the resolver run from
	// loopback; the direct routes are reported as not run, never as passed
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
	// a user's own state dir, holding serve's CA certificate (public: what
	// `egressd ca export` prints) for the inspected positive control
	st := filepath.Join(l.dir, "nobody")
	os.MkdirAll(filepath.Join(st, "ca"), 0o755)
	if pem, err := os.ReadFile(filepath.Join(l.state, "ca", "ca.pem")); err == nil {
		os.WriteFile(filepath.Join(st, "ca", "ca.pem"), pem, 0o644)
	}
	os.Chmod(st, 0o777)
	code, out, errs = l.egressd(t, nobody, "selftest", "--json", "--config", l.cfg, "--state-dir", st)
	rep = selftestJSON(t, out, errs)
	if code != exitUsage || rep.Outcome() != selftest.OutcomeIncomplete || !strings.Contains(errs, "not root") {
		t.Errorf("as nobody: exit %d, %s, stderr %q, want 2, incomplete, a hint\n%s", code, rep.Outcome(), errs, tableOf(rep))
	}
	for _, r := range rep.Results {
		direct := strings.HasPrefix(r.Route, "direct")
		if direct && (r.Status != selftest.NotRun || !strings.Contains(r.Detail, "needs root")) || !direct && r.Status != selftest.Pass {
			t.Errorf("as nobody: %s (%s): %s %s", r.ID, r.Route, r.Status, r.Detail)
		}
	}
}

// TestServeSelftest: serve proves the walls at boot (not ready until the
// first self-test is sealed) and drops a reload's candidate that would
// open a hole (verified beside the policy in force: the walls do not
// change), keeping the old policy and walls.
func TestServeSelftest(t *testing.T) {
	t.Parallel()
	l := newSTLab(t)
	l.startServe(t)
	code, why := l.readyz(t) // serve logged "ready": the boot self-test is done
	if code != http.StatusOK || !strings.Contains(why, "sealed") {
		t.Fatalf("after boot: /readyz %d %q, want 200 sealed", code, why)
	}

	// the reload allowlists the canary host: the new policy leaks. (serve
	// watches the file; a SIGHUP as well would make two reloads.)
	l.writeConfig(t, "  - name: canary\n    hosts: [canary-web.test]\n    cidrs: [203.0.113.0/24]\n    pages: [\"*\"]")
	logs, err := l.serve.wait(`"msg":"reload `)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs, "candidate failed its self-test and was dropped") || !strings.Contains(logs, "the new policy leaks: http-canary") {
		t.Fatalf("reload with a hole: its candidate not dropped naming http-canary:\n%s", logs)
	}
	// the old policy holds: the canary is refused through the proxy...
	client := l.topo.HTTPClientInSandbox(&url.URL{Scheme: "http", Host: "198.51.100.1:3128"}, nil)
	resp, err := client.Get("http://canary-web.test/after-rollback")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("canary after the rollback: %d, want 403", resp.StatusCode)
	}
	// ...the walls are the old ones, and the catalog is sealed again
	p := mustPolicy(t, strings.NewReplacer("{CA}", "/dev/null", "{PREFIX}", l.topo.IfPrefix, "{EXTRA}", "").Replace(stConfig))
	spec, err := daemon.WallSpec(p)
	if err != nil {
		t.Fatal(err)
	}
	if drift, err := nft.Check(l.topo.Gateway.Fd(), spec); err != nil || len(drift) > 0 {
		t.Errorf("walls after the dropped candidate: drift %q, err %v", drift, err)
	}
	if code, why := l.readyz(t); code != http.StatusOK {
		t.Errorf("after the dropped candidate: /readyz %d %q, want 200", code, why)
	}
	code, out, errs := l.egressd(t, nil, "selftest", "--json", "--config", l.cfg, "--state-dir", l.state)
	if rep := selftestJSON(t, out, errs); code != exitOK {
		t.Errorf("after the dropped candidate: selftest exit %d\n%s", code, tableOf(rep))
	}

	// a reload that allowlists the DNS canary name: the DNS filter answers
	// the unverified candidate only to the self-test's own probe sockets,
	// so the canary probe still meets the candidate and names the leak
	// (without that exemption it met SERVFAIL and could not tell)
	l.writeConfig(t, "  - name: canary\n    hosts: [canary.test]\n    cidrs: [203.0.113.0/24]\n    pages: [\"*\"]")
	if _, err := l.serve.wait(`"msg":"reload refused: the candidate failed its self-test and was dropped`, "the new policy leaks: ", "dns-canary/canary.test"); err != nil {
		t.Fatalf("reload allowlisting the DNS canary: %v", err)
	}
}

func mustPolicy(t *testing.T, cfg string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse(strings.NewReader(cfg), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return p
}
