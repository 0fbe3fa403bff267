// Package testnet builds the three-namespace topology that egressd's
// network tests run in, and fake internet services inside it:
//
//	sbx (eth0 198.51.100.2/24, 2001:db8:1::2/64; default via gw)
//	 ⇅ veth "egsbx0"
//	gw  (198.51.100.1/24, 2001:db8:1::1/64 toward sbx; forwarding on;
//	     203.0.113.1/28, 2001:db8:2::1/64 on "up0" toward inet; default via inet)
//	 ⇅ veth "up0"
//	inet (eth0 203.0.113.2/28, 2001:db8:2::2/64; default via gw; on lo the
//	     "internet" hosts: origin 203.0.113.100 and 2001:db8:2::100, DNS
//	     203.0.113.53 and 2001:db8:2::53, metadata 169.254.169.254)
//
// Nothing is linked to the machine's own namespace, every socket the helpers
// open is checked by the sandbox package's cookie guard, and every namespace
// is deleted by t.Cleanup. With no firewall in gw the sandbox reaches every
// service directly: that is the baseline, the negative control against
// which egressd's walls are tested. Each Topo has its own namespace names,
// so tests may run in parallel.
//
//	func TestX(t *testing.T) {
//		topo := testnet.New(t) // skips unless root
//		l, _ := topo.ListenInGateway("tcp", "198.51.100.1:3128")
//		... run the component under test on l, dialing out with topo.GatewayDialer() ...
//		c := topo.HTTPClientInSandbox(proxyURL, topo.CA.Pool)
//		... assert on responses and on topo.Metadata.Hits() == 0 ...
//	}
//
// Production packages must not import testnet.
package testnet

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egressd/egressd/sandbox"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Addresses of the topology. The sandbox's gateway (where egressd's proxy
// and DNS listen in tests) is GatewayAddr4/GatewayAddr6.
var (
	SandboxAddr4  = netip.MustParseAddr("198.51.100.2")
	SandboxAddr6  = netip.MustParseAddr("2001:db8:1::2")
	GatewayAddr4  = netip.MustParseAddr("198.51.100.1")
	GatewayAddr6  = netip.MustParseAddr("2001:db8:1::1")
	UplinkAddr4   = netip.MustParseAddr("203.0.113.1") // gw's side toward inet
	UplinkAddr6   = netip.MustParseAddr("2001:db8:2::1")
	InternetAddr4 = netip.MustParseAddr("203.0.113.2") // inet's side toward gw
	InternetAddr6 = netip.MustParseAddr("2001:db8:2::2")
	OriginAddr4   = netip.MustParseAddr("203.0.113.100")
	OriginAddr6   = netip.MustParseAddr("2001:db8:2::100")
	DNSAddr4      = netip.MustParseAddr("203.0.113.53")
	DNSAddr6      = netip.MustParseAddr("2001:db8:2::53")
	MetadataAddr4 = netip.MustParseAddr("169.254.169.254")

	SandboxPrefix4 = netip.MustParsePrefix("198.51.100.0/24")
	SandboxPrefix6 = netip.MustParsePrefix("2001:db8:1::/64")
	UplinkPrefix4  = netip.MustParsePrefix("203.0.113.0/28")
	UplinkPrefix6  = netip.MustParsePrefix("2001:db8:2::/64")
)

// Ports of the fake services besides HTTP (80), TLS (443) and DNS (53 on
// the DNS addresses): plain TCP listeners and UDP echo servers on the
// origin addresses. Read-only. ICMP echo is answered by inet's kernel.
var (
	TCPPorts = []uint16{22, 25, 53, 8080, 4444}
	UDPPorts = []uint16{53, 123}
)

// DefaultIfPrefix starts the name of gw's interface toward the sandbox
// ("egsbx0"), the match egressd's nft rules use for sandbox traffic.
const DefaultIfPrefix = "egsbx"

// UplinkIf is gw's interface toward inet.
const UplinkIf = uplinkIfPrefix + "0"

const uplinkIfPrefix = "up"

// namePrefix starts every namespace testnet creates; names carry the PID
// (sandbox.PIDName), so leftovers of crashed test binaries are found
// without touching those of test binaries still running.
const namePrefix = "egtn-"

