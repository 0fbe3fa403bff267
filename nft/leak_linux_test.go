//go:build linux

package nft

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/testnet"
	"github.com/egressd/egressd/sandbox"
	"github.com/google/nftables"
	"github.com/miekg/dns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// Leak tests: real packets from the sandbox namespace of a testnet topology,
// with the table applied in its gateway namespace.

const (
	leakProxyPort = 3128
	leakDNSPort   = 53
	leakOtherPort = 2222 // a gateway service the sandbox must not reach
	leakOtherUDP  = 5353

	// probeTimeout bounds every probe. All probes of a round run at once,
	// and every round starts with cold neighbour caches; the baseline round
	// proves that each probe gets its answer well within this time when the
	// path is open.
	probeTimeout = 2 * time.Second
)

// Probe groups: which wall a probe tests.
const (
	grpService = "service"  // gateway proxy and DNS ports: always open
	grpInet    = "inet"     // internet hosts, directly: forward drop
	grpMeta    = "metadata" // metadata server: high-risk drop
	grpGateway = "gateway"  // other gateway ports and addresses: input drop
)

type probe struct {
	group string
	proto string // tcp, udp, dns, icmp
	dst   netip.AddrPort
}

func (p probe) String() string {
	if p.proto == "icmp" {
		return "icmp " + p.dst.Addr().String()
	}
	return p.proto + " " + p.dst.String()
}

func leakProbes() []probe {
	ap := netip.AddrPortFrom
	gw4, gw6 := testnet.GatewayAddr4, testnet.GatewayAddr6
	ps := []probe{
		{grpService, "tcp", ap(gw4, leakProxyPort)},
		{grpService, "tcp", ap(gw6, leakProxyPort)},
		{grpService, "udp", ap(gw4, leakDNSPort)},
		{grpService, "udp", ap(gw6, leakDNSPort)},
		{grpService, "tcp", ap(gw4, leakDNSPort)},
		{grpService, "tcp", ap(gw6, leakDNSPort)},

		{grpGateway, "tcp", ap(gw4, leakOtherPort)},
		{grpGateway, "tcp", ap(gw6, leakOtherPort)},
		{grpGateway, "udp", ap(gw4, leakOtherUDP)},
		{grpGateway, "icmp", ap(gw4, 0)},
		{grpGateway, "icmp", ap(gw6, 0)},
		// The proxy port, but on the gateway's uplink address.
		{grpGateway, "tcp", ap(testnet.UplinkAddr4, leakProxyPort)},

		{grpMeta, "tcp", ap(testnet.MetadataAddr4, 80)},
		{grpMeta, "icmp", ap(testnet.MetadataAddr4, 0)},

		{grpInet, "tcp", ap(testnet.OriginAddr4, 80)},
		{grpInet, "tcp", ap(testnet.OriginAddr4, 443)},
		{grpInet, "tcp", ap(testnet.OriginAddr6, 80)},
		{grpInet, "tcp", ap(testnet.OriginAddr6, 443)},
		{grpInet, "dns", ap(testnet.DNSAddr4, 53)},
		{grpInet, "dns", ap(testnet.DNSAddr6, 53)},
		{grpInet, "icmp", ap(testnet.OriginAddr4, 0)},
		{grpInet, "icmp", ap(testnet.OriginAddr6, 0)},
	}
	for _, p := range testnet.TCPPorts { // 22, 25, 53, high ports
		ps = append(ps, probe{grpInet, "tcp", ap(testnet.OriginAddr4, p)}, probe{grpInet, "tcp", ap(testnet.OriginAddr6, p)})
	}
	for _, p := range testnet.UDPPorts { // 53, 123
		ps = append(ps, probe{grpInet, "udp", ap(testnet.OriginAddr4, p)}, probe{grpInet, "udp", ap(testnet.OriginAddr6, p)})
	}
	return ps
}

