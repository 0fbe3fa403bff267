//go:build linux

package main

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/egressd/egressd/selftest"
	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// openRedirectHole adds, in the gateway namespace, a NAT table of the
// test's own that redirects sandbox TCP to port to the run's proxy port:
// from inside the sandbox a direct connection to any address on port
// then succeeds — a hole in the run's walls that egressd did not make.
func openRedirectHole(t *testing.T, l *runLab, port, proxyPort uint16) {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(l.topo.Gateway.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	tbl := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: "test-hole"})
	prio := nftables.ChainPriority(-150)
	ch := c.AddChain(&nftables.Chain{Table: tbl, Name: "pre", Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookPrerouting, Priority: &prio})
	c.AddRule(&nftables.Rule{Table: tbl, Chain: ch, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
		&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(proxyPort)},
		&expr.Redir{RegisterProtoMin: 1, RegisterProtoMax: 1, Flags: 2},
	}})
	if err := c.Flush(); err != nil {
		t.Fatalf("open hole: %v", err)
	}
	t.Cleanup(func() {
		c.DelTable(tbl)
		c.Flush()
	})
}

// TestRunProbe: the sandbox is proven from inside before CMD starts. Sealed:
// CMD runs and the proof is in the self-test history under the sandbox's
// name. A hole: CMD does not run, exit 3, the probe that found it named.
// --no-probe: CMD runs, with a warning.
func TestRunProbe(t *testing.T) {
	t.Parallel()
	l := newRunLab(t, runConfig)
	out, code := l.run(t, nil, "sh", "-c", "echo CMD-RAN")
	if code != 0 || !strings.Contains(out, "CMD-RAN") {
		t.Fatalf("sealed: exit %d\n%s", code, out)
	}
	if os.Getenv("EGRESSD_BIN") == "" {
		h, err := os.ReadFile(filepath.Join(l.state, selftest.HistoryFile))
		if err != nil || !strings.Contains(string(h), `"source":"run"`) || !strings.Contains(string(h), `"mode":"sandbox egr`) {
			t.Errorf("self-test history: %v\n%s", err, h)
		}
	}

	openRedirectHole(t, l, 8080, 3128)
	out, code = l.run(t, nil, "sh", "-c", "echo CMD-RAN")
	if code != 3 || strings.Contains(out, "CMD-RAN") || !strings.Contains(out, "tcp/203.0.113.100:8080") {
		t.Fatalf("hole: exit %d (want 3), the command must not run and the probe must be named\n%s", code, out)
	}
	out, code = l.run(t, []string{"--no-probe"}, "sh", "-c", "echo CMD-RAN")
	if code != 0 || !strings.Contains(out, "CMD-RAN") || !strings.Contains(out, "WARNING: --no-probe") {
		t.Fatalf("--no-probe: exit %d, want the command run with a warning\n%s", code, out)
	}
}

// loopbackScript serves HTTP on the sandbox's loopback and fetches it with
// urllib (which honours the proxy variables and NO_PROXY) by address and
// by name.
const loopbackScript = `
import http.server, threading, urllib.request
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"own")
    def log_message(self, *a): pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
threading.Thread(target=s.serve_forever, daemon=True).start()
for host in ("127.0.0.1", "localhost"):
    try:
        r = urllib.request.urlopen("http://%s:%d/" % (host, s.server_address[1]), timeout=5)
        print("LOOPBACK", host, r.status, r.read().decode())
    except Exception as e:
        print("LOOPBACK", host, "ERR", e)
`