// Topo is one sandbox ⇄ gateway ⇄ internet topology. Its fields are set by
// New and must not be changed.
type Topo struct {
	// Name starts the names of the three namespaces (NetnsDir/<Name>sbx ...).
	Name string
	// Sandbox, Gateway and Internet are the namespaces. Gateway is where
	// the component under test runs (nftables.WithNetNSFd(Gateway.Fd()),
	// ListenInGateway).
	Sandbox, Gateway, Internet *sandbox.NS
	// SandboxLink is gw's veth toward the sandbox; its GatewayName is
	// IfPrefix+"0". Uplink is gw's veth toward inet (UplinkIf).
	SandboxLink, Uplink *sandbox.Link
	// IfPrefix is the prefix of SandboxLink.GatewayName.
	IfPrefix string

	// Fake internet services, running in Internet; nil with
	// WithoutServices. Each records the hits it saw.
	Origin   *Service            // HTTP on OriginAddr4:80 and [OriginAddr6]:80
	TLS      *Service            // HTTPS on OriginAddr4:443 and [OriginAddr6]:443, certificate by CA
	Metadata *Service            // HTTP on MetadataAddr4:80; serves MetadataSecret
	DNS      *DNSServer          // DNSAddr4:53 and [DNSAddr6]:53, UDP and TCP
	TCP      map[uint16]*Service // TCPPorts on the origin addresses: a banner, then close
	UDP      map[uint16]*Service // UDPPorts on the origin addresses: echo
	// CA issued the TLS origin's certificate (names allowed.test,
	// other.test, origin.test, *.test and the origin addresses); give
	// CA.Pool or CA.CertPEM to whatever must trust the origin.
	CA *CA
	// MetadataSecret is the body the metadata server returns: a test
	// asserts it never reaches the sandbox.
	MetadataSecret string

	tb      testing.TB
	closers []func()
	closeMu sync.Mutex
}

type config struct {
	ifPrefix      string
	services      bool
	records       map[string][]netip.Addr
	originHandler http.Handler
}

// Option changes how New builds a Topo.
type Option func(*config)

// WithIfPrefix names gw's interface toward the sandbox prefix+"0" instead
// of DefaultIfPrefix+"0". prefix must be at most 14 bytes.
func WithIfPrefix(prefix string) Option { return func(c *config) { c.ifPrefix = prefix } }

// WithoutServices builds only the namespaces, links and routes.
func WithoutServices() Option { return func(c *config) { c.services = false } }

// WithRecords adds DNS records (name → addresses) to DefaultRecords, or
// replaces a default name's addresses. Names are case-insensitive, with or
// without the final dot.
func WithRecords(records map[string][]netip.Addr) Option {
	return func(c *config) {
		for n, a := range records {
			c.records[n] = a
		}
	}
}

// WithOriginHandler serves h on the HTTP and TLS origins instead of the
// default handler; hits are still recorded.
func WithOriginHandler(h http.Handler) Option { return func(c *config) { c.originHandler = h } }

// RequireRoot skips the test unless it runs as root, or fails it when
// EGRESSD_REQUIRE_NETNS=1 (CI), so namespace tests cannot silently vanish.
func RequireRoot(t testing.TB) {
	t.Helper()
	if geteuid() == 0 {
		rootTests.ran.Add(1)
		return
	}
	rootTests.skipped.Add(1)
	const msg = "root-only namespace test: run as root (sudo go test ./...)"
	if os.Getenv("EGRESSD_REQUIRE_NETNS") == "1" {
		t.Fatal(msg + "; EGRESSD_REQUIRE_NETNS=1 forbids skipping")
		return
	}
	t.Skip(msg)
}

// geteuid is replaced in tests of RequireRoot.
var geteuid = os.Geteuid

// RootCookie returns the cookie of the machine's root network namespace
// (see [sandbox.RootCookie]), which tests compare their namespaces against.
// Where it cannot be identified — not in the init namespace, and PID 1's
// namespace hidden, as in many containers — the test is skipped with the
// reason, even under EGRESSD_REQUIRE_NETNS=1: that is the environment, not
// a missing privilege, and a test that cannot tell the root namespace apart
// must not run.
func RootCookie(t testing.TB) uint64 {
	t.Helper()
	c, err := rootCookie()
	if err != nil {
		t.Skip("cannot identify the machine's root network namespace, so this test cannot prove it stays out of it: " +
			err.Error() + " (this process is not in the init namespace and /proc/1/ns/net is unreadable, as in many containers; run the tests in the init namespace or where PID 1's namespace is readable)")
		return 0
	}
	return c
}

// rootCookie is replaced in tests of RootCookie.
var rootCookie = sandbox.RootCookie

var (
	seq          atomic.Uint64
	cleanupStale sync.Once
)

// New builds a topology for t and registers its teardown with t.Cleanup.
// It calls RequireRoot, and fails t on any setup error.
func New(t testing.TB, opts ...Option) *Topo {
	t.Helper()
	RequireRoot(t)
	topo, err := newTopo(t, opts...)
	// Registered even on error: it undoes whatever was built.
	t.Cleanup(topo.close)
	if err != nil {
		t.Fatalf("testnet: %v", err)
	}
	return topo
}

