//go:build linux

package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/testnet"
	"github.com/egressd/egressd/sandbox"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// testPrefix starts the names of this package's test namespaces; the PID
// after it lets CleanupStale spare concurrently running test binaries.
const testPrefix = "egsbt-"

func TestMain(m *testing.M) {
	// The NSExec tests re-execute this binary as the __nsexec child.
	if len(os.Args) > 1 && os.Args[1] == sandbox.NSExecArg {
		err := sandbox.NSExecMain(os.Args[2:])
		fmt.Fprintln(os.Stderr, err)
		os.Exit(127)
	}
	if os.Geteuid() == 0 {
		if gone, err := sandbox.CleanupStale(testPrefix); err != nil || len(gone) > 0 {
			fmt.Fprintf(os.Stderr, "cleanup of stale test namespaces: deleted %v, err %v\n", gone, err)
		}
	}
	code := m.Run()
	testnet.ReportRootTests("sandbox")
	os.Exit(code)
}

var nameSeq struct {
	sync.Mutex
	n int
}

// uniqueName returns a namespace name no other test or test binary uses.
func uniqueName(suffix string) string {
	nameSeq.Lock()
	defer nameSeq.Unlock()
	nameSeq.n++
	return sandbox.PIDName(testPrefix, strconv.Itoa(nameSeq.n)+"-"+suffix)
}

// newNS creates a namespace with lo up, deleted at cleanup.
func newNS(t testing.TB, suffix string) *sandbox.NS {
	t.Helper()
	testnet.RequireRoot(t)
	name := uniqueName(suffix)
	ns, err := sandbox.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ns.Close()
		if err := sandbox.Delete(name); err != nil {
			t.Error(err)
		}
	})
	h, err := netlink.NewHandleAt(netns.NsHandle(ns.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err == nil {
		err = h.LinkSetUp(lo)
	}
	if err != nil {
		t.Fatalf("set lo up in %s: %v", ns, err)
	}
	return ns
}

func current(t testing.TB) *sandbox.NS {
	t.Helper()
	ns, err := sandbox.Current()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	return ns
}

func TestCreateOpenDelete(t *testing.T) {
	t.Parallel()
	testnet.RequireRoot(t)
	home := current(t)
	root := testnet.RootCookie(t)
	name := uniqueName("a")
	ns, err := sandbox.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	if ns.Cookie() == 0 || ns.Cookie() == home.Cookie() || ns.Cookie() == root {
		t.Errorf("new namespace cookie %d: want non-zero and unlike home %d and root %d", ns.Cookie(), home.Cookie(), root)
	}
	if got, want := ns.Path(), filepath.Join(sandbox.NetnsDir, name); got != want || ns.Name() != name {
		t.Errorf("got path %q name %q, want %q and %q", got, ns.Name(), want, name)
	}
	if _, err := sandbox.Create(name); !errors.Is(err, os.ErrExist) {
		t.Errorf("second Create: got %v, want an error wrapping os.ErrExist", err)
	}
	op, err := sandbox.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	if op.Cookie() != ns.Cookie() {
		t.Errorf("Open: got cookie %d, want %d", op.Cookie(), ns.Cookie())
	}
	op.Close()
	if cur := current(t); cur.Cookie() != home.Cookie() {
		t.Errorf("after Create/Open the caller's namespace changed: cookie %d, want %d", cur.Cookie(), home.Cookie())
	}
	// Current's path must work from another process while the handle is open.
	viaPath, err := sandbox.OpenPath(home.Path())
	if err != nil {
		t.Fatal(err)
	}
	if viaPath.Cookie() != home.Cookie() {
		t.Errorf("OpenPath(%s): got cookie %d, want %d", home.Path(), viaPath.Cookie(), home.Cookie())
	}
	viaPath.Close()

	if err := sandbox.Delete(name); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(ns.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after Delete: stat %s: got %v, want not exist", ns.Path(), err)
	}
	if _, err := sandbox.Open(name); err == nil {
		t.Error("Open after Delete: got nil error")
	}
	if err := sandbox.Delete(name); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("second Delete: got %v, want os.ErrNotExist", err)
	}
	for _, bad := range []string{"", ".", "..", "a/b"} {
		if _, err := sandbox.Create(bad); err == nil {
			t.Errorf("Create(%q): got nil error", bad)
		}
	}
	if err := ns.Close(); err != nil || ns.Fd() != -1 {
		t.Errorf("Close: got %v, fd %d; want nil, -1", err, ns.Fd())
	}
	if err := sandbox.Do(ns, func() error { return nil }); !errors.Is(err, sandbox.ErrClosed) {
		t.Errorf("Do on a closed handle: got %v, want ErrClosed", err)
	}
}

