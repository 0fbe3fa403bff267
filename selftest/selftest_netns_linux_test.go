//go:build linux

package selftest_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/egressd/egressd/internal/testnet"
	"github.com/egressd/egressd/nft"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/sandbox"
	"github.com/egressd/egressd/selftest"
)

// The lab: the testnet topology, egressd's walls applied in its gateway
// namespace, the real proxy and DNS filter served there by the gateway
// helper, and the probe catalog run from the sandbox namespace against
// the fake internet.

const (
	proxyPort = 3128
	relayPort = 3129 // the leaky relay of some negative controls
	logPort   = 9999 // the canary server's log, on the origin address
)

// labRules is the allowlist: allowed.test host-only (spliced), other.test
// host-only on 443 (the SNI probe's tunnel), pypi.test a mirror, app.test
// page-typed (read and download). {EXTRA} is where negative controls add
// rules; the {…} tokens are replaced by labConfig.
const labRules = `
  - name: web
    hosts: [allowed.test]
    cidrs: [203.0.113.0/24, 2001:db8::/32]
    pages: ["*"]
    ports: [{WEBPORTS}]
  - name: fronted
    hosts: [other.test]
    cidrs: [203.0.113.0/24, 2001:db8::/32]
    pages: ["*"]
    ports: [443]
  - name: pypi
    hosts: [pypi.test]
    cidrs: [203.0.113.0/24, 2001:db8::/32]
{PYPI}
  - name: app
    hosts: [app.test]
    cidrs: [203.0.113.0/24, 2001:db8::/32]
    pages: [{APPPAGES}]
{EXTRA}`

type labOpts struct {
	webPorts string // default "80, 443"
	pypi     string // default "    mirror: pypi"
	appPages string // default "read, download"
	extra    string
}

func labConfig(caPath string, o labOpts) string {
	if o.webPorts == "" {
		o.webPorts = "80, 443"
	}
	if o.pypi == "" {
		o.pypi = "    mirror: pypi"
	}
	if o.appPages == "" {
		o.appPages = "read, download"
	}
	rules := strings.NewReplacer("{WEBPORTS}", o.webPorts, "{PYPI}", o.pypi, "{APPPAGES}", o.appPages,
		"{EXTRA}", o.extra).Replace(labRules)
	return fmt.Sprintf(`version: 1
listen:
  proxy: "%s"
  dns: "%s"
resolver:
  upstreams: ["%s"]
upstream_ca: %s
allow:%s
`, netip.AddrPortFrom(testnet.GatewayAddr4, proxyPort), netip.AddrPortFrom(testnet.GatewayAddr4, 53),
		netip.AddrPortFrom(testnet.DNSAddr4, 53), caPath, rules)
}

type lab struct {
	topo   *testnet.Topo
	gw     *gateway
	caPath string
	spec   nft.Spec
	roots  *x509.CertPool
}

var origin46 = []netip.Addr{testnet.OriginAddr4, testnet.OriginAddr6}

