package testnet

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/sandbox"
	"github.com/miekg/dns"
)

// TestBaseline is the negative control every wall test leans on: with no
// firewall, the sandbox reaches every fake internet service directly.
func TestBaseline(t *testing.T) {
	topo := New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := topo.HTTPClientInSandbox(nil, topo.CA.Pool)

	get := func(t *testing.T, url string) string {
		t.Helper()
		resp, err := c.Get(url)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("GET %s: read body: %v", url, err)
		}
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: got status %d, want 200", url, resp.StatusCode)
		}
		return string(b)
	}

	t.Run("http", func(t *testing.T) {
		for _, tc := range []struct{ name, url, wantBody string }{
			{"v4 literal", "http://203.0.113.100/a", "origin ok: GET 203.0.113.100 /a\n"},
			{"v6 literal", "http://[2001:db8:2::100]/b", "origin ok: GET [2001:db8:2::100] /b\n"},
			{"name", "http://allowed.test/c?x=1", "origin ok: GET allowed.test /c?x=1\n"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				before := topo.Origin.Hits()
				if got := get(t, tc.url); got != tc.wantBody {
					t.Errorf("got body %q, want %q", got, tc.wantBody)
				}
				if got := topo.Origin.Hits() - before; got != 1 {
					t.Errorf("origin hits: got %d, want 1", got)
				}
				seen := topo.Origin.Seen()
				if r := seen[len(seen)-1].Remote.Addr(); r != SandboxAddr4 && r != SandboxAddr6 {
					t.Errorf("origin saw remote %s, want the sandbox's address", r)
				}
			})
		}
	})
	t.Run("tls", func(t *testing.T) {
		if got, want := get(t, "https://other.test/x"), "origin ok: GET other.test /x\n"; got != want {
			t.Errorf("got body %q, want %q", got, want)
		}
		seen := topo.TLS.Seen()
		if len(seen) != 1 || !strings.HasSuffix(seen[0].What, "sni=other.test") {
			t.Errorf("tls origin saw %+v, want one hit with sni=other.test", seen)
		}
	})
	t.Run("metadata", func(t *testing.T) {
		if got, want := get(t, "http://169.254.169.254/latest/meta-data/"), topo.MetadataSecret+"\n"; got != want {
			t.Errorf("got body %q, want the secret %q", got, want)
		}
		if got := topo.Metadata.Hits(); got != 1 {
			t.Errorf("metadata hits: got %d, want 1", got)
		}
	})
	t.Run("dns", func(t *testing.T) {
		for _, tc := range []struct {
			name, server, qname string
			qtype               uint16
			wantRcode           int
			want                []string
		}{
			{"A udp", "203.0.113.53:53", "allowed.test.", dns.TypeA, dns.RcodeSuccess, []string{"203.0.113.100"}},
			{"AAAA v6 server", "[2001:db8:2::53]:53", "Allowed.Test.", dns.TypeAAAA, dns.RcodeSuccess, []string{"2001:db8:2::100"}},
			{"metadata answer", "203.0.113.53:53", "meta.test.", dns.TypeA, dns.RcodeSuccess, []string{"169.254.169.254"}},
			{"unknown", "203.0.113.53:53", "nope.test.", dns.TypeA, dns.RcodeNameError, nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				for _, network := range []string{"udp", "tcp"} {
					conn, err := topo.DialFromSandbox(ctx, network, tc.server)
					if err != nil {
						t.Fatalf("dial %s %s: %v", network, tc.server, err)
					}
					m := new(dns.Msg)
					m.SetQuestion(tc.qname, tc.qtype)
					r, _, err := (&dns.Client{Net: network}).ExchangeWithConnContext(ctx, m, &dns.Conn{Conn: conn})
					conn.Close()
					if err != nil {
						t.Fatalf("%s query: %v", network, err)
					}
					var got []string
					for _, rr := range r.Answer {
						switch rr := rr.(type) {
						case *dns.A:
							got = append(got, rr.A.String())
						case *dns.AAAA:
							got = append(got, rr.AAAA.String())
						}
					}
					if r.Rcode != tc.wantRcode || strings.Join(got, ",") != strings.Join(tc.want, ",") {
						t.Errorf("%s: got rcode %d answers %v, want rcode %d answers %v", network, r.Rcode, got, tc.wantRcode, tc.want)
					}
				}
			})
		}
	})
	t.Run("tcp", func(t *testing.T) {
		for _, p := range TCPPorts {
			for _, a := range []netip.Addr{OriginAddr4, OriginAddr6} {
				addr := netip.AddrPortFrom(a, p).String()
				conn, err := topo.DialFromSandbox(ctx, "tcp", addr)
				if err != nil {
					t.Errorf("dial %s: %v", addr, err)
					continue
				}
				line, err := bufio.NewReader(conn).ReadString('\n')
				conn.Close()
				if want := "testnet tcp/" + strconv.Itoa(int(p)) + "\n"; err != nil || line != want {
					t.Errorf("%s: got banner %q (err %v), want %q", addr, line, err, want)
				}
			}
			if got := topo.TCP[p].Hits(); got != 2 {
				t.Errorf("tcp/%d hits: got %d, want 2", p, got)
			}
		}
	})
	t.Run("udp echo", func(t *testing.T) {
		for _, p := range UDPPorts {
			for _, a := range []netip.Addr{OriginAddr4, OriginAddr6} {
				addr := netip.AddrPortFrom(a, p).String()
				conn, err := topo.DialFromSandbox(ctx, "udp", addr)
				if err != nil {
					t.Errorf("dial %s: %v", addr, err)
					continue
				}
				conn.SetDeadline(time.Now().Add(3 * time.Second))
				msg := "ping " + addr
				buf := make([]byte, 100)
				_, err = conn.Write([]byte(msg))
				n := 0
				if err == nil {
					n, err = conn.Read(buf)
				}
				conn.Close()
				if err != nil || string(buf[:n]) != msg {
					t.Errorf("%s: got echo %q (err %v), want %q", addr, buf[:n], err, msg)
				}
			}
			if got := topo.UDP[p].Hits(); got != 2 {
				t.Errorf("udp/%d hits: got %d, want 2", p, got)
			}
		}
	})
}

