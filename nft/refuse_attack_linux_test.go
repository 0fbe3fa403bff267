//go:build linux

package nft

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/testnet"
	"github.com/egressd/egressd/sandbox"
)

// TestRefusalNotReflected6: TestRefusalNotReflected over IPv6, where an
// ICMPv6 error quotes up to 1,232 bytes of the refused packet: a sandbox
// writing the internet namespace's address as its source gets no refusal
// carried there from the forward, input or high-risk refusal. Negative
// control: with the forward chain's spoof drop deleted, the quoted bytes
// reach it.
func TestRefusalNotReflected6(t *testing.T) {
	topo := testnet.New(t, testnet.WithoutServices())
	gw := topo.Gateway.Fd()
	spec := topoSpec(topo, []netip.Addr{testnet.GatewayAddr6}, "fd00:ec2::254/128")
	forged := testnet.InternetAddr6
	addSandboxAddrs(t, topo, forged)
	var icmpIn net.PacketConn
	if err := topo.DoInInternet(func() error {
		lc := net.ListenConfig{Control: sandbox.GuardControl(topo.Internet.Cookie())}
		var err error
		icmpIn, err = lc.ListenPacket(context.Background(), "ip6:ipv6-icmp", forged.String())
		return err
	}); err != nil {
		t.Fatalf("raw ICMPv6 socket in the internet namespace: %v", err)
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
	dsts := []netip.AddrPort{
		netip.AddrPortFrom(testnet.OriginAddr6, 9),                   // forward
		netip.AddrPortFrom(netip.MustParseAddr("fd00:ec2::254"), 80), // high-risk
		netip.AddrPortFrom(testnet.GatewayAddr6, 5353),               // input
	}
	send := func(t *testing.T, dsts []netip.AddrPort) {
		for _, dst := range dsts {
			dialFrom(t, topo, forged, dst).Write([]byte("forged:" + dst.String())) //nolint:errcheck
		}
		// Sent after the forged ones on the same link: once the wall
		// refused these, it had judged the forged ones.
		for _, dst := range dsts {
			c := dialFrom(t, topo, testnet.SandboxAddr6, dst)
			c.SetDeadline(time.Now().Add(probeTimeout))
			if _, err := c.Write([]byte("own")); err == nil {
				if _, err = c.Read(make([]byte, 64)); !errors.Is(err, syscall.EACCES) {
					t.Fatalf("own datagram to %s: %v, want the wall's refusal (EACCES)", dst, err)
				}
			}
		}
	}
	t.Run("wall", func(t *testing.T) {
		send(t, dsts)
		select {
		case q := <-seen:
			show, _ := Show(gw, spec.TableName())
			t.Fatalf("an ICMPv6 error quoting %q reached the forged source %s\n%s", q, forged, show)
		default:
		}
	})
	t.Run("spoof drop deleted: the refusal reflects (negative control)", func(t *testing.T) {
		deleteRules(t, gw, spec.TableName(), chainSbxFwd, `fib saddr . iif oif missing counter counter name "drop_spoofed" drop`)
		dialFrom(t, topo, forged, dsts[0]).Write([]byte("forged:" + dsts[0].String())) //nolint:errcheck
		select {
		case q := <-seen:
			t.Logf("reflected to %s: %q", forged, q)
		case <-time.After(probeTimeout):
			t.Fatalf("no ICMPv6 error reached %s without the spoof drop: the test cannot see a reflection", forged)
		}
	})
}
