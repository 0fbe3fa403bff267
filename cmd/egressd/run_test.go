//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/egressd/egressd/internal/testnet"
	"github.com/egressd/egressd/internal/testutil"
	"github.com/egressd/egressd/nft"
	"github.com/egressd/egressd/runbox"
	"github.com/egressd/egressd/sandbox"
)

// built is this command, compiled once for the whole test binary into
// built.dir/bin (TestMain removes it).
var built struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

func TestMain(m *testing.M) {
	testutil.WaitingParallel(10)
	code := m.Run()
	testnet.ReportRootTests("cmd/egressd")
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// buildEgressd returns the egressd binary, readable and executable by the
// sandbox's unprivileged user. EGRESSD_BIN names a prebuilt one instead (a
// negative control against an older build); its directories are not ours
// and are left as they are.
func buildEgressd(t *testing.T) string {
	t.Helper()
	if b := os.Getenv("EGRESSD_BIN"); b != "" {
		return b
	}
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "egressd-test-bin-"); built.err != nil {
			return
		}
		built.bin = filepath.Join(built.dir, "bin", "egressd")
		cmd := exec.Command("go", "build", "-o", built.bin, ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		os.Chmod(built.dir, 0o755)
		os.Chmod(filepath.Dir(built.bin), 0o755)
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

// runLab runs `egressd run` inside the gateway namespace of a test
// topology: its veths, tables and namespaces are made there, never in the
// machine's own.
type runLab struct {
	topo     *testnet.Topo
	bin, dir string
	cfg      string
	state    string
	tmp      string // TMPDIR of egressd: where each run's temp dir goes
	// env is added to egressd's environment (KEY=VALUE): a test's HOME
	// or host variables, without t.Setenv, which would forbid t.Parallel.
	env []string
	// cmds are the egressd commands this lab started: assertNothingLeft
	// looks for the namespaces of these runs only, as other tests' runs
	// (and their crashes) go on beside them.
	cmds []*exec.Cmd
}

const runConfig = `version: 1
resolver:
  upstreams: ["203.0.113.53:53"]
upstream_ca: {CA}
allow:
  - name: origin
    hosts: [allowed.test]
    cidrs: [203.0.113.0/24]
selftest:
  timeout: 3s
  tcp: [203.0.113.100:8080]
  udp: [203.0.113.100:123]
  ipv6: ["[2001:db8:2::100]:8080"]
  resolvers: [203.0.113.53:53]
  metadata: [169.254.169.254]
  canary_name: canary.test
  canary_url: http://canary.test/
  expect_reachable: [http://allowed.test/]
`

func newRunLab(t *testing.T, config string) *runLab {
	t.Helper()
	topo := testnet.New(t, testnet.WithRecords(map[string][]netip.Addr{"allowed.test": {testnet.OriginAddr4}}))
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is needed (apt-get install -y curl)")
	}
	return labOn(t, topo, config)
}

// labOn is a runLab on topo with config ({CA}: the topology's CA file).
func labOn(t *testing.T, topo *testnet.Topo, config string) *runLab {
	t.Helper()
	l := &runLab{topo: topo, bin: buildEgressd(t), dir: t.TempDir()}
	for _, d := range []string{l.dir, filepath.Dir(l.dir)} { // t.TempDir's, ours
		os.Chmod(d, 0o755)
	}
	ca := filepath.Join(l.dir, "upstream-ca.pem")
	os.WriteFile(ca, topo.CA.CertPEM, 0o644)
	l.cfg = filepath.Join(l.dir, "egressd.yaml")
	os.WriteFile(l.cfg, []byte(strings.ReplaceAll(config, "{CA}", ca)), 0o644)
	l.state = filepath.Join(l.dir, "state")
	l.tmp = filepath.Join(l.dir, "tmp")
	os.Mkdir(l.tmp, 0o755)
	return l
}

// command is egressd ARGS in the gateway namespace.
func (l *runLab) command(args ...string) *exec.Cmd {
	cmd := sandbox.NSExecCommand(l.bin, l.topo.Gateway.Path(), "", append([]string{l.bin}, args...))
	cmd.Env = append(append(os.Environ(), l.env...), "TMPDIR="+l.tmp)
	cmd.WaitDelay = 5 * time.Second // a survivor holding the output must not hang the test
	l.cmds = append(l.cmds, cmd)
	return cmd
}

// runArgs starts an `egressd run` command line (an older build given by
// EGRESSD_BIN has no --state-dir and keeps its CA in memory).
func (l *runLab) runArgs() []string {
	if os.Getenv("EGRESSD_BIN") != "" {
		return []string{"run", "--config", l.cfg}
	}
	return []string{"run", "--config", l.cfg, "--state-dir", l.state}
}

// run is `egressd run --config CFG [extra...] -- argv...`: output and exit code.
func (l *runLab) run(t *testing.T, extra []string, argv ...string) (string, int) {
	t.Helper()
	args := append(l.runArgs(), extra...)
	cmd := l.command(append(append(args, "--"), argv...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	timer := time.AfterFunc(60*time.Second, func() { cmd.Process.Kill() })
	defer timer.Stop()
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("egressd run: %v\n%s", err, out.String())
	}
	return out.String(), code
}

// TestRunSealed: the command reaches the allowed origin through the proxy
// and cannot connect directly, while a sibling sandbox without egressd's
// wall (the topology's own) does connect directly — the baseline that
// shows the direct route exists and only the wall stops it.
func TestRunSealed(t *testing.T) {
	t.Parallel()
	l := newRunLab(t, runConfig)
	topo := l.topo
	before := topo.Origin.Hits()
	out, code := l.run(t, nil, "curl", "-sS", "-m", "10", "http://allowed.test/through-proxy")
	if code != 0 || topo.Origin.Hits() == before {
		t.Fatalf("through the proxy: exit %d, origin hits %d→%d\n%s", code, before, topo.Origin.Hits(), out)
	}
	before = topo.TCP[8080].Hits()
	out, code = l.run(t, nil, "curl", "-sS", "-m", "3", "--noproxy", "*", "http://203.0.113.100:8080/direct")
	if code == 0 || topo.TCP[8080].Hits() != before {
		t.Fatalf("direct connection from the sandbox succeeded (exit %d)\n%s", code, out)
	}
	out, code = l.run(t, nil, "curl", "-sSf", "-m", "3", "--noproxy", "*", "http://169.254.169.254/")
	if code == 0 || topo.Metadata.Hits() != 0 || strings.Contains(out, topo.MetadataSecret) {
		t.Fatalf("metadata reached directly (exit %d)\n%s", code, out)
	}
	if _, code := l.run(t, nil, "sh", "-c", "exit 7"); code != 7 {
		t.Errorf("exit code: got %d, want 7", code)
	}
	c, err := topo.DialFromSandbox(context.Background(), "tcp", "203.0.113.100:8080")
	if err != nil {
		t.Fatalf("baseline: the topology's own sandbox cannot reach the origin: %v", err)
	}
	c.Close()
	l.assertNothingLeft(t)
}

// TestRunUpstreamCA: a registry behind a private CA (upstream_ca) answers
// through `run` as it does through serve; before, run built its own proxy
// without the key and every download got 502 unknown authority.
func TestRunUpstreamCA(t *testing.T) {
	t.Parallel()
	l := newRunLab(t, runConfig)
	before := l.topo.TLS.Hits()
	out, code := l.run(t, nil, "curl", "-sS", "-m", "10", "-o", "/dev/null", "-w", "%{http_code}", "https://allowed.test/simple/")
	if code != 0 || !strings.HasPrefix(out, "200") || l.topo.TLS.Hits() == before {
		t.Fatalf("https through run with upstream_ca: exit %d, origin hits %d→%d\n%s", code, before, l.topo.TLS.Hits(), out)
	}
}

// TestRunNoSurvivors: every process of the sandbox ends when CMD ends, in
// each of the ways a child detaches; before, they kept running in the
// sandbox namespace after its walls were gone.
func TestRunNoSurvivors(t *testing.T) {
	t.Parallel()
	l := newRunLab(t, runConfig)
	for _, tc := range []struct{ name, script string }{
		{"background", "sleep {T} >/dev/null 2>&1 & exit 0"},
		{"nohup-disown", "nohup sleep {T} >/dev/null 2>&1 & disown; exit 0"},
		{"setsid", "setsid sleep {T} >/dev/null 2>&1 < /dev/null & exit 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			token := nonceSeconds()
			script := strings.ReplaceAll(tc.script, "{T}", token)
			// The command waits until its child runs, so a survivor is
			// never missed because it had not started yet.
			script = strings.Replace(script, "exit 0", "while ! pgrep -f '^sleep "+token+"' >/dev/null; do :; done; exit 0", 1)
			out, code := l.run(t, nil, "bash", "-c", script)
			if code != 0 {
				t.Fatalf("egressd run: exit %d\n%s", code, out)
			}
			if pids := processesWith("sleep " + token); len(pids) > 0 {
				for _, p := range pids {
					syscall.Kill(p, syscall.SIGKILL) // ours: started by this test
				}
				t.Fatalf("%d process(es) of the sandbox outlived `egressd run` (pids %v)", len(pids), pids)
			}
			l.assertNothingLeft(t)
		})
	}
}

// nonceSeconds is a unique sleep argument that marks a test's process.
func nonceSeconds() string {
	b := make([]byte, 4)
	rand.Read(b)
	n, _ := strconv.ParseUint(hex.EncodeToString(b), 16, 64)
	return "300." + strconv.FormatUint(n, 10)
}

// processesWith lists the pids whose command line contains s.
func processesWith(s string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})), s) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestRunCrashLeavesNothing: after kill -9 of `egressd run`, the next run
// sweeps the dead run's table, link, namespace and temp dir, and `egressd
// nft down --all` leaves no egressd table behind.
func TestRunCrashLeavesNothing(t *testing.T) {
	t.Parallel()
	l := newRunLab(t, runConfig)
	token := nonceSeconds()
	cmd := l.command(append(l.runArgs(), "--", "sh", "-c", "echo up; cat /proc/self/cgroup; exec sleep "+token)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(stdout)
	line, err := r.ReadString('\n')
	if err != nil || line != "up\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the run did not start: %q %v\n%s", line, err, errb.String())
	}
	var cgroup string // the dead run's cgroup, which the next run must remove
	for cgroup == "" {
		line, err := r.ReadString('\n')
		if err != nil {
			break
		}
		cgroup = cgroupOf(line)
	}
	if runbox.Cgroup2Root() != "" && !strings.HasPrefix(filepath.Base(cgroup), "egressd-run-") {
		t.Errorf("the run's command is not in a run cgroup: %q", cgroup)
	}
	if tables := l.tables(t); len(tables) == 0 {
		t.Fatal("no run table while the run is live")
	}
	if len(runNamespaces(cmd.Process.Pid)) == 0 {
		t.Errorf("no namespace named for the live run's pid %d: assertNothingLeft would look for the wrong names", cmd.Process.Pid)
	}
	t.Cleanup(func() {
		for _, p := range processesWith("sleep " + token) {
			syscall.Kill(p, syscall.SIGKILL) // ours: started by this test
		}
	})
	cmd.Process.Kill() // kill -9
	cmd.Wait()
	if cgroup != "" {
		if _, err := os.Stat(cgroup); err != nil {
			t.Errorf("the killed run's cgroup is already gone (%v): the sweep is not shown", err)
		}
	}
	if out, code := l.run(t, nil, "true"); code != 0 {
		t.Fatalf("the next run: exit %d\n%s", code, out)
	}
	if ts := l.tables(t); len(ts) > 0 {
		t.Errorf("the next run did not sweep the dead run's table: %v", ts)
	}
	down := l.command("nft", "down", "--all")
	out, err := down.CombinedOutput()
	if err != nil {
		t.Fatalf("egressd nft down --all: %v\n%s", err, out)
	}
	for _, p := range processesWith("sleep " + token) {
		syscall.Kill(p, syscall.SIGKILL)
		t.Errorf("the dead run's command survived (pid %d)", p)
	}
	if cgroup != "" {
		if _, err := os.Stat(cgroup); !os.IsNotExist(err) {
			t.Errorf("the dead run's cgroup %s was not swept (%v)", cgroup, err)
		}
	}
	l.assertNothingLeft(t)
}

