//go:build linux

package nft

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/testnet"
	"github.com/egressd/egressd/sandbox"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// TestSpoofedSourceDropped: a sandbox that writes a source address it does
// not own (a raw socket needs only CAP_NET_RAW, which Docker grants by
// default) reached the gateway's DNS port: the walls accepted it by input
// interface and destination, and the kernel's rp_filter is off by default.
// The filtering DNS keys its rate limit, its name budget
// (limits.dns_wildcard_names) and the self-test's readiness exemption on
// that source, so each forged address bought a fresh budget: DNS
// exfiltration without bound. The walls drop a sandbox packet whose source
// does not route back out of the interface it came in on
// (`fib saddr . iif oif missing`), counted as drop_spoofed.
//
// The sandbox here owns the forged addresses (added to its interface), so
// the packets are real kernel traffic; on the gateway's side they are
// exactly what a raw socket would send. Each round sends the forged
// datagram first and one from the sandbox's own address after it on the
// same link: once the second has arrived, the first was dropped.
func TestSpoofedSourceDropped(t *testing.T) {
	t.Parallel()
	topo := testnet.New(t, testnet.WithoutServices())
	gw := topo.Gateway.Fd()
	spec := topoSpec(topo, []netip.Addr{testnet.GatewayAddr4, testnet.GatewayAddr6})
	forged4, forged6 := netip.MustParseAddr("203.0.113.77"), netip.MustParseAddr("2001:db8:77::7")
	addSandboxAddrs(t, topo, forged4, forged6)

	type family struct {
		own, forged, gw netip.Addr
		mu              sync.Mutex
		seen            map[netip.Addr]int
	}
	fams := []*family{
		{own: testnet.SandboxAddr4, forged: forged4, gw: testnet.GatewayAddr4},
		{own: testnet.SandboxAddr6, forged: forged6, gw: testnet.GatewayAddr6},
	}
	for _, f := range fams {
		f.seen = map[netip.Addr]int{}
		pc, err := topo.ListenPacketInGateway("udp", netip.AddrPortFrom(f.gw, leakDNSPort).String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() })
		go func() {
			buf := make([]byte, 1500)
			for {
				_, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				a := from.(*net.UDPAddr).AddrPort().Addr().Unmap()
				f.mu.Lock()
				f.seen[a]++
				f.mu.Unlock()
			}
		}()
	}
	// round sends forged-then-own datagrams until the own one arrives and
	// reports whether a forged one arrived.
	round := func(t *testing.T, f *family) bool {
		t.Helper()
		f.mu.Lock()
		clear(f.seen)
		f.mu.Unlock()
		dst := netip.AddrPortFrom(f.gw, leakDNSPort)
		forged, own := dialFrom(t, topo, f.forged, dst), dialFrom(t, topo, f.own, dst)
		deadline := time.Now().Add(probeTimeout)
		for time.Now().Before(deadline) {
			forged.Write([]byte("forged"))    //nolint:errcheck
			own.Write([]byte("own"))          //nolint:errcheck
			time.Sleep(20 * time.Millisecond) // resend pace while a neighbour entry resolves, not synchronisation
			f.mu.Lock()
			ownSeen, forgedSeen := f.seen[f.own] > 0, f.seen[f.forged] > 0
			f.mu.Unlock()
			if ownSeen {
				return forgedSeen
			}
		}
		t.Fatalf("no datagram from the sandbox's own %s reached %s within %v", f.own, dst, probeTimeout)
		return false
	}

	// Baseline: with no table every datagram arrives, forged or not.
	for _, f := range fams {
		if !round(t, f) {
			t.Fatalf("no table: the datagram from %s never arrived: the test cannot tell", f.forged)
		}
	}
	if err := Apply(gw, spec); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	for _, f := range fams {
		if round(t, f) {
			show, _ := Show(gw, spec.TableName())
			t.Errorf("a datagram from %s (not the sandbox's, not routed via its link) reached the gateway's DNS port through the walls\n%s", f.forged, show)
		}
	}
	counters, err := Counters(gw, spec.TableName())
	if err != nil {
		t.Fatal(err)
	}
	if counters[CounterDropSpoofed].Packets == 0 {
		t.Errorf("counter %s: 0 packets, want the forged datagrams counted", CounterDropSpoofed)
	}
}

// addSandboxAddrs adds addresses to the sandbox's end of its link (IPv6
// without duplicate address detection, so it is usable at once).
func addSandboxAddrs(t *testing.T, topo *testnet.Topo, addrs ...netip.Addr) {
	t.Helper()
	if topo.Sandbox.Fd() <= 0 { // netlink would act in this thread's namespace
		t.Fatalf("namespace %s has no fd", topo.Sandbox)
	}
	h, err := netlink.NewHandleAt(netns.NsHandle(topo.Sandbox.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l, err := h.LinkByName(topo.SandboxLink.SandboxName)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		na, err := netlink.ParseAddr(netip.PrefixFrom(a, a.BitLen()).String())
		if err != nil {
			t.Fatal(err)
		}
		if a.Is6() {
			na.Flags = unix.IFA_F_NODAD
		}
		if err := h.AddrAdd(l, na); err != nil {
			t.Fatalf("add %s in the sandbox: %v", a, err)
		}
	}
}

// dialFrom opens a UDP socket in the sandbox bound to src and connected to
// dst (guarded by the sandbox's namespace cookie).
func dialFrom(t *testing.T, topo *testnet.Topo, src netip.Addr, dst netip.AddrPort) net.Conn {
	t.Helper()
	var c net.Conn
	err := topo.DoInSandbox(func() error {
		d := net.Dialer{LocalAddr: net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0)), Control: sandbox.GuardControl(topo.Sandbox.Cookie())}
		var err error
		c, err = d.DialContext(context.Background(), "udp", dst.String())
		return err
	})
	if err != nil {
		t.Fatalf("udp from %s to %s in the sandbox: %v", src, dst, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
