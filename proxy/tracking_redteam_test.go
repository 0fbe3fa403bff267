package proxy

// A red-team pass on tracking (trackTunnel, the candidate for the
// self-test's tunnels, cut once): each test names the hole it showed on
// 28c893f, where all but the race ones failed.

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/policy"
	"golang.org/x/net/websocket"
)

// editedPolicy is testConfig (with the harness's DNS) edited by replacing
// old with new once.
func editedPolicy(t *testing.T, h *harness, old, new string) *policy.Policy {
	t.Helper()
	cfg := strings.ReplaceAll(testConfig, "{DNS}", h.px.Policy().Resolver.Upstreams[0].String())
	if !strings.Contains(cfg, old) {
		t.Fatalf("testConfig has no %q", old)
	}
	p, err := policy.Parse(strings.NewReader(strings.Replace(cfg, old, new, 1)), "edited.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// noLoopback: the origin rule still names allowed.test but no longer
// allows loopback addresses (its cidrs are gone).
func noLoopback(t *testing.T, h *harness) *policy.Policy {
	return editedPolicy(t, h,
		"hosts: [allowed.test, mixed.test, meta.test, private.test, rebind.test, loop.test]\n    cidrs: [127.0.0.0/8]\n",
		"hosts: [allowed.test, mixed.test, meta.test, private.test, rebind.test, loop.test]\n")
}

// TestRedteamTrackingTransparentDialAfterReloadMeetsNewPolicy: a transparent TLS
// tunnel is tracked (openTunnel) before splice dials. A reload landing in
// between re-decides it (redecideTunnels) with no upAddr yet, so only the
// host is checked, and splice then dials with cmp.Or(rq.pol, ...): the
// RETIRED policy's address checks and rule. The new policy forbids the
// address (127.0.0.1 without the rule's cidrs), yet the tunnel reaches
// it and stays open. Before 28c893f splice used x.Policy() here, with the old rule.
func TestRedteamTrackingTransparentDialAfterReloadMeetsNewPolicy(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	strict := noLoopback(t, h)
	// Control: the new policy still names the host, and refuses the address.
	tg := policy.Target{Name: "allowed.test", Port: 443}
	d := strict.DecideTargetAs(&tg, "")
	if !d.Allow {
		t.Fatalf("control: new policy denies allowed.test by name: %+v", d)
	}
	if ok, _ := strict.CheckAddr(d.Rule, netip.MustParseAddr("127.0.0.1")); ok {
		t.Fatalf("control: new policy allows 127.0.0.1 for the origin rule")
	}
	var once sync.Once
	h.px.beforeRelay = func() { once.Do(func() { h.px.SetPolicy(strict) }) }
	addr := transparentListen(t, h.px.ServeTransparentTLS, h.tlsO.port())
	before := h.tlsO.hits.Load()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	tc := tls.Client(c, &tls.Config{ServerName: "allowed.test", RootCAs: h.upCA.Pool()})
	if err := tc.Handshake(); err != nil {
		return // refused: the hole is closed
	}
	fmt.Fprintf(tc, "GET /x HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err == nil {
		resp.Body.Close()
	}
	if h.tlsO.hits.Load() != before {
		t.Errorf("a transparent tunnel reached 127.0.0.1 after a reload to a policy that forbids that address (dialed under the retired policy's checks)")
	}
	if h.px.Policy() != strict {
		t.Errorf("the reload did not happen")
	}
}

// TestRedteamTrackingInspectedCutTwiceLogsOnce: an inspected tunnel's cut is logged
// by cutTunnel itself; the tracker keeps the tunnel until its goroutine
// runs closeTunnel, so a second change in that window (two quick reloads,
// or a reload and trackTunnel's own re-decision, or quarantine + reload)
// cuts and logs it again: two denial lines for one tunnel.
func TestRedteamTrackingInspectedCutTwiceLogsOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	orig := h.px.Policy()
	deny1 := editedPolicy(t, h, "hosts: [docs.test]", "hosts: [other1.test]")
	deny2 := editedPolicy(t, h, "hosts: [docs.test]", "hosts: [other2.test]")
	const n, rounds = 10, 30 // the window is a race: try it many times
	for r := 0; r < rounds; r++ {
		h.px.SetPolicy(orig)
		for i := 0; i < n; i++ {
			h.connect(t, "docs.test:"+h.tlsO.port())
		}
		deadline := time.Now().Add(5 * time.Second)
		for h.px.OpenTunnels() < n && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if got := h.px.OpenTunnels(); got != n {
			t.Fatalf("open tunnels %d, want %d", got, n)
		}
		h.px.SetPolicy(deny1)
		h.px.SetPolicy(deny2)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := h.px.waitTunnels(ctx)
		cancel()
		if err != nil {
			t.Fatalf("tunnels still open: %d", h.px.OpenTunnels())
		}
	}
	lines := 0 // cutTunnel logged each synchronously in SetPolicy
	for _, l := range strings.Split(h.logs.String(), "\n") {
		if strings.Contains(l, "closed on reload") && strings.Contains(l, "docs.test") {
			lines++
		}
	}
	if lines != n*rounds {
		t.Errorf("%d reload-cut lines for %d inspected tunnels, want one each", lines, n*rounds)
	}
}

// TestRedteamTrackingDrainRefusedInspectedTunnelLogged: trackTunnel refuses
// a tunnel after the drain's closeAll with a bare c.Close() (no cutBy);
// unrun then skips the line of an inspected tunnel ("logged by
// cutTunnel"), which never ran: the CONNECT that was decided allowed and
// cut at open leaves no decision line at all.
func TestRedteamTrackingDrainRefusedInspectedTunnelLogged(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	h.px.ids.closeAll() // the drain's close, as a CONNECT is being decided
	line, c := connectStatus(t, h, "docs.test:"+h.tlsO.port())
	c.Close()
	_ = line
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.px.waitTunnels(ctx); err != nil {
		t.Fatalf("tunnel still open: %d", h.px.OpenTunnels())
	}
	if h.px.OpenTunnels() != 0 {
		t.Errorf("OpenTunnels %d", h.px.OpenTunnels())
	}
	if _, err := h.logs.Wait(2*time.Second, nil, `"docs.test`, `"status"`); err != nil {
		t.Errorf("no decision line for the inspected CONNECT refused by the drain at open; log:\n%s", h.logs.String())
	}
}

// TestRedteamTrackingReloadDuringTransparentDialNoRace: redecideTunnels reads
// rq.upAddr of a tracked tunnel while splice writes it after its dial,
// with no lock between them (run with -race).
func TestRedteamTrackingReloadDuringTransparentDialNoRace(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	same := editedPolicy(t, h, "name: origin", "name: origin")
	var once sync.Once
	done := make(chan struct{})
	f := func() {
		once.Do(func() {
			go func() { h.px.SetPolicy(same); close(done) }()
			time.Sleep(50 * time.Millisecond) // the dial is slow; no sync with the reload
		})
	}
	h.guard.onDial.Store(&f)
	addr := transparentListen(t, h.px.ServeTransparentTLS, h.tlsO.port())
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	tc := tls.Client(c, &tls.Config{ServerName: "allowed.test", RootCAs: h.upCA.Pool()})
	_ = tc.Handshake()
	<-done
	h.px.SetPolicy(same) // reads upAddr again, after the write
}

// TestRedteamTrackingTransparentCutAtOpenDoesNotDial: a transparent TLS tunnel that
// trackTunnel cuts as it opens (here: its identity quarantined while
// egressd waited for the ClientHello, which the client times) still runs
// runTunnel -> splice, which resolves and dials the target before it
// notices the cut (onCut): a quarantined identity (or a tunnel the new
// policy denies, or one refused by the drain) still gets a TCP handshake
// to its destination, under the old decision's address checks.
func TestRedteamTrackingTransparentCutAtOpenDoesNotDial(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	addr := transparentListen(t, h.px.ServeTransparentTLS, h.tlsO.port())
	var dialed sync.Map
	quarantined := make(chan struct{})
	f := func() {
		select {
		case <-quarantined:
			dialed.Store("after", true)
		default:
		}
	}
	h.guard.onDial.Store(&f)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.Sleep(200 * time.Millisecond) // egressd now waits for the ClientHello
	id := h.px.sourceIdentity(netip.MustParseAddr("127.0.0.1"))
	h.px.Quarantine(id)
	close(quarantined)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	tc := tls.Client(c, &tls.Config{ServerName: "allowed.test", RootCAs: h.upCA.Pool()})
	if tc.Handshake() == nil {
		t.Errorf("a quarantined identity's transparent TLS handshake succeeded")
	}
	waitNoTunnels(t, h.px, 5*time.Second, "cut by a quarantine")
	if _, ok := dialed.Load("after"); ok {
		t.Errorf("egressd dialed the upstream for a tunnel it had cut at open (identity %q quarantined)", id)
	}
	if _, err := h.logs.Wait(2*time.Second, nil, `"reason":"quarantine"`); err != nil {
		t.Errorf("no quarantine line: %v", err)
	}
}

// TestRedteamTrackingWebSocketAddressRecheckedOnReload: a reload cuts a spliced
// tunnel whose upstream address the new policy refuses (redecide checks
// rq.upAddr), but an open WebSocket is re-decided by name only
// (redecideWebSocket; its dial's address is never kept): a reload that
// takes 127.0.0.0/8 from the rule leaves the WebSocket to 127.0.0.1 open.
func TestRedteamTrackingWebSocketAddressRecheckedOnReload(t *testing.T) {
	t.Parallel()
	h := newHarness(t, wsConfig, wsNames)
	port, _ := wsOrigin(t, h)
	tc := inspectedTLS(t, h, "ws.test", port)
	tc.SetDeadline(time.Time{})
	cfg, _ := websocket.NewConfig("wss://ws.test:"+port+"/chat", "https://ws.test/")
	ws, err := websocket.NewClient(cfg, tc)
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	waitOpen(t, h.px, 2)
	text := strings.ReplaceAll(wsConfig, "{DNS}", h.px.Policy().Resolver.Upstreams[0].String())
	text = strings.Replace(text, "hosts: [ws.test]\n    cidrs: [127.0.0.0/8]\n", "hosts: [ws.test]\n", 1)
	next, err := policy.Parse(strings.NewReader(text), "next.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tg := policy.Target{Name: "ws.test", Port: 443}
	if d := next.DecideTargetAs(&tg, ""); !d.Allow {
		t.Fatalf("control: next denies ws.test by name")
	} else if ok, _ := next.CheckAddr(d.Rule, netip.MustParseAddr("127.0.0.1")); ok {
		t.Fatalf("control: next allows 127.0.0.1 for ws.test")
	}
	h.px.SetPolicy(next)
	if err := websocket.Message.Send(ws, "after"); err != nil {
		return // cut: fine
	}
	ws.SetReadDeadline(time.Now().Add(2 * time.Second))
	var got string
	if err := websocket.Message.Receive(ws, &got); err == nil {
		t.Errorf("a WebSocket to 127.0.0.1 still relays (%q) after a reload to a policy that refuses that address for its rule", got)
	}
}

// denyLines counts the denial decision lines naming host.
func denyLines(h *harness, host string) []string {
	var out []string
	for _, l := range strings.Split(h.logs.String(), "\n") {
		if strings.Contains(l, `"msg":"decision"`) && strings.Contains(l, `"host":"`+host+`"`) && strings.Contains(l, `"decision":"deny"`) {
			out = append(out, l)
		}
	}
	return out
}

// TestRedteamTrackingInspectedCutLogsOnce: an inspected tunnel cut by the tracker
// (cutTunnel logs its line itself) is then ended by inspect, which meets
// the closed connection and logs its own denial (no-client-hello, or
// tls-handshake): two denial lines for one tunnel. "transparent refused at
// open" is the path 28c893f added (trackTunnel's quarantine cut, then
// runTunnel -> inspect); "CONNECT waiting for its hello" is the same on
// a quarantine of an open tunnel. cutTunnel's copy of rq.d also races
// inspect's cut() writing rq.d.Allow (-race).
func TestRedteamTrackingInspectedCutLogsOnce(t *testing.T) {
	t.Parallel()
	t.Run("transparent refused at open", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, testConfig, testNames)
		addr := transparentListen(t, h.px.ServeTransparentTLS, h.tlsO.port())
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		time.Sleep(200 * time.Millisecond) // egressd waits for the ClientHello
		h.px.Quarantine(h.px.sourceIdentity(netip.MustParseAddr("127.0.0.1")))
		c.SetDeadline(time.Now().Add(5 * time.Second))
		tc := tls.Client(c, &tls.Config{ServerName: "docs.test", RootCAs: h.mitmCA.Pool()})
		_ = tc.Handshake()
		waitNoTunnels(t, h.px, 5*time.Second, "cut by a quarantine")
		time.Sleep(200 * time.Millisecond)
		if l := denyLines(h, "docs.test"); len(l) != 1 {
			t.Errorf("%d denial lines for one tunnel:\n%s", len(l), strings.Join(l, "\n"))
		}
	})
	t.Run("CONNECT waiting for its hello", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, testConfig, testNames)
		h.connect(t, "docs.test:"+h.tlsO.port())
		waitOpen(t, h.px, 1)
		h.px.Quarantine("127.0.0.1")
		waitNoTunnels(t, h.px, 5*time.Second, "cut by a quarantine")
		time.Sleep(200 * time.Millisecond)
		if l := denyLines(h, "docs.test"); len(l) != 1 {
			t.Errorf("%d denial lines for one tunnel:\n%s", len(l), strings.Join(l, "\n"))
		}
	})
}