func TestCleanupPrefix(t *testing.T) {
	t.Parallel()
	testnet.RequireRoot(t)
	prefix := uniqueName("cp-")
	var want []string
	for i := range 2 {
		name := prefix + strconv.Itoa(i)
		ns, err := sandbox.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		ns.Close() // as a crashed run would leave it: named, no handle
		want = append(want, name)
	}
	// A create that crashed between the file and the bind mount.
	plain := prefix + "plain"
	if err := os.WriteFile(filepath.Join(sandbox.NetnsDir, plain), nil, 0o444); err != nil {
		t.Fatal(err)
	}
	want = append(want, plain)
	other := newNS(t, "other") // another prefix: must survive

	got, err := sandbox.CleanupPrefix(prefix)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("got deleted %v, want %v", got, want)
	}
	for _, n := range want {
		if _, err := os.Lstat(filepath.Join(sandbox.NetnsDir, n)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still present after cleanup (%v)", n, err)
		}
	}
	if _, err := os.Lstat(other.Path()); err != nil {
		t.Errorf("namespace outside the prefix was touched: %v", err)
	}
	if got, err := sandbox.CleanupPrefix(prefix); err != nil || len(got) != 0 {
		t.Errorf("second cleanup: got %v, %v; want nothing", got, err)
	}
	for _, bad := range []string{"", "a/"} {
		if _, err := sandbox.CleanupPrefix(bad); err == nil {
			t.Errorf("CleanupPrefix(%q): got nil error, want one", bad)
		}
	}
}

func TestCleanupStale(t *testing.T) {
	t.Parallel()
	testnet.RequireRoot(t)
	// A PID that has just exited stands for a crashed test binary.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := cmd.Process.Pid
	prefix := uniqueName("cs-")
	names := map[string]bool{ // name → want deleted
		prefix + strconv.Itoa(dead) + "-x":        true,
		prefix + strconv.Itoa(os.Getpid()) + "-y": false,
		prefix + "nopid":                          false,
	}
	for n := range names {
		ns, err := sandbox.Create(n)
		if err != nil {
			t.Fatal(err)
		}
		ns.Close()
		t.Cleanup(func() { sandbox.Delete(n) })
	}
	got, err := sandbox.CleanupStale(prefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !names[got[0]] {
		t.Errorf("got deleted %v, want only the dead PID's namespace", got)
	}
	for n, gone := range names {
		_, err := os.Lstat(filepath.Join(sandbox.NetnsDir, n))
		if gone != errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: stat error %v, want deleted=%v", n, err, gone)
		}
	}
}

