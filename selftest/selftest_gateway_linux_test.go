//go:build linux

package selftest_test

import (
	"bufio"
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egressd/egressd/ca"
	"github.com/egressd/egressd/dnsfilter"
	"github.com/egressd/egressd/internal/testnet"
	"github.com/egressd/egressd/internal/testutil"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy"
	"github.com/egressd/egressd/sandbox"
)

// The proxy dials upstream from whatever thread the runtime picks, so it
// cannot run inside a test namespace within the test process. The gateway
// helper is this test binary re-executed from a thread inside the
// topology's gateway namespace: the whole child process, every thread of
// it, lives there, as egressd would on a real gateway. It serves the real
// proxy and DNS filter and swaps policies on command.

const (
	helperEnv     = "EGRESSD_SELFTEST_GATEWAY"   // set: run as the gateway helper
	helperCAEnv   = "EGRESSD_SELFTEST_GATEWAYCA" // file the helper writes its CA certificate to
	helperLogEnv  = "EGRESSD_SELFTEST_GATEWAYLOG"
	helperRootEnv = "EGRESSD_SELFTEST_ROOTCOOKIE"
)

func TestMain(m *testing.M) {
	if cfg := os.Getenv(helperEnv); cfg != "" {
		if err := gatewayMain(cfg, os.Getenv(helperCAEnv), os.Getenv(helperLogEnv)); err != nil {
			fmt.Fprintf(os.Stderr, "gateway helper: %v\n", err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	testutil.WaitingParallel(8)
	code := m.Run()
	testnet.ReportRootTests("selftest")
	os.Exit(code)
}

// gatewayMain runs in the child: proxy and DNS filter on the listen
// addresses of the config at cfgPath, until stdin closes. Commands on
// stdin: "policy PATH" swaps the policy; each gets "ok" or "error: ..." on
// stdout.
func gatewayMain(cfgPath, caPath, logPath string) error {
	here, err := sandbox.Current()
	if err != nil {
		return err
	}
	// The parent, in the machine's own namespace, passes its cookie: the
	// child may not be able to read /proc/1/ns/net itself.
	if root := os.Getenv(helperRootEnv); root == "" || root == fmt.Sprint(here.Cookie()) {
		return fmt.Errorf("refusing to serve: namespace cookie %d is the machine's own (%q)", here.Cookie(), root)
	}
	guard := sandbox.GuardControl(here.Cookie())
	p, err := policy.Load(cfgPath)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	if p.UpstreamCA != "" {
		pem, err := os.ReadFile(p.UpstreamCA)
		if err != nil {
			return err
		}
		roots.AppendCertsFromPEM(pem)
	}
	authority, err := ca.New()
	if err != nil {
		return err
	}
	if err := os.WriteFile(caPath, authority.CertPEM(), 0o600); err != nil {
		return err
	}
	logw := io.Discard
	if logPath != "" {
		f, err := os.Create(logPath)
		if err != nil {
			return err
		}
		defer f.Close()
		logw = f
	}
	log := slog.New(slog.NewJSONHandler(logw, nil))
	dialer := &net.Dialer{Control: guard, Timeout: 2 * time.Second}
	var live atomic.Pointer[policy.Policy]
	live.Store(p)
	px := proxy.New(p, proxy.Config{Logger: log, CA: authority, UpstreamRoots: roots, Control: guard, ResolverDial: dialer.DialContext})
	lc := net.ListenConfig{Control: guard}
	pl, err := lc.Listen(context.Background(), "tcp", p.Listen.Proxy)
	if err != nil {
		return err
	}
	go px.Serve(pl)
	ds, err := dnsfilter.New(dnsfilter.Config{Policy: live.Load, Logger: log, Dial: dialer.DialContext})
	if err != nil {
		return err
	}
	udp, err := lc.ListenPacket(context.Background(), "udp", p.Listen.DNS)
	if err != nil {
		return err
	}
	tcp, err := lc.Listen(context.Background(), "tcp", p.Listen.DNS)
	if err != nil {
		return err
	}
	go ds.Serve(udp, tcp)
	fmt.Println("ready")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		path, ok := strings.CutPrefix(sc.Text(), "policy ")
		if !ok {
			fmt.Println("error: unknown command")
			continue
		}
		np, err := policy.Load(path)
		if err != nil {
			fmt.Printf("error: %s\n", strings.ReplaceAll(err.Error(), "\n", "; "))
			continue
		}
		live.Store(np)
		px.SetPolicy(np)
		fmt.Println("ok")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	px.Shutdown(ctx)
	ds.Shutdown(ctx)
	return nil
}

// gateway is the parent's handle on the helper.
type gateway struct {
	t     *testing.T
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Scanner
	CA    []byte // the helper's CA certificate, PEM
	Log   string // path of the helper's decision log
	dir   string
	count int
}

// startGateway starts the helper inside topo's gateway namespace with the
// config at cfgPath and waits until it serves.
func startGateway(t *testing.T, topo *testnet.Topo, cfgPath string) *gateway {
	t.Helper()
	dir := t.TempDir()
	g := &gateway{t: t, dir: dir, Log: dir + "/gateway.log"}
	g.cmd = exec.Command(os.Args[0], "-test.run=^$")
	root := testnet.RootCookie(t)
	var err error
	g.cmd.Env = append(os.Environ(), helperEnv+"="+cfgPath, helperCAEnv+"="+dir+"/ca.pem", helperLogEnv+"="+g.Log,
		fmt.Sprintf("%s=%d", helperRootEnv, root))
	g.cmd.Stderr = os.Stderr
	if g.in, err = g.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := g.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	g.out = bufio.NewScanner(stdout)
	// A child forked from a thread inside the gateway namespace starts in
	// it, with every one of its threads.
	if err := topo.DoInGateway(g.cmd.Start); err != nil {
		t.Fatalf("start gateway helper: %v", err)
	}
	t.Cleanup(func() {
		g.in.Close()
		done := make(chan error, 1)
		go func() { done <- g.cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			g.cmd.Process.Kill()
			<-done
		}
	})
	if line := g.read(); line != "ready" {
		t.Fatalf("gateway helper: got %q, want ready", line)
	}
	if g.CA, err = os.ReadFile(dir + "/ca.pem"); err != nil {
		t.Fatal(err)
	}
	return g
}

func (g *gateway) read() string {
	g.t.Helper()
	line := make(chan string, 1)
	go func() {
		if g.out.Scan() {
			line <- g.out.Text()
		} else {
			line <- "EOF: " + fmt.Sprint(g.out.Err())
		}
	}()
	select {
	case l := <-line:
		return l
	case <-time.After(10 * time.Second):
		g.t.Fatal("gateway helper: no answer in 10s")
		return ""
	}
}

// setPolicy makes the helper's proxy and DNS filter enforce config (YAML).
func (g *gateway) setPolicy(config string) {
	g.t.Helper()
	g.count++
	path := fmt.Sprintf("%s/policy-%d.yaml", g.dir, g.count)
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		g.t.Fatal(err)
	}
	if _, err := fmt.Fprintf(g.in, "policy %s\n", path); err != nil {
		g.t.Fatal(err)
	}
	if line := g.read(); line != "ok" {
		g.t.Fatalf("gateway helper: set policy: %s", line)
	}
}
