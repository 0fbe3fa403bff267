package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/policy"
)

// A red-team pass on the candidate (bea337b): the self-test's connections meet the candidate, and
// nothing a candidate decided or checked may serve anyone else.

// noLoopbackCIDR is testConfig whose origin rule lists no cidrs: its
// hosts still match, but their loopback answers are special addresses
// it refuses.
func noLoopbackCIDR(cfg string) string {
	return strings.Replace(cfg,
		"hosts: [allowed.test, mixed.test, meta.test, private.test, rebind.test, loop.test]\n    cidrs: [127.0.0.0/8]\n",
		"hosts: [allowed.test, mixed.test, meta.test, private.test, rebind.test, loop.test]\n", 1)
}

// exemptOne makes exactly the connections from the client addresses in
// set the self-test's own.
type exemptOne struct {
	mu  sync.Mutex
	set map[netip.AddrPort]bool
}

func (e *exemptOne) has(client, _ netip.AddrPort) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.set[client]
}

func (e *exemptOne) add(c net.Conn) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.set == nil {
		e.set = map[netip.AddrPort]bool{}
	}
	ap := netip.MustParseAddrPort(c.LocalAddr().String())
	e.set[netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())] = true
}

// proxyPost sends one POST (a body: not the synchronous path, the
// http.Transport's) over c and returns the status and X-Egressd-Deny.
func proxyPost(t *testing.T, c net.Conn, br *bufio.Reader, url, host string) (int, string) {
	t.Helper()
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: text/plain\r\nContent-Length: 1\r\n\r\nx", url, host)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("X-Egressd-Deny")
}