func TestDo(t *testing.T) {
	t.Parallel()
	sbx := newNS(t, "do")
	home := current(t)
	var inside, fromGoroutine uint64
	err := sandbox.Do(sbx, func() error {
		cur, err := sandbox.Current()
		if err != nil {
			return err
		}
		inside = cur.Cookie()
		cur.Close()
		// Pitfall: a goroutine started here runs in the process's namespace.
		done := make(chan error)
		go func() {
			cur, err := sandbox.Current()
			if err == nil {
				fromGoroutine = cur.Cookie()
				cur.Close()
			}
			done <- err
		}()
		return <-done
	})
	if err != nil {
		t.Fatal(err)
	}
	if inside != sbx.Cookie() {
		t.Errorf("inside Do: got cookie %d, want the sandbox's %d", inside, sbx.Cookie())
	}
	if fromGoroutine != home.Cookie() {
		t.Errorf("goroutine started inside Do: got cookie %d, want home %d", fromGoroutine, home.Cookie())
	}

	sentinel := errors.New("sentinel")
	if err := sandbox.Do(sbx, func() error { return sentinel }); !errors.Is(err, sentinel) {
		t.Errorf("got %v, want f's error", err)
	}
	if err := sandbox.Do(sbx, func() error { runtime.Goexit(); return nil }); err == nil {
		t.Error("Do with runtime.Goexit: got nil error, want one")
	}

	// Every thread must come back: after many concurrent Do calls, no
	// goroutine on any thread may find itself in the sandbox.
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			// the sleep is the load: it keeps threads inside the namespace
			// at once, so Do calls overlap (no synchronisation waits on it)
			sandbox.Do(sbx, func() error { time.Sleep(time.Millisecond); return nil })
		})
	}
	wg.Wait()
	var mu sync.Mutex
	leaked := 0
	for range 64 {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			c, err := sandbox.Current()
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			if c.Cookie() != home.Cookie() {
				mu.Lock()
				leaked++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if leaked != 0 {
		t.Errorf("%d goroutines found their thread outside the home namespace after Do", leaked)
	}
}

// listenLoopback opens a TCP listener on 127.0.0.1 in the test's own
// namespace (loopback only) and counts what it accepts within wait.
func listenLoopback(t *testing.T) (addr string, accepted func(wait time.Duration) int) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l.Addr().String(), func(wait time.Duration) int {
		n := 0
		for {
			l.(*net.TCPListener).SetDeadline(time.Now().Add(wait))
			c, err := l.Accept()
			if err != nil {
				return n
			}
			c.Close()
			n++
		}
	}
}