// TestProxyPath checks the client helper sends everything to the proxy
// when one is given: the fake proxy in gw sees the absolute-form request,
// and neither the DNS server nor the origin sees anything.
func TestProxyPath(t *testing.T) {
	topo := New(t)
	l, err := topo.ListenInGateway("tcp", netip.AddrPortFrom(GatewayAddr4, 3128).String())
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu  sync.Mutex
		got []string
	)
	go http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.RequestURI+" from "+r.RemoteAddr)
		mu.Unlock()
		w.WriteHeader(http.StatusTeapot)
	}))
	c := topo.HTTPClientInSandbox(&url.URL{Scheme: "http", Host: l.Addr().String()}, topo.CA.Pool)
	resp, err := c.Get("http://allowed.test/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTeapot {
		t.Errorf("got status %d, want 418 from the fake proxy", resp.StatusCode)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || !strings.HasPrefix(got[0], "GET http://allowed.test/x from 198.51.100.2:") {
		t.Errorf("proxy saw %q, want one GET http://allowed.test/x from the sandbox", got)
	}
	if n := topo.DNS.Hits() + topo.Origin.Hits(); n != 0 {
		t.Errorf("DNS and origin saw %d hits, want 0: the client must not resolve or connect itself", n)
	}
}

// TestHelpersAreGuarded checks every helper's sockets are in the namespace
// it names.
func TestHelpersAreGuarded(t *testing.T) {
	topo := New(t, WithoutServices(), WithIfPrefix("egtest"))
	if got, want := topo.SandboxLink.GatewayName, "egtest0"; got != want {
		t.Errorf("got gateway interface %q, want %q", got, want)
	}
	if topo.Origin != nil || topo.DNS != nil {
		t.Error("WithoutServices started services")
	}
	cookieOf := func(c interface {
		SyscallConn() (syscall.RawConn, error)
	}) uint64 {
		rc, err := c.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		v, err := sandbox.SocketCookie(rc)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	gl, err := topo.ListenInGateway("tcp", "[::]:0")
	if err != nil {
		t.Fatal(err)
	}
	gp, err := topo.ListenPacketInGateway("udp", "198.51.100.1:0")
	if err != nil {
		t.Fatal(err)
	}
	il, err := topo.ListenInInternet("tcp", "203.0.113.100:0")
	if err != nil {
		t.Fatal(err)
	}
	ip, err := topo.ListenPacketInInternet("udp", "203.0.113.100:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sc, err := topo.DialFromSandbox(ctx, "tcp", netip.AddrPortFrom(GatewayAddr4, uint16(gl.Addr().(*net.TCPAddr).Port)).String())
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	gc, err := topo.GatewayDialer().DialContext(ctx, "tcp", il.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	for _, tc := range []struct {
		name string
		got  uint64
		want *sandbox.NS
	}{
		{"ListenInGateway", cookieOf(gl.(*net.TCPListener)), topo.Gateway},
		{"ListenPacketInGateway", cookieOf(gp.(*net.UDPConn)), topo.Gateway},
		{"ListenInInternet", cookieOf(il.(*net.TCPListener)), topo.Internet},
		{"ListenPacketInInternet", cookieOf(ip.(*net.UDPConn)), topo.Internet},
		{"DialFromSandbox", cookieOf(sc.(*net.TCPConn)), topo.Sandbox},
		{"GatewayDialer", cookieOf(gc.(*net.TCPConn)), topo.Gateway},
	} {
		if tc.got != tc.want.Cookie() {
			t.Errorf("%s: socket cookie %d, want %s", tc.name, tc.got, tc.want)
		}
	}
	for _, do := range []struct {
		name string
		run  func(func() error) error
		want *sandbox.NS
	}{{"DoInSandbox", topo.DoInSandbox, topo.Sandbox}, {"DoInGateway", topo.DoInGateway, topo.Gateway}, {"DoInInternet", topo.DoInInternet, topo.Internet}} {
		var got uint64
		if err := do.run(func() error {
			cur, err := sandbox.Current()
			if err != nil {
				return err
			}
			got = cur.Cookie()
			return cur.Close()
		}); err != nil {
			t.Fatal(err)
		}
		if got != do.want.Cookie() {
			t.Errorf("%s: ran in cookie %d, want %s", do.name, got, do.want)
		}
	}
}

// TestIsolation checks New leaves the test's own namespace alone (no new
// interface there) and that teardown deletes every namespace, also when
// topologies are built in parallel.
func TestIsolation(t *testing.T) {
	RequireRoot(t)
	before := interfaceNames(t)
	var names []string
	var mu sync.Mutex
	t.Run("group", func(t *testing.T) {
		for i := range 4 {
			t.Run(strconv.Itoa(i), func(t *testing.T) {
				t.Parallel()
				topo := New(t)
				mu.Lock()
				names = append(names, topo.Name)
				mu.Unlock()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				c, err := topo.DialFromSandbox(ctx, "tcp", "[2001:db8:2::100]:8080")
				if err != nil {
					t.Fatal(err)
				}
				c.Close()
				if got := interfaceNames(t); got != before {
					t.Errorf("interfaces of the test's namespace changed: got %s, want %s", got, before)
				}
			})
		}
	})
	if len(names) != 4 {
		t.Fatalf("got %d topologies, want 4", len(names))
	}
	ents, err := os.ReadDir(sandbox.NetnsDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		for _, n := range names {
			if strings.HasPrefix(e.Name(), n) {
				t.Errorf("namespace %s survived teardown", e.Name())
			}
		}
	}
}

func interfaceNames(t *testing.T) string {
	t.Helper()
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	var s []string
	for _, i := range ifs {
		s = append(s, i.Name)
	}
	return strings.Join(s, ",")
}

// fakeTB records what RequireRoot asks of it.
type fakeTB struct {
	testing.TB
	skipped, failed string
}

func (f *fakeTB) Helper()           {}
func (f *fakeTB) Skip(args ...any)  { f.skipped = fmt.Sprint(args...) }
func (f *fakeTB) Fatal(args ...any) { f.failed = fmt.Sprint(args...) }

func TestRequireRoot(t *testing.T) {
	for _, tc := range []struct {
		name        string
		euid        int
		env         string
		wantSkip    bool
		wantFailure bool
	}{
		{name: "root runs", euid: 0},
		{name: "root runs under CI", euid: 0, env: "1"},
		{name: "user skips", euid: 1000, wantSkip: true},
		{name: "user fails under CI", euid: 1000, env: "1", wantFailure: true},
		{name: "other values skip", euid: 1000, env: "true", wantSkip: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("EGRESSD_REQUIRE_NETNS", tc.env)
			saved := geteuid
			geteuid = func() int { return tc.euid }
			defer func() { geteuid = saved }()
			f := &fakeTB{TB: t}
			RequireRoot(f)
			if (f.skipped != "") != tc.wantSkip || (f.failed != "") != tc.wantFailure {
				t.Errorf("got skip %q, fatal %q; want skip=%v fatal=%v", f.skipped, f.failed, tc.wantSkip, tc.wantFailure)
			}
			if msg := f.skipped + f.failed; msg != "" && !strings.Contains(msg, "run as root (sudo go test ./...)") {
				t.Errorf("message %q does not say how to run the test", msg)
			}
		})
	}
}

// TestRootCookieSkips: an unidentifiable root namespace skips the test with
// the reason, also under EGRESSD_REQUIRE_NETNS=1, and never fails it.
func TestRootCookieSkips(t *testing.T) {
	t.Setenv("EGRESSD_REQUIRE_NETNS", "1")
	saved := rootCookie
	defer func() { rootCookie = saved }()
	rootCookie = func() (uint64, error) { return 0, errors.New("open /proc/1/ns/net: permission denied") }
	f := &fakeTB{TB: t}
	RootCookie(f)
	if f.failed != "" || !strings.Contains(f.skipped, "/proc/1/ns/net: permission denied") || !strings.Contains(f.skipped, "root network namespace") {
		t.Errorf("got skip %q, fatal %q; want a skip naming the cause", f.skipped, f.failed)
	}
	rootCookie = func() (uint64, error) { return 42, nil }
	f = &fakeTB{TB: t}
	if got := RootCookie(f); got != 42 || f.skipped != "" || f.failed != "" {
		t.Errorf("readable: got %d, skip %q, fatal %q", got, f.skipped, f.failed)
	}
}

// BenchmarkTopology measures building and tearing down a topology, with
// and without the fake services.
func BenchmarkTopology(b *testing.B) {
	RequireRoot(b)
	for _, bc := range []struct {
		name string
		opts []Option
	}{{"bare", []Option{WithoutServices()}}, {"services", nil}} {
		b.Run(bc.name, func(b *testing.B) {
			var setup, teardown time.Duration
			for b.Loop() {
				start := time.Now()
				topo, err := newTopo(b, bc.opts...)
				mid := time.Now()
				topo.close()
				teardown += time.Since(mid)
				setup += mid.Sub(start)
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(setup.Microseconds())/float64(b.N)/1000, "setup-ms/op")
			b.ReportMetric(float64(teardown.Microseconds())/float64(b.N)/1000, "teardown-ms/op")
		})
	}
}