// TestRunEnvironment: the sandbox's loopback is its own (NO_PROXY);
// clients that ignore proxy variables go through the checkpoint
// (transparent mode); the host environment passes, with a warning for
// credential-looking variables, or not at all with --clean-env.
func TestRunEnvironment(t *testing.T) {
	t.Parallel()
	l := newRunLab(t, runConfig)
	l.env = []string{"MY_API_TOKEN=egressd-test-secret", "EGRESSD_TEST_PLAIN=plain"}

	out, code := l.run(t, nil, "/usr/bin/python3", "-c", loopbackScript)
	for _, host := range []string{"127.0.0.1", "localhost"} {
		if !strings.Contains(out, "LOOPBACK "+host+" 200 own") {
			t.Errorf("the sandbox's own server on %s (exit %d):\n%s", host, code, out)
		}
	}

	before := l.topo.Origin.Hits()
	out, code = l.run(t, nil, "curl", "-sSf", "-m", "10", "--noproxy", "*", "http://allowed.test/transparent")
	if code != 0 || l.topo.Origin.Hits() == before {
		t.Errorf("a client ignoring the proxy variables: exit %d, origin hits %d→%d\n%s", code, before, l.topo.Origin.Hits(), out)
	}

	show := `echo "token=$MY_API_TOKEN plain=$EGRESSD_TEST_PLAIN noproxy=$NO_PROXY node=$NODE_USE_ENV_PROXY cargo=${CARGO_HTTP_CAINFO:+set}"`
	out, _ = l.run(t, nil, "sh", "-c", show)
	if !strings.Contains(out, "token=egressd-test-secret plain=plain noproxy=localhost,127.0.0.1,::1,169.254.169.254,fd00:ec2::254,metadata.google.internal node=1 cargo=set") {
		t.Errorf("default environment:\n%s", out)
	}
	if !strings.Contains(out, "look like credentials") || !strings.Contains(out, "MY_API_TOKEN") {
		t.Errorf("no warning for MY_API_TOKEN:\n%s", out)
	}
	out, _ = l.run(t, []string{"--clean-env", "--env", "EGRESSD_TEST_PLAIN"}, "sh", "-c", show)
	if !strings.Contains(out, "token= plain=plain noproxy=localhost") || strings.Contains(out, "look like credentials") {
		t.Errorf("--clean-env --env EGRESSD_TEST_PLAIN:\n%s", out)
	}
}

// TestRunSummary: decision lines go to --log, not into CMD's terminal; at
// exit one summary names the denied hosts and their reasons.
func TestRunSummary(t *testing.T) {
	t.Parallel()
	l := newRunLab(t, runConfig)
	logFile := filepath.Join(l.dir, "decisions.log")
	flags := []string{"--log", logFile}
	if os.Getenv("EGRESSD_BIN") != "" {
		flags = nil // an older build: no --log
	}
	out, code := l.run(t, flags, "sh", "-c",
		"curl -sS -m 10 -o /dev/null http://allowed.test/a; curl -sS -m 10 -o /dev/null http://other.test/b; echo DONE")
	if code != 0 || !strings.Contains(out, "DONE") {
		t.Fatalf("exit %d\n%s", code, out)
	}
	if strings.Contains(out, `"msg":"decision"`) {
		t.Errorf("decision lines in the command's terminal:\n%s", out)
	}
	if !strings.Contains(out, "1 requests allowed, 1 denied") || !strings.Contains(out, "denied other.test: no-rule") {
		t.Errorf("summary:\n%s", out)
	}
	b, err := os.ReadFile(logFile)
	if err != nil || !strings.Contains(string(b), `"host":"other.test"`) {
		t.Errorf("--log %s: %v\n%s", logFile, err, b)
	}
}

// TestRunInterrupt: SIGINT to egressd run reaches CMD through the sandbox's
// init (CMD's trap runs and its exit code comes back), and CMD's
// background children end with it.
func TestRunInterrupt(t *testing.T) {
	t.Parallel()
	l := newRunLab(t, runConfig)
	token := nonceSeconds()
	cmd := l.command(append(l.runArgs(), "--", "bash", "-c", `trap 'echo GOT-INT; exit 5' INT; sleep `+token+` & echo up; wait`)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, p := range processesWith("sleep " + token) {
			syscall.Kill(p, syscall.SIGKILL) // ours: started by this test
		}
	})
	r := bufio.NewReader(stdout)
	if line, err := r.ReadString('\n'); err != nil || line != "up\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the run did not start: %q %v\n%s", line, err, errb.String())
	}
	cmd.Process.Signal(os.Interrupt)
	rest, _ := io.ReadAll(r)
	err = cmd.Wait()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	if code != 5 || !strings.Contains(string(rest), "GOT-INT") {
		t.Errorf("after SIGINT: exit %d (want 5), output %q\n%s", code, rest, errb.String())
	}
	if pids := processesWith("sleep " + token); len(pids) > 0 {
		t.Errorf("CMD's background child survived the interrupt: %v", pids)
	}
	l.assertNothingLeft(t)
}