// TestGuardRefusesBeforeConnect shows the guard stops a socket created in
// the wrong namespace before connect(2): the loopback listener it was aimed
// at sees no connection, while the same dial with the right cookie (the
// control) does reach it.
func TestGuardRefusesBeforeConnect(t *testing.T) {
	t.Parallel()
	sbx := newNS(t, "guard")
	home := current(t)
	root := testnet.RootCookie(t)
	notRoot, err := sandbox.NotRootControl()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		control sandbox.ControlFunc
		refuse  bool
	}{
		{"sandbox cookie refuses a home socket", sandbox.GuardControl(sbx.Cookie()), true},
		{"zero cookie refuses everything", sandbox.GuardControl(0), true},
		{"not-root guard refuses a root socket", notRoot, home.Cookie() == root},
		{"control: home cookie lets it through", sandbox.GuardControl(home.Cookie()), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, accepted := listenLoopback(t)
			d := net.Dialer{Control: tc.control, Timeout: 2 * time.Second}
			c, err := d.Dial("tcp", addr)
			if c != nil {
				c.Close()
			}
			n := accepted(200 * time.Millisecond)
			if tc.refuse {
				if !errors.Is(err, sandbox.ErrWrongNamespace) {
					t.Errorf("got err %v, want ErrWrongNamespace", err)
				}
				if n != 0 {
					t.Errorf("listener accepted %d connections, want 0: the guard must run before connect", n)
				}
				return
			}
			if err != nil || n != 1 {
				t.Errorf("got err %v and %d accepted, want nil and 1", err, n)
			}
		})
	}

	t.Run("udp refused before send", func(t *testing.T) {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		for _, want := range []uint64{sbx.Cookie(), home.Cookie()} {
			d := net.Dialer{Control: sandbox.GuardControl(want)}
			c, err := d.Dial("udp", pc.LocalAddr().String())
			if err == nil {
				c.Write([]byte("x"))
				c.Close()
			}
			pc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			_, _, rerr := pc.ReadFrom(make([]byte, 10))
			got := rerr == nil
			if wantRecv := want == home.Cookie(); got != wantRecv || (err == nil) != wantRecv {
				t.Errorf("guard cookie %d: dial err %v, datagram received %v; want received=%v", want, err, got, wantRecv)
			}
		}
	})

	// The pitfall the guard exists for: inside Do, http.Transport still
	// dials from a runtime thread in the home namespace. With a guard for
	// the sandbox the request is refused and nothing reaches the home
	// namespace's listener.
	t.Run("http transport dial escapes Do", func(t *testing.T) {
		addr, accepted := listenLoopback(t)
		tr := &http.Transport{DialContext: (&net.Dialer{Control: sandbox.GuardControl(sbx.Cookie())}).DialContext}
		defer tr.CloseIdleConnections()
		var getErr error
		err := sandbox.Do(sbx, func() error {
			resp, err := (&http.Client{Transport: tr, Timeout: 2 * time.Second}).Get("http://" + addr + "/")
			if err == nil {
				resp.Body.Close()
			}
			getErr = err
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !errors.Is(getErr, sandbox.ErrWrongNamespace) {
			t.Errorf("got %v, want ErrWrongNamespace", getErr)
		}
		if n := accepted(200 * time.Millisecond); n != 0 {
			t.Errorf("home listener accepted %d connections, want 0", n)
		}
	})
}

func TestDialListen(t *testing.T) {
	t.Parallel()
	sbx := newNS(t, "dl")
	l, err := sandbox.Listen(sbx, "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	pc, err := sandbox.ListenPacket(sbx, "udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	for _, s := range []interface {
		SyscallConn() (syscall.RawConn, error)
	}{l.(*net.TCPListener), pc.(*net.UDPConn)} {
		rc, _ := s.SyscallConn()
		if got, err := sandbox.SocketCookie(rc); err != nil || got != sbx.Cookie() {
			t.Errorf("listener cookie: got %d (%v), want %d", got, err, sbx.Cookie())
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var controlled int
	d := &sandbox.Dialer{NS: sbx, Control: func(network, address string, c syscall.RawConn) error {
		controlled++
		return nil
	}}
	c, err := d.DialContext(ctx, "tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	rc, _ := c.(*net.TCPConn).SyscallConn()
	if got, _ := sandbox.SocketCookie(rc); got != sbx.Cookie() {
		t.Errorf("dialed conn cookie: got %d, want %d", got, sbx.Cookie())
	}
	c.Close()
	if controlled != 1 {
		t.Errorf("Dialer.Control ran %d times, want 1", controlled)
	}

	for _, tc := range []struct {
		name, network, addr string
		want                error
		wantText            string
	}{
		{name: "name without resolver", network: "tcp", addr: "allowed.test:80", want: sandbox.ErrNeedResolver},
		{name: "unix refused", network: "unix", addr: "/tmp/x", wantText: "unsupported network"},
		{name: "ip network refused", network: "ip4:icmp", addr: "127.0.0.1", wantText: "unsupported network"},
		{name: "no port", network: "tcp", addr: "127.0.0.1", wantText: "missing port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := d.DialContext(ctx, tc.network, tc.addr)
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) || !strings.Contains(err.Error(), tc.wantText) {
				t.Errorf("got %v, want %v %q", err, tc.want, tc.wantText)
			}
		})
	}
	if _, err := sandbox.Listen(sbx, "tcp", "localhost:0"); err == nil || !strings.Contains(err.Error(), "IP literal") {
		t.Errorf("Listen on a name: got %v, want an IP-literal error", err)
	}
}

// TestDialerResolver shows that a Dialer's lookups and dials leave from the
// namespace: the fake DNS server and origin see the sandbox's address.
func TestDialerResolver(t *testing.T) {
	t.Parallel()
	topo := testnet.New(t)
	d := &sandbox.Dialer{NS: topo.Sandbox, Timeout: 3 * time.Second}
	d.Resolver = d.NewResolver(netip.AddrPortFrom(testnet.DNSAddr4, 53))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := d.DialContext(ctx, "tcp4", "allowed.test:22")
	if err != nil {
		t.Fatal(err)
	}
	// The service records the hit before it writes its banner.
	banner, err := io.ReadAll(c)
	c.Close()
	if want := "testnet tcp/22\n"; err != nil || string(banner) != want {
		t.Fatalf("got banner %q (%v), want %q", banner, err, want)
	}
	dnsHits := topo.DNS.Seen()
	if len(dnsHits) == 0 {
		t.Fatal("DNS server saw no query")
	}
	for _, h := range dnsHits {
		if h.Remote.Addr() != testnet.SandboxAddr4 {
			t.Errorf("DNS query %q from %s, want from the sandbox %s", h.What, h.Remote, testnet.SandboxAddr4)
		}
	}
	if seen := topo.TCP[22].Seen(); len(seen) != 1 || seen[0].Remote.Addr() != testnet.SandboxAddr4 {
		t.Errorf("tcp/22 saw %+v, want one connection from %s", seen, testnet.SandboxAddr4)
	}
	if _, err := d.DialContext(ctx, "tcp", "nope.test:80"); err == nil {
		t.Error("dial of an NXDOMAIN name: got nil error")
	}
}

func TestWire(t *testing.T) {
	t.Parallel()
	sbx, gw := newNS(t, "wsbx"), newNS(t, "wgw")
	spec := sandbox.Veth{
		Prefix: "egtst", Index: 3, SandboxNS: sbx, GatewayNS: gw,
		Pool4: netip.MustParsePrefix("198.51.100.0/24"),
		Pool6: netip.MustParsePrefix("2001:db8:1::/64"),
	}
	start := time.Now()
	link, err := sandbox.Wire(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Wire took %v", time.Since(start))
	want := sandbox.Link{
		GatewayName: "egtst3", SandboxName: "eth0",
		Gateway4: netip.MustParsePrefix("198.51.100.13/30"), Sandbox4: netip.MustParsePrefix("198.51.100.14/30"),
		Gateway6: netip.MustParsePrefix("2001:db8:1::d/126"), Sandbox6: netip.MustParsePrefix("2001:db8:1::e/126"),
	}
	if link.GatewayName != want.GatewayName || link.SandboxName != want.SandboxName ||
		link.Gateway4 != want.Gateway4 || link.Sandbox4 != want.Sandbox4 ||
		link.Gateway6 != want.Gateway6 || link.Sandbox6 != want.Sandbox6 {
		t.Errorf("got link %+v, want %+v", *link, want)
	}

	hg, _ := netlink.NewHandleAt(netns.NsHandle(gw.Fd()))
	defer hg.Close()
	hs, _ := netlink.NewHandleAt(netns.NsHandle(sbx.Fd()))
	gl, err := hg.LinkByName("egtst3")
	if err != nil {
		t.Fatal(err)
	}
	sl, err := hs.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	if gl.Attrs().Index == sl.Attrs().Index {
		t.Errorf("gateway and sandbox ends share ifindex %d (linkwatch delays such a link)", gl.Attrs().Index)
	}
	for _, c := range []struct {
		ns   *sandbox.NS
		link string
	}{{gw, "egtst3"}, {sbx, "eth0"}} {
		var v []byte
		sandbox.Do(c.ns, func() (err error) {
			v, err = os.ReadFile("/proc/sys/net/ipv6/conf/" + c.link + "/accept_dad")
			return err
		})
		if strings.TrimSpace(string(v)) != "0" {
			t.Errorf("%s accept_dad: got %q, want 0", c.link, v)
		}
	}
	routes, err := hs.RouteList(nil, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	var defaults []string
	for _, r := range routes {
		if (r.Dst == nil || r.Dst.IP.IsUnspecified()) && r.Gw != nil {
			defaults = append(defaults, r.Gw.String())
		}
	}
	if got := strings.Join(defaults, ","); got != "198.51.100.13,2001:db8:1::d" {
		t.Errorf("sandbox default routes via %q, want 198.51.100.13,2001:db8:1::d", got)
	}

	// Reachability both ways, IPv6 included, without the 1 s first-connect
	// stall (one SYN retransmit) that an ifindex collision causes.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, p := range []struct{ gwAddr, sbxAddr netip.Prefix }{{link.Gateway4, link.Sandbox4}, {link.Gateway6, link.Sandbox6}} {
		l, err := sandbox.Listen(gw, "tcp", netip.AddrPortFrom(p.gwAddr.Addr(), 0).String())
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		c, err := sandbox.DialContext(ctx, sbx, "tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		elapsed := time.Since(start)
		c.Close()
		ac, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if got := netip.MustParseAddrPort(ac.RemoteAddr().String()).Addr(); got != p.sbxAddr.Addr() {
			t.Errorf("gateway saw %s, want %s", got, p.sbxAddr.Addr())
		}
		ac.Close()
		l.Close()
		t.Logf("first connect to %s took %v", p.gwAddr.Addr(), elapsed)
		if elapsed > 900*time.Millisecond {
			t.Errorf("first connect to %s took %v, want well under the 1 s SYN retransmit", p.gwAddr.Addr(), elapsed)
		}
	}

	t.Run("errors leave nothing behind", func(t *testing.T) {
		for _, tc := range []struct {
			name    string
			mod     func(*sandbox.Veth)
			wantErr string
		}{
			{"same slot again", func(v *sandbox.Veth) {}, "file exists"},
			{"index outside pool", func(v *sandbox.Veth) { v.Index = 64 }, "out of range"},
			{"name too long", func(v *sandbox.Veth) { v.Prefix = "averylongprefix" }, "invalid interface name"},
			{"same namespace", func(v *sandbox.Veth) { v.Index = 5; v.GatewayNS = sbx }, "same namespace"},
			{"no pool", func(v *sandbox.Veth) { v.Index = 5; v.Pool4, v.Pool6 = netip.Prefix{}, netip.Prefix{} }, "no address pool"},
			{"v6 pool as v4", func(v *sandbox.Veth) { v.Index = 5; v.Pool4 = v.Pool6 }, "not IPv4"},
			{"sandbox name taken", func(v *sandbox.Veth) { v.Index = 5 }, "file exists"},
			// Fails after the pair exists: the default route is taken.
			{"default route taken", func(v *sandbox.Veth) { v.Index = 5; v.SandboxName = "eth1" }, "add default route"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				before, _ := hg.LinkList()
				s := spec
				tc.mod(&s)
				if _, err := sandbox.Wire(s); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("got %v, want an error containing %q", err, tc.wantErr)
				}
				if after, _ := hg.LinkList(); len(after) != len(before) {
					t.Errorf("gateway has %d links after the failed Wire, want %d", len(after), len(before))
				}
				if _, err := hs.LinkByName("eth1"); err == nil {
					t.Error("sandbox end eth1 left behind by the failed Wire")
				}
			})
		}
	})

	// Deleting the sandbox namespace (last reference gone: handle and
	// netlink sockets) deletes the pair.
	name := sbx.Name()
	hs.Close()
	sbx.Close()
	if err := sandbox.Delete(name); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := hg.LinkByName("egtst3"); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("gateway end still present 5 s after the sandbox namespace was deleted")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// newNS's cleanup would fail on the already deleted name.
	if _, err := sandbox.Create(name); err != nil {
		t.Fatal(err)
	}
}

func TestLinkDelete(t *testing.T) {
	t.Parallel()
	sbx, gw := newNS(t, "ldsbx"), newNS(t, "ldgw")
	link, err := sandbox.Wire(sandbox.Veth{Prefix: "egtst", SandboxNS: sbx, GatewayNS: gw, Pool4: netip.MustParsePrefix("198.51.100.0/30")})
	if err != nil {
		t.Fatal(err)
	}
	if link.Gateway6.IsValid() || link.Sandbox6.IsValid() {
		t.Errorf("got IPv6 addresses %s/%s without Pool6", link.Gateway6, link.Sandbox6)
	}
	if err := link.Delete(); err != nil {
		t.Fatal(err)
	}
	hs, _ := netlink.NewHandleAt(netns.NsHandle(sbx.Fd()))
	defer hs.Close()
	if _, err := hs.LinkByName("eth0"); err == nil {
		t.Error("sandbox end still present after Link.Delete")
	}
	if err := link.Delete(); err == nil {
		t.Error("second Link.Delete: got nil error")
	}
}

// nsInode is what readlink /proc/self/ns/net shows for the namespace at path.
func nsInode(t *testing.T, path string) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("net:[%d]", st.Ino)
}

// resolvConfMounts lists the mounts on /etc/resolv.conf seen by this
// process (other tests' /run/netns mounts come and go meanwhile).
func resolvConfMounts(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var m []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == "/etc/resolv.conf" {
			m = append(m, line)
		}
	}
	return strings.Join(m, "\n")
}

func TestNSExec(t *testing.T) {
	t.Parallel()
	sbx := newNS(t, "exec")
	rc, err := sandbox.WriteResolvConf(t.TempDir(), netip.MustParseAddr("198.51.100.1"))
	if err != nil {
		t.Fatal(err)
	}
	wantRC, _ := os.ReadFile(rc)
	hostRC, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		t.Fatal(err)
	}
	mountsBefore := resolvConfMounts(t)
	script := "readlink /proc/self/ns/net; cat /etc/resolv.conf; echo x >> /etc/resolv.conf 2>/dev/null && echo WRITABLE; id -u; grep NoNewPrivs /proc/self/status"
	for _, tc := range []struct {
		name       string
		cmd        *exec.Cmd
		wantNS     string
		wantRC     string
		wantUID    string
		wantNNP    string
		wantFail   string
		wantStderr string
	}{
		{name: "sandbox namespace and resolv.conf",
			cmd:    sandbox.NSExecCommand(os.Args[0], sbx.Path(), rc, []string{"sh", "-c", script}),
			wantNS: nsInode(t, sbx.Path()), wantRC: string(wantRC), wantUID: "0", wantNNP: "NoNewPrivs:\t0"},
		{name: "no resolv.conf keeps the host's",
			cmd:    sandbox.NSExecCommand(os.Args[0], sbx.Path(), "", []string{"sh", "-c", "readlink /proc/self/ns/net; cat /etc/resolv.conf"}),
			wantNS: nsInode(t, sbx.Path()), wantRC: string(hostRC)},
		{name: "unprivileged",
			cmd:    sandbox.NSExecCommandAs(os.Args[0], sbx.Path(), rc, &syscall.Credential{Uid: 65534, Gid: 65534}, []string{"sh", "-c", script}),
			wantNS: nsInode(t, sbx.Path()), wantRC: string(wantRC), wantUID: "65534", wantNNP: "NoNewPrivs:\t1"},
		{name: "refuses the caller's namespace",
			cmd:      sandbox.NSExecCommand(os.Args[0], current(t).Path(), rc, []string{"true"}),
			wantFail: "the caller's network namespace: refusing"},
		{name: "missing command",
			cmd:      sandbox.NSExecCommand(os.Args[0], sbx.Path(), rc, []string{"egressd-no-such-command"}),
			wantFail: "executable file not found"},
		{name: "bad usage",
			cmd:      exec.Command(os.Args[0], sandbox.NSExecArg, sbx.Path(), rc, "true"),
			wantFail: "usage"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr strings.Builder
			tc.cmd.Stderr = &stderr
			out, err := tc.cmd.Output()
			if tc.wantFail != "" {
				if err == nil || !strings.Contains(stderr.String(), tc.wantFail) {
					t.Errorf("got err %v, stderr %q; want failure with %q", err, stderr.String(), tc.wantFail)
				}
				return
			}
			if err != nil {
				t.Fatalf("%v: %s", err, stderr.String())
			}
			ns, rest, _ := strings.Cut(string(out), "\n")
			if ns != tc.wantNS {
				t.Errorf("child namespace: got %s, want %s", ns, tc.wantNS)
			}
			if !strings.HasPrefix(rest, tc.wantRC) {
				t.Errorf("child /etc/resolv.conf: got %q, want %q", rest, tc.wantRC)
			}
			rest = rest[min(len(tc.wantRC), len(rest)):]
			if strings.Contains(rest, "WRITABLE") {
				t.Error("child could write /etc/resolv.conf")
			}
			if tc.wantUID != "" && !strings.HasPrefix(strings.TrimPrefix(rest, ""), tc.wantUID+"\n") {
				t.Errorf("child uid and status: got %q, want uid %s", rest, tc.wantUID)
			}
			if !strings.Contains(rest, tc.wantNNP) {
				t.Errorf("child status: got %q, want %q", rest, tc.wantNNP)
			}
		})
	}
	if got, _ := os.ReadFile("/etc/resolv.conf"); string(got) != string(hostRC) {
		t.Errorf("host /etc/resolv.conf changed to %q", got)
	}
	if got := resolvConfMounts(t); got != mountsBefore {
		t.Errorf("mounts on /etc/resolv.conf in the test's mount namespace changed from %q to %q: the child's mount leaked back", mountsBefore, got)
	}
}