// topoSpec is the walls for topo's sandbox link: the proxy and DNS ports
// on the gateway addresses gws, and the high-risk prefixes highRisk.
func topoSpec(topo *testnet.Topo, gws []netip.Addr, highRisk ...string) Spec {
	return Spec{
		IfPrefixes: []string{topo.IfPrefix},
		Gateways:   gws,
		ProxyPort:  leakProxyPort,
		DNSPort:    leakDNSPort,
		HighRisk:   pfx(highRisk...),
	}
}

// gatewayServices starts the listeners egressd's proxy and DNS would hold,
// plus other gateway services, all answering anything.
func gatewayServices(t *testing.T, topo *testnet.Topo) {
	t.Helper()
	for _, port := range []int{leakProxyPort, leakDNSPort, leakOtherPort} {
		l, err := topo.ListenInGateway("tcp", fmt.Sprintf(":%d", port)) // every gateway address
		if err != nil {
			t.Fatalf("listen tcp :%d in gateway: %v", port, err)
		}
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Write([]byte("gw\n"))
				c.Close()
			}
		}()
	}
	for _, port := range []int{leakDNSPort, leakOtherUDP} {
		pc, err := topo.ListenPacketInGateway("udp", fmt.Sprintf(":%d", port))
		if err != nil {
			t.Fatalf("listen udp :%d in gateway: %v", port, err)
		}
		go func() {
			buf := make([]byte, 1500)
			for {
				n, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				pc.WriteTo(buf[:n], from)
			}
		}()
	}
}

var pingID atomic.Uint32

// runProbe reports whether p got an answer from the sandbox. A refusal
// (RST, ICMP port unreachable) is an answer: the packet got through. The
// wall's own refusal (ICMP administratively prohibited: EHOSTUNREACH,
// EACCES) or no answer within probeTimeout means blocked.
func runProbe(topo *testnet.Topo, p probe) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	deadline, _ := ctx.Deadline()
	blocked := func(err error) (bool, error) {
		var ne net.Error
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, syscall.ECONNREFUSED):
			return true, nil
		case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
			return false, nil
		case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.EACCES):
			return false, nil
		}
		return false, err
	}

	switch p.proto {
	case "tcp":
		c, err := topo.DialFromSandbox(ctx, "tcp", p.dst.String())
		if err == nil {
			c.Close()
		}
		return blocked(err)
	case "udp", "dns":
		payload := []byte("egressd leak probe")
		if p.proto == "dns" {
			m := new(dns.Msg)
			m.SetQuestion("allowed.test.", dns.TypeA)
			b, err := m.Pack()
			if err != nil {
				return false, err
			}
			payload = b
		}
		c, err := topo.DialFromSandbox(ctx, "udp", p.dst.String())
		if err != nil {
			return false, err
		}
		defer c.Close()
		return blocked(resend(deadline, c.SetReadDeadline, func() error { _, err := c.Write(payload); return err }, func() error {
			_, err := c.Read(make([]byte, 1500))
			return err
		}))
	case "icmp":
		return blocked(ping(topo, p.dst.Addr(), deadline))
	}
	return false, fmt.Errorf("unknown probe protocol %q", p.proto)
}

// resend sends every 250ms until a read succeeds or the deadline passes, so
// that one lost datagram (a neighbour entry still resolving) does not read
// as blocked.
func resend(deadline time.Time, setReadDeadline func(time.Time) error, send, recv func() error) error {
	for {
		if err := send(); err != nil && !errors.Is(err, syscall.ECONNREFUSED) {
			return err
		}
		next := time.Now().Add(250 * time.Millisecond)
		if next.After(deadline) {
			next = deadline
		}
		if err := setReadDeadline(next); err != nil {
			return err
		}
		err := recv()
		if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) || !time.Now().Before(deadline) {
			return err
		}
	}
}

