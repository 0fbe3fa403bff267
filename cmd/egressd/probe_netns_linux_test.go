//go:build linux

package main

import (
	"bytes"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/egressd/egressd/internal/testnet"
	"github.com/egressd/egressd/nft"
	"github.com/egressd/egressd/sandbox"
	"github.com/egressd/egressd/selftest"
)

// TestInSandboxProbe: a sandbox egressd did not create (the test
// topology's sandbox namespace, wired by the test on the walls' interface
// prefix, as a container runtime wires a container) runs `egressd probe`
// unprivileged. Sealed: exit 0, the entrypoint guard starts its command,
// egressd shows the identity sealed. A hole opened only on that sandbox's
// path (its source address): egressd's own self-test (its probe namespace
// has another address) stays sealed, but the in-sandbox probe reports the
// leak (exit 1, the guard refuses with 3), and egressd shows it for that
// identity in /metrics, the history and the report. The probes' own
// metadata requests add nothing to egressd_high_risk_total.
func TestInSandboxProbe(t *testing.T) {
	t.Parallel()
	l := newSTLab(t)
	f, err := os.OpenFile(l.cfg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("identities:\n  - name: sbx-a\n    cidrs: [" + testnet.SandboxAddr4.String() + "/32]\n")
	f.Close()
	l.startServe(t) // returns once serve logged "ready": the boot self-test is sealed

	// the sandbox trusts the origin's CA and egressd's (inspected rules)
	bundle := filepath.Join(l.dir, "bundle.pem")
	egressdCA, err := os.ReadFile(filepath.Join(l.state, "ca", "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(bundle, append(append([]byte{}, l.topo.CA.CertPEM...), egressdCA...), 0o644)
	junit := filepath.Join(l.dir, "junit")
	os.MkdirAll(junit, 0o777)
	os.Chmod(junit, 0o777)
	// planted: a private key in the probe user's home and a token in its
	// environment; the scan must name both and print neither
	home := filepath.Join(l.dir, "home")
	os.MkdirAll(filepath.Join(home, ".ssh"), 0o755)
	os.Chmod(home, 0o755)
	const keyBody, token = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUtplantedsecret", "ghp_plantedTOKENplantedTOKENplantedTOKEN1234"
	os.WriteFile(filepath.Join(home, ".ssh", "id_ed25519"), []byte("-----BEGIN OPENSSH PRIVATE KEY-----\n"+keyBody+"\n-----END OPENSSH PRIVATE KEY-----\n"), 0o644)
	probeRun := func(extra ...string) (int, string, string) {
		t.Helper()
		nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
		argv := append([]string{l.bin, "probe", "--proxy", "198.51.100.1:3128", "--dns", "198.51.100.1:53"}, extra...)
		cmd := sandbox.NSExecCommandAs(l.bin, l.topo.Sandbox.Path(), "", nobody, argv)
		cmd.Env = []string{"SSL_CERT_FILE=" + bundle, "PATH=/usr/bin:/bin", "HOME=" + home, "GH_PAT=" + token}
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		timer := time.AfterFunc(60*time.Second, func() { cmd.Process.Kill() })
		defer timer.Stop()
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("probe: %v", err)
		}
		return code, out.String(), errb.String()
	}
	metrics := func() string {
		c := &http.Client{Transport: &http.Transport{DialContext: l.topo.GatewayDialer().DialContext}, Timeout: 5 * time.Second}
		resp, err := c.Get("http://198.51.100.1:9090/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}

	// sealed
	code, out, errs := probeRun("--json", "--junit", filepath.Join(junit, "sealed.xml"))
	rep := selftestJSON(t, out, errs)
	if code != exitOK || !rep.Sealed() {
		t.Fatalf("in-sandbox probe, sealed: exit %d, %s\n%s\n%s\n%s", code, rep.Outcome(), tableOf(rep), errs, l.serve.logs.String())
	}
	for _, want := range []string{"tcp/203.0.113.100:443", "metadata-proxy-", "http-canary", "expect/https://app.test/"} {
		if !slices.ContainsFunc(rep.Results, func(r selftest.Result) bool { return strings.HasPrefix(r.ID, want) }) {
			t.Errorf("the sandbox's plan lacks %s", want)
		}
	}
	if x, err := os.ReadFile(filepath.Join(junit, "sealed.xml")); err != nil || !bytes.Contains(x, []byte(`failures="0"`)) {
		t.Errorf("junit: %v\n%s", err, x)
	}
	m := metrics()
	for _, want := range []string{`egressd_probe_last_outcome{identity="sbx-a",outcome="sealed"} 1`, "egressd_high_risk_total 0", `egressd_probe_overdue{identity="sbx-a"} 0`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if !strings.Contains(m, `egressd_probe_requests_total{decision="deny",identity="egressd-probe/sbx-a",reason="high-risk"}`) {
		t.Errorf("the probe's metadata refusals are not counted as probe traffic:\n%s", grepLine(m, "egressd_probe_requests_total"))
	}
	if code, out, _ := probeRun("--", "/bin/echo", "agent started"); code != 0 || !strings.Contains(out, "agent started") {
		t.Errorf("entrypoint guard, sealed: exit %d, want the command run:\n%s", code, out)
	}

	// a hole on this sandbox's path only
	insertAcceptFrom(t, l.topo.Gateway.Fd(), testnet.SandboxAddr4, netip.MustParseAddrPort("203.0.113.100:443"))
	code, out, errs = l.egressd(t, nil, "selftest", "--json", "--config", l.cfg, "--state-dir", l.state)
	if rep := selftestJSON(t, out, errs); code != exitOK || !rep.Sealed() {
		t.Errorf("egressd's own self-test with the sandbox-only hole: exit %d, %s, want sealed\n%s", code, rep.Outcome(), tableOf(rep))
	}
	code, out, errs = probeRun("--json")
	rep = selftestJSON(t, out, errs)
	if got := failureIDs(rep); code != exitDeny || !slices.Equal(got, []string{"tcp/203.0.113.100:443"}) {
		t.Errorf("in-sandbox probe with the hole: exit %d, failures %q, want 1 and [tcp/203.0.113.100:443]\n%s", code, got, tableOf(rep))
	}
	if code, out, errs := probeRun("--", "/bin/echo", "agent started"); code != exitUnsealed || strings.Contains(out, "agent started") || !strings.Contains(errs, "not proven sealed") {
		t.Errorf("entrypoint guard with the hole: exit %d, stdout %q, stderr %q; want 3 and no command", code, out, errs)
	}
	m = metrics()
	for _, want := range []string{`egressd_probe_last_outcome{identity="sbx-a",outcome="leak"} 1`, `egressd_probe_runs_total{identity="sbx-a",outcome="leak"} 2`, "egressd_high_risk_total 0"} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if logs := l.serve.logs.String(); !strings.Contains(logs, `"msg":"in-sandbox probe found a leak","component":"probe","identity":"sbx-a"`) {
		t.Errorf("serve did not log the sandbox's leak:\n%s", logs)
	}
	hist, _, err := selftest.ReadHistory(filepath.Join(l.state, selftest.HistoryFile))
	if err != nil {
		t.Fatal(err)
	}
	var leaks int
	for _, h := range hist {
		if h.Source == "probe" && h.Identity == "sbx-a" && h.Report.Outcome() == selftest.OutcomeLeak {
			leaks++
		}
	}
	if leaks != 2 {
		t.Errorf("history: %d leaking probe runs of sbx-a, want 2", leaks)
	}
	_, out, _ = l.egressd(t, nil, "report", "--config", l.cfg, "--state-dir", l.state)
	for _, want := range []string{"## 4. In-sandbox probes", "| sbx-a |", "**LEAK** `tcp/203.0.113.100:443`",
		"| sbx-a | private-key | id_ed25519 | " + filepath.Join(home, ".ssh", "id_ed25519") + " |", "| sbx-a | env-token | GH_PAT | env |"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	hb, _ := os.ReadFile(filepath.Join(l.state, selftest.HistoryFile))
	for _, secret := range []string{keyBody, token} {
		if strings.Contains(out, secret) || strings.Contains(string(hb), secret) || strings.Contains(l.serve.logs.String(), secret) {
			t.Errorf("a planted secret reached the report, the history or the logs")
		}
	}
	t.Logf("report:\n%s", out)
}

// insertAcceptFrom opens a hole in egressd's forward chain for TCP from
// src to dst only.
func insertAcceptFrom(t *testing.T, ns int, src netip.Addr, dst netip.AddrPort) {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(ns))
	if err != nil {
		t.Fatal(err)
	}
	tbl := &nftables.Table{Family: nftables.TableFamilyINet, Name: nft.DefaultTable}
	c.InsertRule(&nftables.Rule{Table: tbl, Chain: &nftables.Chain{Name: "sbx_fwd", Table: tbl}, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: src.AsSlice()},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: dst.Addr().AsSlice()},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(dst.Port())},
		&expr.Verdict{Kind: expr.VerdictAccept},
	}})
	if err := c.Flush(); err != nil {
		t.Fatalf("open hole %s → %s: %v", src, dst, err)
	}
}
