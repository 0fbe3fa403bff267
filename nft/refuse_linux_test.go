//go:build linux

package nft

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/testnet"
	"github.com/egressd/egressd/sandbox"
)

// TestRefusedAtOnce: what the walls stop is refused as in a sealed box: a
// direct connection or datagram from the sandbox fails at once with the
// error an ICMP administratively-prohibited gives (EHOSTUNREACH for IPv4,
// EACCES for IPv6), never by waiting out its timeout, and never with a
// reset or port-unreachable (ECONNREFUSED: that reads as a packet that
// reached its target). One probe at a time: the kernel rate-limits ICMP
// errors per peer (a burst of 6), and this test stays within it.
func TestRefusedAtOnce(t *testing.T) {
	topo := testnet.New(t)
	gatewayServices(t, topo)
	gw := topo.Gateway.Fd()
	spec := topoSpec(topo, []netip.Addr{testnet.GatewayAddr4, testnet.GatewayAddr6}, "169.254.169.254/32", "fd00:ec2::254/128")
	if err := Apply(gw, spec); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	// The deadline (3 s) is what a silent wall would make the probe wait.
	// prompt: under a second, before TCP's first SYN retransmission, so
	// the first packet was refused; TCP over IPv6 gets its error from the
	// retransmission (about 1 s: measured here every time, the error for
	// the first SYN is only recorded as soft, the connect holding its
	// socket when it arrives; "the kernel's ICMP budget" in docs/PROOF.md).
	const deadline = 3 * time.Second
	ap := netip.AddrPortFrom
	cases := []struct {
		name, network string
		dst           netip.AddrPort
		want          syscall.Errno
		prompt        time.Duration
	}{
		{"tcp v4 forwarded", "tcp", ap(testnet.OriginAddr4, 443), syscall.EHOSTUNREACH, time.Second},
		{"tcp v6 forwarded", "tcp", ap(testnet.OriginAddr6, 443), syscall.EACCES, 2 * time.Second},
		{"udp v4 forwarded", "udp", ap(testnet.OriginAddr4, 123), syscall.EHOSTUNREACH, time.Second},
		{"udp v6 forwarded", "udp", ap(testnet.OriginAddr6, 123), syscall.EACCES, time.Second},
		{"tcp v4 to another gateway port", "tcp", ap(testnet.GatewayAddr4, leakOtherPort), syscall.EHOSTUNREACH, time.Second},
		{"tcp v4 to the metadata address (high-risk)", "tcp", ap(testnet.MetadataAddr4, 80), syscall.EHOSTUNREACH, time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			start := time.Now()
			conn, err := topo.DialFromSandbox(ctx, c.network, c.dst.String())
			if err == nil && c.network == "udp" {
				// A connected UDP socket reads the ICMP error of its send.
				conn.SetDeadline(time.Now().Add(deadline))
				if _, err = conn.Write([]byte("egressd refusal probe")); err == nil {
					_, err = conn.Read(make([]byte, 1500))
				}
			}
			if conn != nil {
				conn.Close()
			}
			took := time.Since(start)
			switch {
			case err == nil:
				t.Fatalf("%s %s: got an answer; the wall let it through", c.network, c.dst)
			case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
				t.Fatalf("%s %s: silence for %v (%v): the wall drops instead of refusing", c.network, c.dst, took.Round(time.Millisecond), err)
			case !errors.Is(err, c.want):
				t.Fatalf("%s %s: %v, want %v (an ICMP administratively prohibited)", c.network, c.dst, err, c.want)
			case took > c.prompt:
				t.Errorf("%s %s: refused after %v, want under %v", c.network, c.dst, took.Round(time.Millisecond), c.prompt)
			}
			t.Logf("%s %s: %v after %v", c.network, c.dst, err, took.Round(time.Millisecond))
		})
	}
	if d, err := Check(gw, spec); err != nil || len(d) != 0 {
		t.Errorf("Check after Apply: %q, %v; want no drift", d, err)
	}
	ctrs, err := Counters(gw, spec.TableName())
	if err != nil {
		t.Fatalf("Counters: %v", err)
	}
	for _, n := range []string{CounterDropForward, CounterDropInput, CounterDropHighRisk} {
		if ctrs[n].Packets == 0 {
			t.Errorf("counter %s: 0 packets; a refusal is still counted (%v)", n, ctrs)
		}
	}
}