// ping sends ICMP echo requests from a raw socket created in the sandbox
// (guarded by its namespace cookie) and waits for a matching reply.
func ping(topo *testnet.Topo, dst netip.Addr, deadline time.Time) error {
	network, proto := "ip4:icmp", 1
	var req, reply icmp.Type = ipv4.ICMPTypeEcho, ipv4.ICMPTypeEchoReply
	if dst.Is6() {
		network, proto = "ip6:ipv6-icmp", 58
		req, reply = ipv6.ICMPTypeEchoRequest, ipv6.ICMPTypeEchoReply
	}
	var pc net.PacketConn
	if err := topo.DoInSandbox(func() error {
		lc := net.ListenConfig{Control: sandbox.GuardControl(topo.Sandbox.Cookie())}
		var err error
		pc, err = lc.ListenPacket(context.Background(), network, "")
		return err
	}); err != nil {
		return err
	}
	defer pc.Close()
	id := int(pingID.Add(1) & 0xffff)
	msg, err := (&icmp.Message{Type: req, Body: &icmp.Echo{ID: id, Seq: 1, Data: []byte("egressd leak probe")}}).Marshal(nil)
	if err != nil {
		return err
	}
	to := &net.IPAddr{IP: dst.AsSlice()}
	buf := make([]byte, 1500)
	return resend(deadline, pc.SetReadDeadline, func() error { _, err := pc.WriteTo(msg, to); return err }, func() error {
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return err
			}
			m, err := icmp.ParseMessage(proto, buf[:n])
			if err != nil || m.Type != reply {
				continue
			}
			if e, ok := m.Body.(*icmp.Echo); ok && e.ID == id {
				if a, ok := netip.AddrFromSlice(from.(*net.IPAddr).IP); ok && a.Unmap() == dst {
					return nil
				}
			}
		}
	})
}