// newTopo builds a topology; the caller must call close, also on error.
func newTopo(t testing.TB, opts ...Option) (*Topo, error) {
	cfg := config{ifPrefix: DefaultIfPrefix, services: true, records: map[string][]netip.Addr{}}
	for n, a := range DefaultRecords {
		cfg.records[n] = a
	}
	for _, o := range opts {
		o(&cfg)
	}
	cleanupStale.Do(func() {
		if gone, err := sandbox.CleanupStale(namePrefix); err != nil {
			t.Logf("testnet: cleaning up stale namespaces: %v", err)
		} else if len(gone) > 0 {
			t.Logf("testnet: deleted stale namespaces %v", gone)
		}
	})
	topo := &Topo{
		Name:     sandbox.PIDName(namePrefix, strconv.FormatUint(seq.Add(1), 10)+"-"),
		IfPrefix: cfg.ifPrefix,
		tb:       t,
	}
	if err := topo.build(); err != nil {
		return topo, fmt.Errorf("build topology %s: %w", topo.Name, err)
	}
	if cfg.services {
		if err := topo.startServices(&cfg); err != nil {
			return topo, fmt.Errorf("start services in %s: %w", topo.Internet, err)
		}
	}
	return topo, nil
}

func (t *Topo) build() error {
	var err error
	for _, ns := range []struct {
		p    **sandbox.NS
		name string
	}{{&t.Sandbox, "sbx"}, {&t.Gateway, "gw"}, {&t.Internet, "inet"}} {
		name := t.Name + ns.name
		if *ns.p, err = sandbox.Create(name); err != nil {
			return err
		}
		t.onClose(func() {
			(*ns.p).Close()
			if err := sandbox.Delete(name); err != nil {
				t.tb.Errorf("testnet: %v", err)
			}
		})
	}
	t.SandboxLink, err = sandbox.Wire(sandbox.Veth{
		Prefix: t.IfPrefix, SandboxNS: t.Sandbox, GatewayNS: t.Gateway,
		Pool4: SandboxPrefix4, Slot4Bits: SandboxPrefix4.Bits(),
		Pool6: SandboxPrefix6, Slot6Bits: SandboxPrefix6.Bits(),
	})
	if err != nil {
		return err
	}
	// inet is wired as gw's "sandbox" too: its default route via gw is the
	// way back to 198.51.100.0/24.
	t.Uplink, err = sandbox.Wire(sandbox.Veth{
		Prefix: uplinkIfPrefix, SandboxNS: t.Internet, GatewayNS: t.Gateway,
		Pool4: UplinkPrefix4, Slot4Bits: UplinkPrefix4.Bits(),
		Pool6: UplinkPrefix6, Slot6Bits: UplinkPrefix6.Bits(),
	})
	if err != nil {
		return err
	}
	for _, kv := range [][2]string{{"net/ipv4/ip_forward", "1"}, {"net/ipv6/conf/all/forwarding", "1"}} {
		if err := sandbox.SetSysctl(t.Gateway, kv[0], kv[1]); err != nil {
			return err
		}
	}

	hg, err := netlink.NewHandleAt(netns.NsHandle(t.Gateway.Fd()))
	if err != nil {
		return fmt.Errorf("netlink in %s: %w", t.Gateway, err)
	}
	defer hg.Close()
	routes := []*netlink.Route{
		{LinkIndex: t.Uplink.GatewayIndex, Gw: InternetAddr4.AsSlice()},
		{LinkIndex: t.Uplink.GatewayIndex, Gw: InternetAddr6.AsSlice()},
	}
	for _, a := range []netip.Addr{OriginAddr4, DNSAddr4, MetadataAddr4, OriginAddr6, DNSAddr6} {
		if err := sandbox.AddAddress(t.Internet, "lo", netip.PrefixFrom(a, a.BitLen())); err != nil {
			return err
		}
		// inet's IPv6 hosts sit inside the uplink's /64, where gw would
		// ask for them by neighbour discovery, which lo does not answer.
		if a.Is6() {
			routes = append(routes, &netlink.Route{LinkIndex: t.Uplink.GatewayIndex,
				Dst: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(128, 128)}, Gw: InternetAddr6.AsSlice()})
		}
	}
	for _, r := range routes {
		if err := hg.RouteAdd(r); err != nil {
			return fmt.Errorf("add route %s in %s: %w", r, t.Gateway, err)
		}
	}
	return nil
}