// tables lists egressd's tables in the gateway namespace.
func (l *runLab) tables(t *testing.T) []string {
	t.Helper()
	ts, err := nft.Tables(l.topo.Gateway.Fd(), "egressd")
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// assertNothingLeft: no egressd table, no run link, no namespace of a
// run of this lab whose egressd is dead, and no run temp dir remain.
func (l *runLab) assertNothingLeft(t *testing.T) {
	t.Helper()
	if ts := l.tables(t); len(ts) > 0 {
		t.Errorf("tables left in the gateway namespace: %v", ts)
	}
	h, err := netlink.NewHandleAt(netns.NsHandle(l.topo.Gateway.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	links, _ := h.LinkList()
	for _, k := range links {
		if n := k.Attrs().Name; strings.HasPrefix(n, "egsbx") && n != l.topo.SandboxLink.GatewayName {
			t.Errorf("link %s left in the gateway namespace", n)
		}
	}
	if ents, _ := os.ReadDir(l.tmp); len(ents) > 0 {
		t.Errorf("temp dirs left: %v", ents)
	}
	for _, c := range l.cmds {
		if c.Process == nil || syscall.Kill(c.Process.Pid, 0) != syscall.ESRCH {
			continue
		}
		for _, ns := range runNamespaces(c.Process.Pid) {
			t.Errorf("namespace %s of a dead run left", ns)
		}
	}
}

// runNamespaces lists the namespaces named for the `egressd run` of pid.
func runNamespaces(pid int) []string {
	var names []string
	ents, _ := os.ReadDir(sandbox.NetnsDir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), runbox.NSPrefix+strconv.Itoa(pid)+"-") {
			names = append(names, e.Name())
		}
	}
	return names
}