// openProbes runs all probes at once and returns those that got through.
func openProbes(t *testing.T, topo *testnet.Topo, ps []probe) []string {
	t.Helper()
	var (
		mu   sync.Mutex
		open []string
		wg   sync.WaitGroup
	)
	for _, p := range ps {
		wg.Go(func() {
			ok, err := runProbe(topo, p)
			if err != nil {
				t.Errorf("probe %s: %v", p, err)
			}
			if ok {
				mu.Lock()
				open = append(open, p.String())
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(open)
	return open
}

// flushNeigh6 empties the IPv6 neighbour caches of the sandbox and the
// gateway, so a round must do neighbour discovery through the wall.
func flushNeigh6(t *testing.T, nss ...*sandbox.NS) {
	t.Helper()
	for _, ns := range nss {
		// An fd <= 0 would make netlink act in this thread's namespace.
		if ns.Fd() <= 0 {
			t.Fatalf("namespace %s has no fd", ns)
		}
		h, err := netlink.NewHandleAt(netns.NsHandle(ns.Fd()))
		if err != nil {
			t.Fatalf("netlink handle in %s: %v", ns, err)
		}
		neighs, err := h.NeighList(0, netlink.FAMILY_V6)
		if err != nil {
			h.Close()
			t.Fatalf("list neighbours in %s: %v", ns, err)
		}
		for _, n := range neighs {
			if n.IP.IsLinkLocalUnicast() || netip.MustParsePrefix("2001:db8::/32").Contains(netip.MustParseAddr(n.IP.String())) {
				_ = h.NeighDel(&n) // an entry may vanish on its own meanwhile
			}
		}
		h.Close()
	}
}

// linkUp sets a link of a test namespace up.
func linkUp(t *testing.T, ns *sandbox.NS, name string) {
	t.Helper()
	if ns.Fd() <= 0 { // netlink would act in this thread's namespace
		t.Fatalf("namespace %s has no fd", ns)
	}
	h, err := netlink.NewHandleAt(netns.NsHandle(ns.Fd()))
	if err != nil {
		t.Fatalf("netlink handle in %s: %v", ns, err)
	}
	defer h.Close()
	l, err := h.LinkByName(name)
	if err == nil {
		err = h.LinkSetUp(l)
	}
	if err != nil {
		t.Fatalf("set %s up in %s: %v", name, ns, err)
	}
}

// deleteRules removes the rules of chain whose text is one of texts, behind
// egressd's back, and fails unless each text matched a rule.
func deleteRules(t *testing.T, ns int, table, chain string, texts ...string) {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(ns))
	if err != nil {
		t.Fatal(err)
	}
	tbl := &nftables.Table{Family: nftables.TableFamilyINet, Name: table}
	rules, err := c.GetRules(tbl, &nftables.Chain{Name: chain, Table: tbl})
	if err != nil {
		t.Fatalf("GetRules %s: %v", chain, err)
	}
	found := 0
	for _, r := range rules {
		if slices.Contains(texts, describeRule(r.Exprs, false)) {
			if err := c.DelRule(r); err != nil {
				t.Fatal(err)
			}
			found++
		}
	}
	if found != len(texts) {
		t.Fatalf("chain %s: deleted %d rules, want %d (%q)", chain, found, len(texts), texts)
	}
	if err := c.Flush(); err != nil {
		t.Fatalf("delete rules: %v", err)
	}
}

func TestLeak(t *testing.T) {
	t.Parallel()
	topo := testnet.New(t)
	gatewayServices(t, topo)
	gw := topo.Gateway.Fd()
	spec := topoSpec(topo, []netip.Addr{testnet.GatewayAddr4, testnet.GatewayAddr6}, "169.254.169.254/32", "169.254.170.2/32", "fd00:ec2::254/128")
	probes := leakProbes()
	groups := func(gs ...string) []string {
		var out []string
		for _, p := range probes {
			if slices.Contains(gs, p.group) {
				out = append(out, p.String())
			}
		}
		slices.Sort(out)
		return out
	}
	fwdDrop := `counter counter name "drop_fwd" reject with icmpx admin-prohibited`
	rounds := []struct {
		name   string
		table  bool
		tamper func(t *testing.T)
		want   []string
	}{
		{name: "no table: every probe gets through (baseline)", want: groups(grpService, grpGateway, grpMeta, grpInet)},
		{name: "wall", table: true, want: groups(grpService)},
		{name: "forward drop removed: direct traffic leaks, metadata stays dropped", table: true,
			tamper: func(t *testing.T) { deleteRules(t, gw, spec.TableName(), chainSbxFwd, fwdDrop) },
			want:   groups(grpService, grpInet)},
		{name: "forward drop and high-risk rules removed: metadata leaks too", table: true,
			tamper: func(t *testing.T) {
				deleteRules(t, gw, spec.TableName(), chainSbxFwd, fwdDrop,
					`ip daddr @highrisk4 fib saddr . iif oif missing counter counter name "drop_highrisk" drop`,
					`ip daddr @highrisk4 counter counter name "drop_highrisk" reject with icmpx admin-prohibited`,
					`ip6 daddr @highrisk6 fib saddr . iif oif missing counter counter name "drop_highrisk" drop`,
					`ip6 daddr @highrisk6 counter counter name "drop_highrisk" reject with icmpx admin-prohibited`)
			},
			want: groups(grpService, grpInet, grpMeta)},
		{name: "forward classifier removed: nothing forwarded is judged", table: true,
			tamper: func(t *testing.T) {
				deleteRules(t, gw, spec.TableName(), chainForward, `iifname "egsbx*" counter jump sbx_fwd`)
			},
			want: groups(grpService, grpInet, grpMeta)},
		{name: "input drop removed: the gateway's other ports and addresses leak", table: true,
			tamper: func(t *testing.T) {
				deleteRules(t, gw, spec.TableName(), chainSbxIn, `counter counter name "drop_input" reject with icmpx admin-prohibited`)
			},
			want: groups(grpService, grpGateway)},
		{name: "neighbour discovery rules removed: IPv6 to the gateway fails", table: true,
			tamper: func(t *testing.T) {
				deleteRules(t, gw, spec.TableName(), chainSbxIn,
					`ip6 hoplimit 255 icmpv6 type nd-neighbor-solicit counter counter name "accept_nd" accept`,
					`ip6 hoplimit 255 icmpv6 type nd-neighbor-advert counter counter name "accept_nd" accept`)
			},
			want: func() []string {
				var out []string
				for _, p := range groups(grpService) {
					if !strings.Contains(p, "[") { // IPv4 only
						out = append(out, p)
					}
				}
				return out
			}()},
	}
	for _, r := range rounds {
		t.Run(r.name, func(t *testing.T) {
			if r.table {
				if err := Apply(gw, spec); err != nil {
					t.Fatalf("Apply: %v", err)
				}
			} else if err := Down(gw, spec.TableName()); err != nil && !errors.Is(err, ErrNoTable) {
				t.Fatalf("Down: %v", err)
			}
			if r.tamper != nil {
				r.tamper(t)
			}
			flushNeigh6(t, topo.Sandbox, topo.Gateway)
			start := time.Now()
			got := openProbes(t, topo, probes)
			t.Logf("%d probes in %v", len(probes), time.Since(start).Round(time.Millisecond))
			if strings.Join(got, "\n") != strings.Join(r.want, "\n") {
				show, _ := Show(gw, spec.TableName())
				t.Errorf("open probes:\ngot  %q\nwant %q\ntable:\n%s", got, r.want, show)
			}
			if r.name == "wall" {
				checkWallCounters(t, gw, spec.TableName())
			}
		})
	}
}

// checkWallCounters checks that each named counter saw the probes it is
// named for.
func checkWallCounters(t *testing.T, gw int, table string) {
	t.Helper()
	ctrs, err := Counters(gw, table)
	if err != nil {
		t.Fatalf("Counters: %v", err)
	}
	for _, n := range []string{CounterDropHighRisk, CounterDropInput, CounterDropForward, CounterAcceptProxy, CounterAcceptDNS, CounterAcceptND} {
		if ctrs[n].Packets == 0 {
			t.Errorf("counter %s: got 0 packets, want some (counters %v)", n, ctrs)
		}
	}
}

// Local-user sandboxes: the output hook matches socket owners. The probes
// run in a child process (this test binary, TestUIDProbeHelper) that enters
// the gateway namespace with nsenter and drops to the uid under test.

const (
	sandboxUID = 54321 // in Spec.UIDs
	otherUID   = 54322 // not in Spec.UIDs: the control that the match is by uid
	helperEnv  = "EGRESSD_NFT_UID_PROBE"
)

// TestUIDProbeHelper is the child side: it is skipped unless helperEnv is
// set to "uid cookie addr,addr,...". It becomes uid, dials each TCP address
// through a guard that accepts only the namespace with that cookie, and
// prints "open ADDR" or "blocked ADDR".
func TestUIDProbeHelper(t *testing.T) {
	// Not parallel: the child side of TestLeakUID, alone in its own process (skipped otherwise).
	cookie, list := uidHelper(t, helperEnv, "TestLeakUID")
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, addr := range strings.Split(list, ",") {
		wg.Go(func() {
			d := net.Dialer{Timeout: probeTimeout, Control: sandbox.GuardControl(cookie)}
			c, err := d.Dial("tcp", addr)
			var ne net.Error
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil || errors.Is(err, syscall.ECONNREFUSED):
				fmt.Printf("open %s\n", addr)
			case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.EACCES):
				fmt.Printf("refused %s\n", addr) // the wall's ICMP administratively prohibited
			case errors.As(err, &ne) && ne.Timeout():
				fmt.Printf("blocked %s\n", addr)
			default:
				fmt.Printf("error %s %v\n", addr, err)
			}
			if c != nil {
				c.Close()
			}
		})
	}
	wg.Wait()
}

// uidOpen runs the helper as uid in the gateway namespace and returns the
// addresses it reached and those that stayed silent (neither reached nor
// refused) until the probe's timeout.
func uidOpen(t *testing.T, topo *testnet.Topo, uid int, addrs []string) (open, silent []string) {
	t.Helper()
	cmd := exec.Command("nsenter", "--net="+topo.Gateway.Path(), "--", os.Args[0], "-test.run=^TestUIDProbeHelper$", "-test.v")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d %d %s", helperEnv, uid, topo.Gateway.Cookie(), strings.Join(addrs, ",")))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("uid %d probe helper: %v\n%s", uid, err, out)
	}
	seen := 0
	for _, l := range strings.Split(string(out), "\n") {
		switch f := strings.Fields(l); {
		case len(f) == 2 && f[0] == "open":
			open = append(open, f[1])
			seen++
		case len(f) == 2 && f[0] == "refused":
			seen++
		case len(f) == 2 && f[0] == "blocked":
			silent = append(silent, f[1])
			seen++
		case len(f) > 0 && f[0] == "error":
			t.Errorf("uid %d probe: %s", uid, l)
		}
	}
	if seen != len(addrs) {
		t.Fatalf("uid %d probe helper reported %d of %d addresses:\n%s", uid, seen, len(addrs), out)
	}
	slices.Sort(open)
	return open, silent
}