// TestRefusalNotReflected: an ICMP error goes to the source of the packet
// it refuses and quotes that packet, so a refusal answered to a forged
// source would carry the sandbox's bytes to any address it writes there (a
// sandbox with CAP_NET_RAW, Docker's default, writes any source). The
// walls drop forged sources silently before every refusal. Here the
// forged source is the internet namespace's own address, where a raw
// socket sees any ICMP error that reaches it. Negative control: with the
// forward chain's spoof drop deleted, the quoted bytes do reach it.
func TestRefusalNotReflected(t *testing.T) {
	topo := testnet.New(t, testnet.WithoutServices())
	gw := topo.Gateway.Fd()
	spec := topoSpec(topo, []netip.Addr{testnet.GatewayAddr4}, "169.254.169.254/32")
	forged := testnet.InternetAddr4
	addSandboxAddrs(t, topo, forged)
	var icmpIn net.PacketConn
	if err := topo.DoInInternet(func() error {
		lc := net.ListenConfig{Control: sandbox.GuardControl(topo.Internet.Cookie())}
		var err error
		icmpIn, err = lc.ListenPacket(context.Background(), "ip4:icmp", forged.String())
		return err
	}); err != nil {
		t.Fatalf("raw ICMP socket in the internet namespace: %v", err)
	}
	t.Cleanup(func() { icmpIn.Close() })
	seen := make(chan string, 64)
	go func() {
		buf := make([]byte, 1500)
		for {
			n, _, err := icmpIn.ReadFrom(buf)
			if err != nil {
				return
			}
			if i := bytes.Index(buf[:n], []byte("forged:")); i >= 0 {
				seen <- string(buf[i:n])
			}
		}
	}()
	if err := Apply(gw, spec); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	// refused sends a datagram from the sandbox's own address to dst and
	// waits for the wall's refusal (its ICMP error): the path answers.
	refused := func(t *testing.T, dst netip.AddrPort) {
		t.Helper()
		c := dialFrom(t, topo, testnet.SandboxAddr4, dst)
		c.SetDeadline(time.Now().Add(probeTimeout))
		if _, err := c.Write([]byte("own")); err == nil {
			_, err = c.Read(make([]byte, 64))
			if !errors.Is(err, syscall.EHOSTUNREACH) {
				t.Fatalf("own datagram to %s: %v, want the wall's refusal (EHOSTUNREACH)", dst, err)
			}
		}
	}
	dsts := []netip.AddrPort{
		netip.AddrPortFrom(testnet.OriginAddr4, 9),                 // forward
		netip.AddrPortFrom(testnet.MetadataAddr4, 80),              // high-risk
		netip.AddrPortFrom(testnet.GatewayAddr4, 5353),             // input
		netip.AddrPortFrom(netip.MustParseAddr("198.51.100.1"), 7), // input, another port
	}
	send := func(t *testing.T) {
		for _, dst := range dsts {
			dialFrom(t, topo, forged, dst).Write([]byte("forged:" + dst.String())) //nolint:errcheck
		}
		// Sent after the forged ones, on the same link: once the wall
		// refused these, it had judged the forged ones.
		for _, dst := range dsts {
			refused(t, dst)
		}
	}

	t.Run("wall", func(t *testing.T) {
		send(t)
		select {
		case q := <-seen:
			show, _ := Show(gw, spec.TableName())
			t.Fatalf("an ICMP error quoting %q reached the forged source %s\n%s", q, forged, show)
		default:
		}
		ctrs, err := Counters(gw, spec.TableName())
		if err != nil {
			t.Fatal(err)
		}
		if ctrs[CounterDropSpoofed].Packets < uint64(len(dsts)-1) { // the high-risk one counts as high-risk
			t.Errorf("counter %s: %d packets, want the forged datagrams (%v)", CounterDropSpoofed, ctrs[CounterDropSpoofed].Packets, ctrs)
		}
	})
	t.Run("spoof drop deleted: the refusal reflects (negative control)", func(t *testing.T) {
		deleteRules(t, gw, spec.TableName(), chainSbxFwd, `fib saddr . iif oif missing counter counter name "drop_spoofed" drop`)
		dialFrom(t, topo, forged, dsts[0]).Write([]byte("forged:" + dsts[0].String())) //nolint:errcheck
		select {
		case q := <-seen:
			t.Logf("reflected to %s: %q", forged, q)
		case <-time.After(probeTimeout):
			t.Fatalf("no ICMP error reached %s without the spoof drop: the test cannot see a reflection", forged)
		}
	})
}