func newLab(t *testing.T) *lab {
	t.Helper()
	topo := testnet.New(t, testnet.WithRecords(map[string][]netip.Addr{
		"pypi.test": origin46, "app.test": origin46, "unlisted.test": origin46,
		"canary.test": origin46, "canary-web.test": origin46,
	}))
	// testnet leaves lo down in the gateway; the relay reaches egressd on
	// the gateway's own address, which goes over lo.
	h, err := netlink.NewHandleAt(netns.NsHandle(topo.Gateway.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	lo, err := h.LinkByName("lo")
	if err == nil {
		err = h.LinkSetUp(lo)
	}
	h.Close()
	if err != nil {
		t.Fatalf("set lo up in the gateway: %v", err)
	}
	l := &lab{topo: topo, caPath: t.TempDir() + "/upstream-ca.pem"}
	if err := os.WriteFile(l.caPath, topo.CA.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	l.spec = nft.Spec{
		IfPrefixes: []string{topo.IfPrefix},
		Gateways:   []netip.Addr{testnet.GatewayAddr4, testnet.GatewayAddr6},
		ProxyPort:  proxyPort,
		DNSPort:    53,
		ExtraPorts: []uint16{relayPort},
		HighRisk:   []netip.Prefix{netip.MustParsePrefix("169.254.169.254/32"), netip.MustParsePrefix("fd00:ec2::254/128")},
	}
	l.walls(t)
	cfg := t.TempDir() + "/egressd.yaml"
	if err := os.WriteFile(cfg, []byte(labConfig(l.caPath, labOpts{})), 0o600); err != nil {
		t.Fatal(err)
	}
	l.gw = startGateway(t, topo, cfg)
	l.roots = x509.NewCertPool()
	l.roots.AppendCertsFromPEM(topo.CA.CertPEM)
	l.roots.AppendCertsFromPEM(l.gw.CA)
	l.serveCanaryLog(t)
	return l
}

// walls (re)applies egressd's table in the gateway namespace, which also
// closes any hole a negative control punched.
func (l *lab) walls(t *testing.T) {
	t.Helper()
	if err := nft.Apply(l.topo.Gateway.Fd(), l.spec); err != nil {
		t.Fatalf("apply walls: %v", err)
	}
}

// serveCanaryLog serves, on the origin address, what the fake origin saw:
// the canary server's request log.
func (l *lab) serveCanaryLog(t *testing.T) {
	ln, err := l.topo.ListenInInternet("tcp", netip.AddrPortFrom(testnet.OriginAddr4, logPort).String())
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		for _, h := range l.topo.Origin.Seen() {
			fmt.Fprintln(w, h.What)
		}
		for _, h := range l.topo.TLS.Seen() {
			fmt.Fprintln(w, h.What)
		}
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

// config is the probe catalog for the lab: every direct target on the fake
// internet, every proxy probe against the gateway.
func (l *lab) config(timeout time.Duration) selftest.Config {
	ap := netip.AddrPortFrom
	o4, o6 := testnet.OriginAddr4, testnet.OriginAddr6
	c := selftest.Config{
		UDP:           []netip.AddrPort{ap(o4, 53), ap(o4, 123)},
		ICMP:          []netip.Addr{o4, o6},
		IPv6:          []netip.AddrPort{ap(o6, 443), ap(o6, 22)},
		Resolvers:     []netip.AddrPort{ap(testnet.DNSAddr4, 53)},
		Metadata:      []netip.Addr{testnet.MetadataAddr4},
		MetadataNames: []string{"metadata.google.internal"},
		DNS:           ap(testnet.GatewayAddr4, 53),
		CanaryName:    "canary.test",
		Proxy:         ap(testnet.GatewayAddr4, proxyPort),
		CanaryURL:     "http://canary-web.test/",
		CanaryLog:     fmt.Sprintf("http://%s/log", ap(o4, logPort)),
		Unlisted:      "unlisted.test:443",
		SNIHost:       "other.test:443",
		SNIName:       "unlisted.test",
		HostTrickURL:  "http://allowed.test/",
		HostTrickHost: testnet.MetadataAddr4.String(),
		Refused: []selftest.Request{
			{ID: "mirror-publish/pypi", Route: "proxy: mirror upload (rule pypi)", Method: "POST", URL: "https://pypi.test/legacy/",
				ContentType: "multipart/form-data; boundary=x", Body: "--x\r\nContent-Disposition: form-data; name=\":action\"\r\n\r\nfile_upload\r\n--x--\r\n", Reason: "mirror"},
			{ID: "page-login/app", Route: "proxy: login page (rule app)", Method: "POST", URL: "https://app.test/login",
				ContentType: "application/x-www-form-urlencoded", Body: "username=egressd&password=selftest", Reason: "page-type"},
			{ID: "page-upload/app", Route: "proxy: upload page (rule app)", Method: "POST", URL: "https://app.test/upload",
				ContentType: "multipart/form-data; boundary=x", Body: "--x\r\nContent-Disposition: form-data; name=\"f\"; filename=\"a\"\r\n\r\nA\r\n--x--\r\n", Reason: "page-type"},
			{ID: "page-posting/app", Route: "proxy: posting (rule app)", Method: "POST", URL: "https://app.test/comments",
				ContentType: "application/x-www-form-urlencoded", Body: "comment=egressd-selftest", Reason: "page-type"},
		},
		ExpectReachable: []string{"http://allowed.test/", "https://allowed.test/", "https://app.test/"},
		RootCAs:         l.roots,
		Timeout:         timeout,
		Dial:            (&sandbox.Dialer{NS: l.topo.Sandbox}).DialContext,
		LogDial:         l.topo.GatewayDialer().DialContext,
		ListenICMP: func(network string) (net.PacketConn, error) {
			var pc net.PacketConn
			err := l.topo.DoInSandbox(func() error {
				lc := net.ListenConfig{Control: sandbox.GuardControl(l.topo.Sandbox.Cookie())}
				var err error
				pc, err = lc.ListenPacket(context.Background(), network, "")
				return err
			})
			return pc, err
		},
	}
	for _, p := range append([]uint16{80, 443}, testnet.TCPPorts...) {
		c.TCP = append(c.TCP, ap(o4, p))
	}
	return c
}

func run(t *testing.T, c selftest.Config) *selftest.Report {
	t.Helper()
	rep, err := selftest.Run(context.Background(), c)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return rep
}

func ids(rs []selftest.Result) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.ID)
	}
	slices.Sort(out)
	return out
}

func table(rep *selftest.Report) string {
	var b bytes.Buffer
	rep.WriteTable(&b)
	return b.String()
}

// TestSealed runs the whole catalog against a correct deployment: every
// probe passes, the positive controls reach the origin, and the run fits
// the 2 s goal.
func TestSealed(t *testing.T) {
	// Not parallel: it holds the run to the 2 s goal, which other tests' load would blur.
	l := newLab(t)
	c := l.config(0) // the default 1.5 s
	before := l.topo.TLS.Hits() + l.topo.Origin.Hits()
	rep := run(t, c)
	t.Logf("full catalog: %d probes in %v\n%s", len(rep.Results), rep.Duration, table(rep))
	if !rep.Sealed() {
		t.Fatalf("got %s, want sealed:\n%s", rep.Outcome(), table(rep))
	}
	if got := l.topo.TLS.Hits() + l.topo.Origin.Hits() - before; got != len(c.ExpectReachable) {
		t.Errorf("origin saw %d requests, want %d (the positive controls only)", got, len(c.ExpectReachable))
	}
	if n := l.topo.Metadata.Hits(); n != 0 {
		t.Errorf("metadata server saw %d requests, want 0", n)
	}
	if rep.Duration > 2*time.Second {
		t.Errorf("full run took %v, want under 2s", rep.Duration)
	}
}

// hole is one negative control: open exactly one way out, then the run
// must name exactly the probes in want.
type hole struct {
	name  string
	want  []string
	open  func(t *testing.T, l *lab, c *selftest.Config) // c may be changed (the relay)
	check func(t *testing.T, l *lab)                     // optional: the hole was real
}

// TestNegativeControls opens each hole, in a lab of its own, and checks
// that the run reports it, by name, and nothing else. Every probe of the
// catalog is named by at least one hole (checked at the end).
func TestNegativeControls(t *testing.T) {
	t.Parallel()
	l := newLab(t)
	// A leak is found by its answer (a connect, a reply, content), and a
	// sealed probe by silence or egressd's refusal: a timeout longer than
	// the default only gives a loaded machine's answers time to come.
	const timeout = 3 * time.Second
	base := l.config(timeout)
	var holes []hole
	o4, o6 := testnet.OriginAddr4, testnet.OriginAddr6
	for _, ap := range base.TCP {
		holes = append(holes, nftHole("tcp/"+ap.String(), unix.IPPROTO_TCP, ap))
	}
	for _, ap := range base.UDP {
		holes = append(holes, nftHole("udp/"+ap.String(), unix.IPPROTO_UDP, ap))
	}
	holes = append(holes,
		nftHole("icmp/"+o4.String(), unix.IPPROTO_ICMP, netip.AddrPortFrom(o4, 0)),
		nftHole("icmp/"+o6.String(), unix.IPPROTO_ICMPV6, netip.AddrPortFrom(o6, 0)))
	for _, ap := range base.IPv6 {
		holes = append(holes, nftHole("ipv6/"+ap.String(), unix.IPPROTO_TCP, ap))
	}
	for _, ap := range base.Resolvers {
		holes = append(holes, nftHole("dns-direct-udp/"+ap.String(), unix.IPPROTO_UDP, ap), nftHole("dns-direct-tcp/"+ap.String(), unix.IPPROTO_TCP, ap))
	}
	for _, a := range base.Metadata {
		holes = append(holes, nftHole("metadata-direct/"+netip.AddrPortFrom(a, 80).String(), unix.IPPROTO_TCP, netip.AddrPortFrom(a, 80)))
	}
	holes = append(holes,
		policyHole("dns-canary/canary.test", labOpts{extra: "  - name: canary-dns\n    hosts: [canary.test]\n    ports: [9]\n"}),
		policyHole("connect-unlisted/unlisted.test:443", labOpts{extra: "  - name: unlisted\n    hosts: [unlisted.test]\n    cidrs: [203.0.113.0/24, 2001:db8::/32]\n    pages: [\"*\"]\n    ports: [443]\n"}),
		// The canary host allowlisted: the request gets out, and the
		// canary server's log shows it.
		policyHole("http-canary canary-log", labOpts{extra: "  - name: canary-web\n    hosts: [canary-web.test]\n    cidrs: [203.0.113.0/24, 2001:db8::/32]\n    pages: [\"*\"]\n"}),
		policyHole("mirror-publish/pypi", labOpts{pypi: "    pages: [read, download, upload, publish]"}),
		policyHole("page-login/app", labOpts{appPages: "read, download, login"}),
		policyHole("page-upload/app", labOpts{appPages: "read, download, upload"}),
		policyHole("page-posting/app", labOpts{appPages: "read, download, posting"}),
		// Positive controls: the allowlist broken for one target each.
		policyHole("expect/http://allowed.test/", labOpts{webPorts: "443"}),
		policyHole("expect/https://allowed.test/", labOpts{webPorts: "80"}),
		policyHole("expect/https://app.test/", labOpts{appPages: "download"}),
	)
	// Holes in the proxy's own checks cannot be opened by config: a leaky
	// relay in front of egressd serves exactly one kind of request itself,
	// without that check, and passes everything else to egressd.
	for _, a := range base.Metadata {
		for _, s := range []struct{ name, host string }{
			{"literal", "169.254.169.254"}, {"decimal", "2852039166"}, {"hex", "0xA9FEA9FE"},
			{"octal", "0251.0376.0251.0376"}, {"short", "169.254.43518"}, {"ipv6-mapped", "[::ffff:169.254.169.254]"},
		} {
			holes = append(holes, relayHole("metadata-proxy-"+s.name+"/"+a.String(), func(r *http.Request, _ string) bool {
				return r.Method != http.MethodConnect && r.URL.Host == s.host
			}, metadataReached))
		}
	}
	holes = append(holes,
		// A name pointed at the fake metadata server, resolved and dialed
		// by a relay without the high-risk check.
		hole{name: "metadata name", want: []string{"metadata-proxy-name/metadata.google.internal"},
			open: func(t *testing.T, l *lab, c *selftest.Config) {
				l.topo.DNS.Set("metadata.google.internal", testnet.MetadataAddr4)
				t.Cleanup(func() { l.topo.DNS.Set("metadata.google.internal") })
				useRelay(t, l, c, func(r *http.Request, _ string) bool { return r.URL.Host == "metadata.google.internal" }, false)
			}, check: metadataReached},
		relayHole("sni-mismatch/other.test:443", func(r *http.Request, _ string) bool {
			return r.Method == http.MethodConnect && r.Host == "other.test:443"
		}, nil),
		relayHole("host-trick", func(r *http.Request, host string) bool {
			return r.Method != http.MethodConnect && host != r.URL.Host
		}, nil),
		// A proxy that forwards the canary request but answers the client
		// with a refusal: only the canary server's log can tell.
		hole{name: "lying proxy", want: []string{"canary-log"},
			open: func(t *testing.T, l *lab, c *selftest.Config) {
				useRelay(t, l, c, func(r *http.Request, _ string) bool { return r.URL.Host == "canary-web.test" }, true)
			}},
	)

	var mu sync.Mutex
	named := map[string]bool{}
	// The group returns once every hole's parallel subtest is done.
	t.Run("holes", func(t *testing.T) {
		for _, h := range holes {
			t.Run(h.name, func(t *testing.T) {
				t.Parallel()
				l := newLab(t)
				c := l.config(timeout)
				h.open(t, l, &c)
				rep := run(t, c)
				got := ids(rep.Failures())
				want := slices.Sorted(slices.Values(h.want))
				if !slices.Equal(got, want) {
					t.Errorf("failures: got %q, want %q\n%s", got, want, table(rep))
				}
				if u := rep.Unfinished(); len(u) > 0 {
					t.Errorf("probes that did not finish: %q\n%s", ids(u), table(rep))
				}
				if rep.Sealed() {
					t.Errorf("got sealed with a hole open")
				}
				if h.check != nil {
					h.check(t, l)
				}
				mu.Lock()
				defer mu.Unlock()
				for _, id := range got {
					named[id] = true
				}
			})
		}
	})
	for _, r := range run(t, base).Results {
		if !named[r.ID] {
			t.Errorf("probe %s has no negative control that made it fail", r.ID)
		}
	}
}

// nftHole accepts exactly one destination (protocol, address, port) ahead
// of the wall's drop rules.
func nftHole(id string, proto byte, dst netip.AddrPort) hole {
	return hole{name: id, want: []string{id}, open: func(t *testing.T, l *lab, _ *selftest.Config) {
		t.Cleanup(func() { l.walls(t) })
		testnet.InsertAccept(t, l.topo.Gateway.Fd(), l.spec.TableName(), proto, dst)
	}}
}

// policyHole makes the gateway enforce a config with one change; want is
// space-separated probe IDs.
func policyHole(want string, o labOpts) hole {
	return hole{name: want, want: strings.Fields(want), open: func(t *testing.T, l *lab, _ *selftest.Config) {
		l.gw.setPolicy(labConfig(l.caPath, o))
		t.Cleanup(func() { l.gw.setPolicy(labConfig(l.caPath, labOpts{})) })
	}}
}

func relayHole(id string, serve relayPick, check func(*testing.T, *lab)) hole {
	return hole{name: id, want: []string{id}, check: check, open: func(t *testing.T, l *lab, c *selftest.Config) {
		useRelay(t, l, c, serve, false)
	}}
}

func metadataReached(t *testing.T, l *lab) {
	t.Helper()
	if l.topo.Metadata.Hits() == 0 {
		t.Errorf("the relay never reached the metadata server: the hole was not real")
	}
	l.topo.Metadata.Reset()
}

// useRelay starts the leaky relay in the gateway and points the probes'
// proxy at it. It serves the requests serve picks itself, dialing the
// target directly from the gateway without egressd's checks (lie: and
// then answers the client with a fake refusal); every other connection is
// passed to egressd byte for byte.
func useRelay(t *testing.T, l *lab, c *selftest.Config, serve relayPick, lie bool) {
	t.Helper()
	ln, err := l.topo.ListenInGateway("tcp", netip.AddrPortFrom(testnet.GatewayAddr4, relayPort).String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	d := l.topo.GatewayDialer()
	egressd := c.Proxy.String()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go relay(conn, d, egressd, serve, lie)
		}
	}()
	c.Proxy = netip.AddrPortFrom(testnet.GatewayAddr4, relayPort)
}