// onClose registers f to run at teardown, before everything registered
// earlier.
func (t *Topo) onClose(f func()) {
	t.closeMu.Lock()
	defer t.closeMu.Unlock()
	t.closers = append(t.closers, f)
}

func (t *Topo) close() {
	t.closeMu.Lock()
	cs := t.closers
	t.closers = nil
	t.closeMu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
}

// SandboxDialer dials from the sandbox, resolving names with the fake
// internet's DNS server directly (DNSAddr4:53): the baseline path a
// sandboxed program would take with no egressd in between. Set Resolver
// (for instance d.NewResolver of egressd's DNS address) to change that.
func (t *Topo) SandboxDialer() *sandbox.Dialer {
	d := &sandbox.Dialer{NS: t.Sandbox, Timeout: 5 * time.Second}
	d.Resolver = d.NewResolver(netip.AddrPortFrom(DNSAddr4, 53))
	return d
}

// GatewayDialer dials from the gateway namespace, resolving names with the
// fake internet's DNS server: what a proxy under test dials upstream with.
func (t *Topo) GatewayDialer() *sandbox.Dialer {
	d := &sandbox.Dialer{NS: t.Gateway, Timeout: 5 * time.Second}
	d.Resolver = d.NewResolver(netip.AddrPortFrom(DNSAddr4, 53))
	return d
}

// DialFromSandbox connects to addr from inside the sandbox (see
// SandboxDialer).
func (t *Topo) DialFromSandbox(ctx context.Context, network, addr string) (net.Conn, error) {
	return t.SandboxDialer().DialContext(ctx, network, addr)
}

// HTTPClientInSandbox returns an HTTP client whose connections are opened
// inside the sandbox: through proxyURL if it is not nil (an IP literal,
// such as http://198.51.100.1:3128), else directly. TLS trusts roots
// (nil: the system pool, which trusts nothing in this topology). Proxy
// settings from the environment are ignored. Idle connections are closed
// at teardown.
func (t *Topo) HTTPClientInSandbox(proxyURL *url.URL, roots *x509.CertPool) *http.Client {
	tr := &http.Transport{
		DialContext:         t.SandboxDialer().DialContext,
		TLSClientConfig:     newTLSClientConfig(roots),
		TLSHandshakeTimeout: 5 * time.Second,
		MaxIdleConnsPerHost: 4,
	}
	if proxyURL != nil {
		tr.Proxy = http.ProxyURL(proxyURL)
	}
	t.onClose(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// ListenInGateway opens a stream listener in the gateway namespace
// (addr's host an IP literal or empty), closed at teardown.
func (t *Topo) ListenInGateway(network, addr string) (net.Listener, error) {
	return t.listen(t.Gateway, network, addr)
}

// ListenPacketInGateway opens a packet listener in the gateway namespace,
// closed at teardown.
func (t *Topo) ListenPacketInGateway(network, addr string) (net.PacketConn, error) {
	return t.listenPacket(t.Gateway, network, addr)
}

// ListenInInternet opens a stream listener in the internet namespace, for
// an extra fake service; closed at teardown.
func (t *Topo) ListenInInternet(network, addr string) (net.Listener, error) {
	return t.listen(t.Internet, network, addr)
}

// ListenPacketInInternet opens a packet listener in the internet
// namespace; closed at teardown.
func (t *Topo) ListenPacketInInternet(network, addr string) (net.PacketConn, error) {
	return t.listenPacket(t.Internet, network, addr)
}

func (t *Topo) listen(ns *sandbox.NS, network, addr string) (net.Listener, error) {
	l, err := sandbox.Listen(ns, network, addr)
	if err != nil {
		return nil, err
	}
	t.onClose(func() { l.Close() })
	return l, nil
}

func (t *Topo) listenPacket(ns *sandbox.NS, network, addr string) (net.PacketConn, error) {
	pc, err := sandbox.ListenPacket(ns, network, addr)
	if err != nil {
		return nil, err
	}
	t.onClose(func() { pc.Close() })
	return pc, nil
}

// DoInSandbox runs f on a thread inside the sandbox namespace (see
// sandbox.Do for what that does and does not cover).
func (t *Topo) DoInSandbox(f func() error) error { return sandbox.Do(t.Sandbox, f) }

// DoInGateway runs f on a thread inside the gateway namespace.
func (t *Topo) DoInGateway(f func() error) error { return sandbox.Do(t.Gateway, f) }

// DoInInternet runs f on a thread inside the internet namespace.
func (t *Topo) DoInInternet(f func() error) error { return sandbox.Do(t.Internet, f) }
