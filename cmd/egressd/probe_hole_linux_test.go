//go:build linux

package main

import (
	"bytes"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/daemon"
	"github.com/egressd/egressd/internal/testnet"
	"github.com/egressd/egressd/nft"
	"github.com/egressd/egressd/sandbox"
)

// TestProbeHoleFlips: the other side of "no false alarms". In a sandbox
// egressd did not wire (the topology's own namespace, behind serve's
// walls), `egressd probe` is sealed (exit 0); a real hole on that
// sandbox's path makes it exit 1 naming the hole, and closing the hole
// flips it back to 0. The untestable and never-allows classifications
// must not swallow a real hole.
func TestProbeHoleFlips(t *testing.T) {
	t.Parallel()
	l := newSTLab(t)
	l.startServe(t)
	// the sandbox trusts the origin's CA and egressd's (inspected rules)
	egressdCA, err := os.ReadFile(filepath.Join(l.state, "ca", "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(l.dir, "bundle.pem")
	os.WriteFile(bundle, append(append([]byte{}, l.topo.CA.CertPEM...), egressdCA...), 0o644)
	probe := func() (int, []string, string) {
		t.Helper()
		nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
		cmd := sandbox.NSExecCommandAs(l.bin, l.topo.Sandbox.Path(), "", nobody, []string{l.bin, "probe", "--json", "--proxy", "198.51.100.1:3128", "--dns", "198.51.100.1:53"})
		cmd.Env = []string{"PATH=/usr/bin:/bin", "SSL_CERT_FILE=" + bundle}
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
		rep := selftestJSON(t, out.String(), errb.String())
		return code, failureIDs(rep), tableOf(rep)
	}
	if code, fails, table := probe(); code != exitOK {
		t.Fatalf("sealed: exit %d, failures %q\n%s", code, fails, table)
	}
	insertAcceptFrom(t, l.topo.Gateway.Fd(), testnet.SandboxAddr4, netip.MustParseAddrPort("203.0.113.100:443"))
	if code, fails, table := probe(); code != exitDeny || !slices.Equal(fails, []string{"tcp/203.0.113.100:443"}) || !strings.Contains(table, "LEAK") {
		t.Errorf("with the hole: exit %d, failures %q, want 1 naming tcp/203.0.113.100:443\n%s", code, fails, table)
	}
	// close the hole: the walls as serve applies them
	spec, err := daemon.WallSpec(mustPolicy(t, strings.NewReplacer("{CA}", "/dev/null", "{PREFIX}", l.topo.IfPrefix, "{EXTRA}", "").Replace(stConfig)))
	if err != nil {
		t.Fatal(err)
	}
	if err := nft.Apply(l.topo.Gateway.Fd(), spec); err != nil {
		t.Fatal(err)
	}
	if code, fails, table := probe(); code != exitOK {
		t.Errorf("hole closed: exit %d, failures %q, want 0\n%s", code, fails, table)
	}
}