// relayPick picks the requests the relay serves itself; host is the Host
// header as sent (net/http replaces it with the URL's host).
type relayPick func(r *http.Request, host string) bool

func relay(conn net.Conn, d *sandbox.Dialer, egressd string, serve relayPick, lie bool) {
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	var seen bytes.Buffer
	br := bufio.NewReader(io.TeeReader(conn, &seen))
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	ctx := context.Background()
	if !serve(req, headerHost(seen.Bytes())) {
		up, err := d.DialContext(ctx, "tcp", egressd)
		if err != nil {
			return
		}
		defer up.Close()
		up.Write(seen.Bytes()) // the head, and whatever came with it
		go io.Copy(up, conn)
		io.Copy(conn, up)
		return
	}
	target := req.Host
	if req.Method != http.MethodConnect {
		target = req.URL.Host
	}
	if _, _, err := net.SplitHostPort(target); err != nil {
		target = net.JoinHostPort(strings.Trim(target, "[]"), "80")
	}
	if t, err := policy.ParseAuthority(target); err == nil && t.Addr.IsValid() {
		target = netip.AddrPortFrom(t.Addr.Unmap(), t.Port).String() // 0xA9FEA9FE and friends
	}
	up, err := d.DialContext(ctx, "tcp", target)
	if err != nil {
		io.WriteString(conn, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
		return
	}
	defer up.Close()
	if req.Method == http.MethodConnect {
		io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n")
		// No peek at the ClientHello: no SNI check.
		go io.Copy(up, io.MultiReader(bytes.NewReader(seen.Bytes()[len(seen.Bytes())-br.Buffered():]), conn))
		io.Copy(conn, up)
		return
	}
	up.Write(seen.Bytes())
	if lie {
		io.Copy(io.Discard, up)
		io.WriteString(conn, "HTTP/1.1 403 Forbidden\r\nX-Egressd-Deny: no-rule\r\nContent-Length: 0\r\n\r\n")
		return
	}
	io.Copy(conn, up)
}

// headerHost returns the first Host header of a raw request head.
func headerHost(head []byte) string {
	for _, line := range strings.Split(string(head), "\r\n")[1:] {
		if line == "" {
			break
		}
		if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(k, "Host") {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