var sinkErr error

func BenchmarkDo(b *testing.B) {
	sbx := newNS(b, "bdo")
	for b.Loop() {
		sinkErr = sandbox.Do(sbx, func() error { return nil })
	}
}

// BenchmarkGuard measures the guard alone: one getsockopt and a compare.
func BenchmarkGuard(b *testing.B) {
	testnet.RequireRoot(b)
	home := current(b)
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer pc.Close()
	rc, _ := pc.(*net.UDPConn).SyscallConn()
	guard := sandbox.GuardControl(home.Cookie())
	for b.Loop() {
		sinkErr = guard("udp", "", rc)
	}
}

// BenchmarkDialLoopback compares a loopback TCP dial in the test's own
// namespace without and with the guard, and through Dialer (locked thread
// and setns round trip) in a namespace of its own.
func BenchmarkDialLoopback(b *testing.B) {
	testnet.RequireRoot(b)
	home := current(b)
	sbx := newNS(b, "bdial")
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		ns   *sandbox.NS
		dial func(addr string) (net.Conn, error)
	}{
		{"plain", nil, func(a string) (net.Conn, error) { return (&net.Dialer{}).DialContext(ctx, "tcp", a) }},
		{"guarded", nil, func(a string) (net.Conn, error) {
			return (&net.Dialer{Control: sandbox.GuardControl(home.Cookie())}).DialContext(ctx, "tcp", a)
		}},
		{"sandbox.Dialer", sbx, func(a string) (net.Conn, error) { return sandbox.DialContext(ctx, sbx, "tcp", a) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var l net.Listener
			var err error
			if bc.ns == nil {
				l, err = net.Listen("tcp", "127.0.0.1:0")
			} else {
				l, err = sandbox.Listen(bc.ns, "tcp", "127.0.0.1:0")
			}
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					go func() { io.Copy(io.Discard, c); c.Close() }()
				}
			}()
			for b.Loop() {
				c, err := bc.dial(l.Addr().String())
				if err != nil {
					b.Fatal(err)
				}
				c.Close()
			}
		})
	}
}

func BenchmarkCreateDelete(b *testing.B) {
	testnet.RequireRoot(b)
	for b.Loop() {
		name := uniqueName("bcd")
		ns, err := sandbox.Create(name)
		if err != nil {
			b.Fatal(err)
		}
		ns.Close()
		if err := sandbox.Delete(name); err != nil {
			b.Fatal(err)
		}
	}
}