// TestRedteamCandidateCandidateDialServesAgents: the http.Transport's idle pool is
// shared by every policy. A self-test request decided by the candidate
// dials, and checks the address it reaches, under the candidate; the
// connection then waits in the pool under the target's host:port, and the
// next agent request to that host:port, decided by the policy in force,
// is sent on it: the in-force policy's address check never runs. Here the
// policy in force refuses allowed.test's loopback answer (no cidrs) and
// the candidate allows it: the agent reaches the origin while the
// candidate is only being verified (and after it is dropped).
func TestRedteamCandidateCandidateDialServesAgents(t *testing.T) {
	t.Parallel()
	h := newHarness(t, noLoopbackCIDR(testConfig), testNames)
	cand, err := policy.Parse(strings.NewReader(strings.ReplaceAll(testConfig, "{DNS}", h.px.Policy().Resolver.Upstreams[0].String())), "candidate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ex := &exemptOne{}
	h.px.exempt = ex.has
	url := "http://allowed.test:" + h.plain.port() + "/x"
	host := "allowed.test:" + h.plain.port()

	agent := func(what string) (int, string) {
		c, err := net.Dial("tcp", h.proxyURL.Host)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return proxyPost(t, c, bufio.NewReader(c), url, host)
	}
	if st, why := agent("before"); st != 403 || why != "special-address" {
		t.Fatalf("agent before the candidate: %d %q, want 403 special-address", st, why)
	}

	h.px.SetCandidate(cand)
	self, err := net.Dial("tcp", h.proxyURL.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	ex.add(self)
	if st, why := proxyPost(t, self, bufio.NewReader(self), url, host); st != 200 {
		t.Fatalf("self-test under the candidate: %d %q, want 200", st, why)
	}

	before := h.plain.hits.Load()
	st, why := agent("during")
	if st != 403 || h.plain.hits.Load() != before {
		t.Errorf("agent while the candidate is verified: %d %q and the origin saw %d requests; want 403 special-address and none: the candidate's dial served an agent",
			st, why, h.plain.hits.Load()-before)
	}

	h.px.SetCandidate(nil) // the candidate failed and was dropped
	before = h.plain.hits.Load()
	st, why = agent("after")
	if st != 403 || h.plain.hits.Load() != before {
		t.Errorf("agent after the candidate was dropped: %d %q and the origin saw %d requests; want 403 special-address and none",
			st, why, h.plain.hits.Load()-before)
	}
}

// TestRedteamCandidateCandidateDialsThroughItsOwnParent: the checked dialer's settings
// (resolver upstreams, dial timeout, upstream_proxy) are the policy in
// force's (dialer.setPolicy), also for a self-test request the candidate
// decided. A candidate that adds an upstream_proxy is verified by direct
// dials: its parent controls (selftest/plan/parent.go) prove nothing about
// the parent it will send every sandbox through. Here the candidate's
// parent refuses every CONNECT: the self-test's request must fail, not
// reach the origin directly.
func TestRedteamCandidateCandidateDialsThroughItsOwnParent(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var connects sync.WaitGroup
	var seen int64
	var mu sync.Mutex
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			seen++
			mu.Unlock()
			connects.Add(1)
			go func() {
				defer connects.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(3 * time.Second))
				http.ReadRequest(bufio.NewReader(c))
				io.WriteString(c, "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			}()
		}
	}()
	cfg := strings.ReplaceAll(testConfig, "{DNS}", h.px.Policy().Resolver.Upstreams[0].String())
	cfg = strings.Replace(cfg, "allow:\n", "upstream_proxy:\n  address: "+l.Addr().String()+"\nallow:\n", 1)
	cand, err := policy.Parse(strings.NewReader(cfg), "candidate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	h.px.SetCandidate(cand)
	ex := &exemptOne{}
	h.px.exempt = ex.has
	self, err := net.Dial("tcp", h.proxyURL.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	ex.add(self)
	before := h.plain.hits.Load()
	st, why := proxyPost(t, self, bufio.NewReader(self), "http://allowed.test:"+h.plain.port()+"/x", "allowed.test:"+h.plain.port())
	mu.Lock()
	n := seen
	mu.Unlock()
	if n == 0 || st == 200 || h.plain.hits.Load() != before {
		t.Errorf("self-test under a candidate with a refusing parent: %d %q, the parent saw %d connections, the origin %d requests; want the parent asked and the request refused",
			st, why, n, h.plain.hits.Load()-before)
	}
}

// TestRedteamCandidateCandidateNamesSelfTestIdentity: the identity a request is decided
// as comes from the policy in force (identify, sourceIdentity: x.Policy()),
// also for a self-test request the candidate decides. A candidate that
// moves an identity's cidrs is then verified in a view neither policy
// gives the self-test's address: here the policy in force puts 127.0.0.1
// in identity ci, the candidate does not, and the candidate's ci-only
// rule is applied to the self-test's CONNECT (200) where the candidate
// itself refuses it (no-rule).
func TestRedteamCandidateCandidateNamesSelfTestIdentity(t *testing.T) {
	t.Parallel()
	withCI := func(cfg, cidr string) string {
		cfg = strings.Replace(cfg, "    hosts: [ssh.test]\n", "    hosts: [ssh.test]\n    identities: [ci]\n", 1)
		return strings.Replace(cfg, "identities:\n  - name: agent-a\n", "identities:\n  - name: ci\n    cidrs: ["+cidr+"]\n  - name: agent-a\n", 1)
	}
	h := newHarness(t, withCI(testConfig, "127.0.0.0/8"), testNames)
	cfg := strings.ReplaceAll(testConfig, "{DNS}", h.px.Policy().Resolver.Upstreams[0].String())
	cand, err := policy.Parse(strings.NewReader(withCI(cfg, "10.0.0.0/8")), "candidate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tgt, _ := policy.ParseAuthority("ssh.test:22")
	if d := cand.DecideTargetAs(&tgt, cand.SourceIdentity(netip.MustParseAddr("127.0.0.1"))); d.Allow {
		t.Fatalf("setup: the candidate allows ssh.test from 127.0.0.1")
	}
	h.px.SetCandidate(cand)
	h.px.exempt = func(_, _ netip.AddrPort) bool { return true }
	_, port := splitPort(h.plain.addr)
	c, err := net.Dial("tcp", h.proxyURL.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT ssh.test:%s HTTP/1.1\r\nHost: ssh.test:%s\r\n\r\n", port, port)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, _ := bufio.NewReader(c).ReadString('\n')
	if !strings.HasPrefix(line, "HTTP/1.1 403") {
		t.Errorf("self-test CONNECT ssh.test under a candidate that refuses it from 127.0.0.1: %q, want 403 (decided in the in-force policy's view of the address)", line)
	}
}