func TestLeakUID(t *testing.T) {
	t.Parallel()
	topo := testnet.New(t)
	gatewayServices(t, topo)
	linkUp(t, topo.Gateway, "lo") // local-user traffic to the gateway's own addresses goes over lo
	gw := topo.Gateway.Fd()
	spec := Spec{
		UIDs:      []uint32{sandboxUID},
		Gateways:  []netip.Addr{testnet.GatewayAddr4},
		ProxyPort: leakProxyPort,
		DNSPort:   leakDNSPort,
		HighRisk:  pfx("169.254.169.254/32"),
	}
	proxy := netip.AddrPortFrom(testnet.GatewayAddr4, leakProxyPort).String()
	dnsTCP := netip.AddrPortFrom(testnet.GatewayAddr4, leakDNSPort).String()
	other := netip.AddrPortFrom(testnet.GatewayAddr4, leakOtherPort).String()
	origin := netip.AddrPortFrom(testnet.OriginAddr4, 80).String()
	origin6 := netip.AddrPortFrom(testnet.OriginAddr6, 443).String()
	meta := netip.AddrPortFrom(testnet.MetadataAddr4, 80).String()
	all := []string{proxy, dnsTCP, other, origin, origin6, meta}
	sorted := func(ss ...string) []string { slices.Sort(ss); return ss }

	rounds := []struct {
		name   string
		table  bool
		tamper func(t *testing.T)
		uid    int
		want   []string
	}{
		{name: "no table: the uid reaches everything (baseline)", uid: sandboxUID, want: sorted(all...)},
		{name: "wall: the uid reaches only the proxy and DNS", table: true, uid: sandboxUID, want: sorted(proxy, dnsTCP)},
		{name: "wall: another uid is not a sandbox", table: true, uid: otherUID, want: sorted(all...)},
		{name: "output drop removed: direct traffic leaks, metadata stays dropped", table: true, uid: sandboxUID,
			tamper: func(t *testing.T) {
				deleteRules(t, gw, spec.TableName(), chainSbxOut, `counter counter name "drop_output_uid" reject with icmpx admin-prohibited`)
			},
			want: sorted(proxy, dnsTCP, other, origin, origin6)},
	}
	for _, r := range rounds {
		t.Run(r.name, func(t *testing.T) {
			if r.table {
				if err := Apply(gw, spec); err != nil {
					t.Fatalf("Apply: %v", err)
				}
			} else if err := Down(gw, spec.TableName()); err != nil && !errors.Is(err, ErrNoTable) {
				t.Fatalf("Down: %v", err)
			}
			if r.tamper != nil {
				r.tamper(t)
			}
			got, silent := uidOpen(t, topo, r.uid, all)
			if strings.Join(got, " ") != strings.Join(r.want, " ") {
				show, _ := Show(gw, spec.TableName())
				t.Errorf("uid %d reached:\ngot  %q\nwant %q\ntable:\n%s", r.uid, got, r.want, show)
			}
			if r.table && r.tamper == nil && len(silent) > 0 {
				// The wall refuses (an ICMP error over lo: no rate limit), it does not drop.
				t.Errorf("uid %d: silence until the timeout from %q, want the wall's refusal", r.uid, silent)
			}
			if r.table && r.tamper == nil && r.uid == sandboxUID {
				ctrs, err := Counters(gw, spec.TableName())
				if err != nil {
					t.Fatal(err)
				}
				for _, n := range []string{CounterDropOutputUID, CounterDropHighRisk, CounterAcceptProxy, CounterAcceptDNS} {
					if ctrs[n].Packets == 0 {
						t.Errorf("counter %s: got 0 packets, want some (counters %v)", n, ctrs)
					}
				}
			}
		})
	}
}

