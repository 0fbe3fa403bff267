package proxy

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/policy"
)

// withoutSSH is testConfig whose raw-ssh rule names another host: its
// policy denies a CONNECT to ssh.test.
func withoutSSH(t *testing.T, h *harness) *policy.Policy {
	t.Helper()
	cfg := strings.ReplaceAll(testConfig, "{DNS}", h.px.Policy().Resolver.Upstreams[0].String())
	p, err := policy.Parse(strings.NewReader(strings.Replace(cfg, "hosts: [ssh.test]", "hosts: [other.test]", 1)), "without-ssh.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// connectStatus sends a CONNECT as agent-a and returns the status line
// and the connection.
func connectStatus(t *testing.T, h *harness, authority string) (string, net.Conn) {
	t.Helper()
	c, err := net.Dial("tcp", h.proxyURL.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\n\r\n", authority, authority, basic("agent-a"))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, _ := bufio.NewReader(c).ReadString('\n')
	return line, c
}

// TestCandidateDecidesSelfTestConnect: while a reload verifies a
// candidate, the self-test's own connections are decided by the
// candidate and nobody else's are. A CONNECT is one of them: decided by
// the policy in force, the self-test's CONNECT probes proved the old
// policy, and a candidate that leaks only through a tunnel went in force.
func TestCandidateDecidesSelfTestConnect(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	h.px.SetCandidate(withoutSSH(t, h))
	_, port := splitPort(h.plain.addr)
	for _, tc := range []struct {
		name   string
		exempt bool
		want   string
	}{
		{"the self-test's connection: the candidate", true, "HTTP/1.1 403"},
		{"anyone else: the policy in force", false, "HTTP/1.1 200"},
	} {
		h.px.exempt = func(_, _ netip.AddrPort) bool { return tc.exempt }
		if line, _ := connectStatus(t, h, "ssh.test:"+port); !strings.HasPrefix(line, tc.want) {
			t.Errorf("%s: CONNECT ssh.test: %q, want %s", tc.name, line, tc.want)
		}
	}
}

// TestTunnelDecidedDuringChange: a quarantine, a reload or the drain's
// close that lands while a CONNECT dials (after its decision, before its
// tunnel is tracked) found nothing to close, and the tunnel then opened
// under the state it was decided in: a quarantined identity's tunnel, one
// the new policy denies, or one the drain then waited for, stayed open.
func TestTunnelDecidedDuringChange(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		change func(h *harness, deny *policy.Policy)
		reason string
	}{
		{"quarantine", func(h *harness, _ *policy.Policy) { h.px.Quarantine("agent-a") }, `"reason":"quarantine"`},
		{"reload", func(h *harness, deny *policy.Policy) { h.px.SetPolicy(deny) }, `"reason":"no-rule"`},
		{"drain", func(h *harness, _ *policy.Policy) { h.px.ids.closeAll() }, `"reason":"shutdown"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, testConfig, testNames)
			deny := withoutSSH(t, h)
			port := silentUpstream(t)
			changed := make(chan struct{})
			f := func() { tc.change(h, deny); close(changed) }
			h.guard.onDial.Store(&f)
			_, c := connectStatus(t, h, "ssh.test:"+port)
			<-changed
			waitNoTunnels(t, h.px, 3*time.Second, "a tunnel decided before a "+tc.name+" stays open after it")
			c.SetReadDeadline(time.Now().Add(3 * time.Second))
			if _, err := c.Read(make([]byte, 1)); err == nil {
				t.Errorf("the client's side is still open")
			}
			if _, err := h.logs.Wait(2*time.Second, nil, tc.reason); err != nil {
				t.Errorf("no decision line with %s: %v", tc.reason, err)
			}
		})
	}
}
