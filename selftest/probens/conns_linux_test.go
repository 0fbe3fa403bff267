package probens

import (
	"bufio"
	"context"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/egressd/egressd/sandbox"
)

// reuseDial connects to dst from exactly local with SO_REUSEADDR, as a
// local process that read the self-test's client port from /proc/net/tcp
// would (to bind over the probe's TIME_WAIT).
func reuseDial(ctx context.Context, local netip.AddrPort, dst string) (net.Conn, error) {
	d := &net.Dialer{
		LocalAddr: net.TCPAddrFromAddrPort(local),
		Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			if err := rc.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
			}); err != nil {
				return err
			}
			return serr
		},
	}
	return d.DialContext(ctx, "tcp", dst)
}

func listenLoopback(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func accept(t *testing.T, l net.Listener) net.Conn {
	t.Helper()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestConnSetEndsWithServer: a probe (from loopback) sends a request and
// gives up; egressd decides the request after the probe closed (still the
// self-test's: the linger's purpose), then closes its side. From then on
// the probe's client address is no longer exempt: the probe's request has
// been decided, and the next connection from that address is someone
// else's. Until then no other socket can bind the probe's port, even with
// SO_REUSEADDR (the kernel fact the rule leans on).
func TestConnSetEndsWithServer(t *testing.T) {
	s := &ConnSet{m: map[connKey]int{}, closed: map[connKey]time.Time{}, ended: make(chan connKey, 1)}
	proxyL, otherL := listenLoopback(t), listenLoopback(t)
	probe, err := s.track(loopbackDialer())(t.Context(), "tcp", proxyL.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	client := netip.MustParseAddrPort(probe.LocalAddr().String())
	srv := accept(t, proxyL)
	if !exempt(s, srv) {
		t.Fatal("the probe's open connection is not exempt")
	}
	if c, err := reuseDial(t.Context(), client, otherL.Addr().String()); err == nil {
		c.Close()
		t.Fatal("bound an open probe connection's client address with SO_REUSEADDR")
	}
	if _, err := probe.Write([]byte("GET http://169.254.169.254/ HTTP/1.1\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	probe.Close() // the probe gave up before egressd read its request
	if c, err := reuseDial(t.Context(), client, otherL.Addr().String()); err == nil {
		c.Close()
		t.Fatal("bound a closed probe connection's client address with SO_REUSEADDR while egressd still holds the connection")
	}
	if _, err := bufio.NewReader(srv).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if !exempt(s, srv) {
		t.Error("the request a probe sent before it gave up is decided as an agent's")
	}
	srv.Close() // decided: egressd closes its side
	waitEnded(t, s)
	if exempt(s, srv) {
		t.Error("the probe's client address is still exempt after egressd closed the probe's connection: the next connection from it is someone else's")
	}
}

// TestConnSetOtherListener: a connection from the probe's client address
// to another of egressd's listeners is not the self-test's. In a private
// namespace whose ephemeral port range is one port, a plain connect to
// another listener shares the open probe connection's local port (Linux
// lets connect() reuse a local port for another 4-tuple): on the machine
// that is a local process churning connections until it lands on a port
// it read from /proc/net/tcp.
func TestConnSetOtherListener(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("EGRESSD_REQUIRE_NETNS") == "1" {
			t.Fatal("TestConnSetOtherListener needs root (a private network namespace)")
		}
		t.Skip("needs root: a private network namespace")
	}
	ns, err := sandbox.CreateUnnamed()
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	s := &ConnSet{m: map[connKey]int{}, closed: map[connKey]time.Time{}, ended: make(chan connKey, 1)}
	var proxyL, otherL net.Listener
	var probe, attack net.Conn
	err = sandbox.Do(ns, func() error {
		h, err := netlink.NewHandle() // this thread's namespace: the private one
		if err != nil {
			return err
		}
		defer h.Close()
		lo, err := h.LinkByName("lo")
		if err != nil {
			return err
		}
		if err := h.LinkSetUp(lo); err != nil {
			return err
		}
		if err := os.WriteFile("/proc/sys/net/ipv4/ip_local_port_range", []byte("40000 40000"), 0); err != nil {
			return err
		}
		if proxyL, err = net.Listen("tcp", "127.0.0.1:3128"); err != nil {
			return err
		}
		if otherL, err = net.Listen("tcp", "127.0.0.1:53"); err != nil {
			return err
		}
		if probe, err = s.track(loopbackDialer())(context.Background(), "tcp", proxyL.Addr().String()); err != nil {
			return err
		}
		attack, err = (&net.Dialer{}).Dial("tcp", otherL.Addr().String())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer proxyL.Close()
	defer otherL.Close()
	defer probe.Close()
	defer attack.Close()
	if probe.LocalAddr().String() != attack.LocalAddr().String() {
		t.Fatalf("the attack got %s, the probe %s: the test proves nothing", attack.LocalAddr(), probe.LocalAddr())
	}
	if !exempt(s, accept(t, proxyL)) {
		t.Fatal("the probe's open connection is not exempt")
	}
	if exempt(s, accept(t, otherL)) {
		t.Error("a connection from the probe's client address to another listener is exempt as the self-test's")
	}
}

// exempt is the predicate as egressd's listener asks it, for the
// connection it accepted.
func exempt(s *ConnSet, srv net.Conn) bool {
	return s.Has(netip.MustParseAddrPort(srv.RemoteAddr().String()), netip.MustParseAddrPort(srv.LocalAddr().String()))
}

// waitEnded waits until a lingering connection has ended in s (egressd
// closed its side: the probe's socket read the end).
func waitEnded(t *testing.T, s *ConnSet) {
	t.Helper()
	select {
	case <-s.ended:
	case <-time.After(connLinger / 2): // a bound: connLinger would end it anyway
		t.Fatal("the probe's connection did not end after egressd closed its side")
	}
}