// TestLeakBySource selects the sandbox by source CIDRs instead of the
// interface: the same wall holds, and the gateway's own traffic, whose
// source lies inside the sandbox CIDR, is not cut off.
func TestLeakBySource(t *testing.T) {
	t.Parallel()
	topo := testnet.New(t)
	gatewayServices(t, topo)
	linkUp(t, topo.Gateway, "lo")
	gw := topo.Gateway.Fd()
	spec := Spec{
		SourceCIDRs: []netip.Prefix{testnet.SandboxPrefix4, testnet.SandboxPrefix6}, // holds the gateway's 198.51.100.1 too
		Gateways:    []netip.Addr{testnet.GatewayAddr4, testnet.GatewayAddr6},
		ProxyPort:   leakProxyPort,
		DNSPort:     leakDNSPort,
		HighRisk:    pfx("169.254.169.254/32"),
	}
	probes := leakProbes()
	var service []string
	for _, p := range probes {
		if p.group == grpService {
			service = append(service, p.String())
		}
	}
	slices.Sort(service)
	// The gateway host talking to itself from 198.51.100.1.
	local := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
		defer cancel()
		c, err := topo.GatewayDialer().DialContext(ctx, "tcp", netip.AddrPortFrom(testnet.GatewayAddr4, leakOtherPort).String())
		if err == nil {
			c.Close()
		}
		return err
	}

	if err := Apply(gw, spec); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	flushNeigh6(t, topo.Sandbox, topo.Gateway)
	if got := openProbes(t, topo, probes); strings.Join(got, "\n") != strings.Join(service, "\n") {
		show, _ := Show(gw, spec.TableName())
		t.Errorf("open probes:\ngot  %q\nwant %q\ntable:\n%s", got, service, show)
	}
	if err := local(); err != nil {
		t.Errorf("gateway to its own %s:%d: %v, want connected (lo is not a sandbox)", testnet.GatewayAddr4, leakOtherPort, err)
	}

	// Negative control: without the lo rule, the gateway's own traffic from
	// a sandbox address is judged as sandbox traffic and dropped.
	deleteRules(t, gw, spec.TableName(), chainInput, `iifname "lo" counter accept`)
	if err := local(); err == nil {
		t.Errorf("gateway to its own %s:%d without the lo rule: connected, want blocked", testnet.GatewayAddr4, leakOtherPort)
	}
}

// uidHelper is the start of a helper child that env ("UID COOKIE ARG")
// names (skipped when it does not: parent is the test that runs it): it
// makes the whole process run as UID (Go applies setgid/setuid to every
// thread) and returns the sandbox namespace's cookie and ARG.
func uidHelper(t *testing.T, env, parent string) (cookie uint64, arg string) {
	t.Helper()
	spec := os.Getenv(env)
	if spec == "" {
		t.Skip("helper for " + parent)
	}
	var uid int
	if _, err := fmt.Sscanf(spec, "%d %d %s", &uid, &cookie, &arg); err != nil {
		t.Fatalf("parse %s=%q: %v", env, spec, err)
	}
	if err := syscall.Setgid(uid); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setuid(uid); err != nil {
		t.Fatal(err)
	}
	return cookie, arg
}
