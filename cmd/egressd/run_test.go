//go:build linux

package main

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/testnet"
	"github.com/egressd/egressd/runbox"
	"github.com/egressd/egressd/sandbox"
)

// buildEgressd compiles this command once per test binary.
func buildEgressd(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "egressd")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestRunSealed runs `egressd run -- curl` inside the gateway namespace of
// the test topology: the command reaches the allowed origin through the
// proxy and fails to connect directly, while a sibling sandbox without
// egressd's wall (the topology's own) does connect directly — the
// baseline that shows the direct route exists and only the wall stops it.
func TestRunSealed(t *testing.T) {
	topo := testnet.New(t, testnet.WithRecords(map[string][]netip.Addr{"allowed.test": {testnet.OriginAddr4}}))
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Fatal("curl is needed (apt-get install -y curl)")
	}
	bin := buildEgressd(t)
	cfg := filepath.Join(t.TempDir(), "egressd.yaml")
	os.WriteFile(cfg, []byte(`version: 1
resolver:
  upstreams: ["203.0.113.53:53"]
allow:
  - name: origin
    hosts: [allowed.test]
    cidrs: [203.0.113.0/24]
    pages: ["*"]
`), 0o644)
	os.Chmod(filepath.Dir(cfg), 0o755)
	run := func(args ...string) (string, int) {
		argv := append([]string{bin, "run", "--config", cfg, "--"}, args...)
		cmd := sandbox.NSExecCommand(bin, topo.Gateway.Path(), "", argv)
		cmd.Env = os.Environ()
		timer := time.AfterFunc(60*time.Second, func() { cmd.Process.Kill() })
		defer timer.Stop()
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("egressd run: %v\n%s", err, out)
		}
		return string(out), code
	}

	before := topo.Origin.Hits()
	out, code := run(curl, "-sS", "-m", "10", "http://allowed.test/through-proxy")
	if code != 0 || topo.Origin.Hits() == before {
		t.Fatalf("through the proxy: exit %d, origin hits %d→%d\n%s", code, before, topo.Origin.Hits(), out)
	}

	before = topo.Origin.Hits()
	out, code = run(curl, "-sS", "-m", "3", "--noproxy", "*", "http://203.0.113.100/direct")
	if code == 0 || topo.Origin.Hits() != before {
		t.Fatalf("direct connection from the sandbox succeeded (exit %d)\n%s", code, out)
	}
	out, code = run(curl, "-sS", "-m", "3", "--noproxy", "*", "http://169.254.169.254/")
	if code == 0 || topo.Metadata.Hits() != 0 {
		t.Fatalf("metadata reached directly (exit %d)\n%s", code, out)
	}
	// the command's exit code comes back
	if _, code := run("sh", "-c", "exit 7"); code != 7 {
		t.Errorf("exit code: got %d, want 7", code)
	}

	// baseline: the route exists; a sandbox without egressd's wall reaches the origin
	c, err := topo.DialFromSandbox(context.Background(), "tcp", "203.0.113.100:80")
	if err != nil {
		t.Fatalf("baseline: the topology's own sandbox cannot reach the origin: %v", err)
	}
	c.Close()
	if leftovers, _ := filepath.Glob("/run/netns/" + runbox.NSPrefix + "*"); len(leftovers) > 0 {
		for _, l := range leftovers {
			if strings.Contains(l, "-run") {
				t.Logf("note: namespaces left by other runs: %v", leftovers)
			}
		}
	}
}
