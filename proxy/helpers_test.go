package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/testutil"

	"github.com/miekg/dns"

	"github.com/egressd/egressd/ca"
	"github.com/egressd/egressd/policy"
)

// testDNS is a DNS upstream on 127.0.0.1 answering A/AAAA from a map; the
// names point at loopback origins or at forbidden addresses.
func testDNS(t testing.TB, names map[string][]string) string {
	t.Helper()
	return forgingDNS(t, names, nil)
}

// forgingDNS is testDNS with forge, when set, spoiling each reply m to
// query q: the answers an upstream check must refuse.
func forgingDNS(t testing.TB, names map[string][]string, forge func(q, m *dns.Msg)) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		q := r.Question[0]
		addrs, ok := names[strings.TrimSuffix(strings.ToLower(q.Name), ".")]
		if !ok {
			m.Rcode = dns.RcodeNameError
		}
		for _, s := range addrs {
			a := netip.MustParseAddr(s)
			hdr := dns.RR_Header{Name: q.Name, Class: dns.ClassINET, Ttl: 60}
			switch {
			case a.Is4() && q.Qtype == dns.TypeA:
				hdr.Rrtype = dns.TypeA
				m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: a.AsSlice()})
			case a.Is6() && q.Qtype == dns.TypeAAAA:
				hdr.Rrtype = dns.TypeAAAA
				m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: a.AsSlice()})
			}
		}
		if forge != nil {
			forge(r, m)
		}
		w.WriteMsg(m)
	})
	srv := &dns.Server{PacketConn: pc, Handler: h}
	go srv.ActivateAndServe()
	t.Cleanup(func() { srv.Shutdown() })
	return pc.LocalAddr().String()
}

// dialGuard refuses, and records, any upstream dial that is not to
// 127.0.0.1: a test must never send a packet to a real address, so a bug
// that dials a forbidden answer fails the test instead of leaving the box.
type dialGuard struct {
	mu       sync.Mutex
	refused  []string
	attempts atomic.Int64
	onDial   atomic.Pointer[func()] // runs in every dial (a test's race)
}

func (g *dialGuard) control(network, address string, _ syscall.RawConn) error {
	g.attempts.Add(1)
	if f := g.onDial.Load(); f != nil {
		(*f)()
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil || ap.Addr() != netip.MustParseAddr("127.0.0.1") {
		g.mu.Lock()
		g.refused = append(g.refused, address)
		g.mu.Unlock()
		return fmt.Errorf("test guard: dial to %s refused", address)
	}
	return nil
}

func (g *dialGuard) check(t testing.TB) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.refused) > 0 {
		t.Errorf("the proxy tried to dial forbidden addresses: %v", g.refused)
	}
}

// origin is an HTTP(S) server on 127.0.0.1 that counts what it saw.
type origin struct {
	srv  *http.Server
	addr string
	hits atomic.Int64
	mu   sync.Mutex
	seen []string // "METHOD host path"
}

func newOrigin(t testing.TB, tlsCfg *tls.Config) *origin {
	t.Helper()
	o := &origin{}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o.addr = l.Addr().String()
	o.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.hits.Add(1)
		o.mu.Lock()
		o.seen = append(o.seen, r.Method+" "+r.Host+" "+r.URL.RequestURI())
		o.mu.Unlock()
		io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "origin says hi to %s %s", r.Method, r.URL.Path)
	}), ErrorLog: log.New(io.Discard, "", 0)}
	if tlsCfg != nil {
		l = tls.NewListener(l, tlsCfg)
	}
	go o.srv.Serve(l)
	t.Cleanup(func() { o.srv.Close() })
	return o
}

func (o *origin) port() string {
	_, p, _ := net.SplitHostPort(o.addr)
	return p
}

// harness is a proxy under test with its origins and DNS.
type harness struct {
	t        testing.TB
	px       *Proxy
	proxyURL *url.URL
	guard    *dialGuard
	logs     *testutil.LogWatch
	plain    *origin
	tlsO     *origin
	upCA     *ca.CA // signs the TLS origin's certificates
	mitmCA   *ca.CA // egressd's CA for inspected tunnels
	ready    atomic.Bool
}

// newHarness starts a TLS origin, a plain origin, a DNS upstream and the
// proxy with cfg, where "{DNS}" in cfg is replaced by the DNS address.
func newHarness(t testing.TB, cfg string, names map[string][]string) *harness {
	t.Helper()
	return newHarnessWith(t, cfg, names, nil)
}

// newHarnessWith is newHarness with tune, when set, adjusting the proxy's
// Config (shorter timeouts, a small connection cap).
func newHarnessWith(t testing.TB, cfg string, names map[string][]string, tune func(*Config)) *harness {
	t.Helper()
	h := &harness{t: t, guard: &dialGuard{}, logs: testutil.NewLogWatch()}
	var err error
	if h.upCA, err = ca.New(); err != nil {
		t.Fatal(err)
	}
	if h.mitmCA, err = ca.New(); err != nil {
		t.Fatal(err)
	}
	h.plain = newOrigin(t, nil)
	h.tlsO = newOrigin(t, &tls.Config{GetCertificate: func(hi *tls.ClientHelloInfo) (*tls.Certificate, error) {
		name := hi.ServerName
		if name == "" {
			name = "127.0.0.1"
		}
		return h.upCA.Leaf(name)
	}})
	cfg = strings.ReplaceAll(cfg, "{DNS}", testDNS(t, names))
	pol, err := policy.Parse(strings.NewReader(cfg), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	h.ready.Store(true)
	pc := Config{
		Logger:        slog.New(slog.NewJSONHandler(h.logs, nil)),
		CA:            h.mitmCA,
		UpstreamRoots: h.upCA.Pool(),
		Control:       h.guard.control,
		Ready:         h.ready.Load,
	}
	if tune != nil {
		tune(&pc)
	}
	h.px = New(pol, pc)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go h.px.Serve(l)
	t.Cleanup(func() {
		h.px.Shutdown(t.Context())
		h.guard.check(t)
	})
	h.proxyURL = &url.URL{Scheme: "http", Host: l.Addr().String()}
	return h
}

// client is a Go http.Client through the proxy that trusts both the
// upstream CA (spliced tunnels) and egressd's CA (inspected tunnels).
func (h *harness) client() *http.Client {
	pool := h.upCA.Pool()
	pool.AddCert(h.mitmCA.Certificate())
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			Proxy:             http.ProxyURL(h.proxyURL),
			TLSClientConfig:   &tls.Config{RootCAs: pool},
			DisableKeepAlives: true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

func (h *harness) do(method, rawURL string, body io.Reader, hdr map[string]string) (*http.Response, string) {
	h.t.Helper()
	req, err := http.NewRequest(method, rawURL, body)
	if err != nil {
		h.t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := h.client().Do(req)
	if err != nil {
		return nil, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// raw sends bytes to the proxy and returns what came back until close or
// timeout.
func (h *harness) raw(payload string) string {
	h.t.Helper()
	c, err := net.Dial("tcp", h.proxyURL.Host)
	if err != nil {
		h.t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, payload)
	b, _ := io.ReadAll(c)
	return string(b)
}

// connect opens a CONNECT tunnel through the proxy and returns it after the
// 200 (or fails the test).
func (h *harness) connect(t testing.TB, authority string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", h.proxyURL.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", authority, authority)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	// read the status head byte by byte so nothing after it is consumed
	var head []byte
	one := make([]byte, 1)
	for !bytes.HasSuffix(head, []byte("\r\n\r\n")) {
		if _, err := c.Read(one); err != nil {
			t.Fatalf("CONNECT %s: %v after %q", authority, err, head)
		}
		head = append(head, one[0])
	}
	if !bytes.HasPrefix(head, []byte("HTTP/1.1 200")) {
		t.Fatalf("CONNECT %s: %q", authority, head)
	}
	c.SetReadDeadline(time.Time{})
	return c
}

func splitPort(hp string) (string, string) {
	h, p, _ := net.SplitHostPort(hp)
	return h, p
}

func basic(user string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":x"))
}

func writeFile(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// silentUpstream is testutil.SilentServer's port: an upstream that says
// nothing and never closes.
func silentUpstream(t testing.TB) string {
	t.Helper()
	_, port := splitPort(testutil.SilentServer(t))
	return port
}

// waitNoTunnels fails t unless every tunnel has written its close record
// within d.
func waitNoTunnels(t testing.TB, x *Proxy, d time.Duration, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := x.waitTunnels(ctx); err != nil {
		t.Fatalf("%d tunnel(s) still open after %s: %s", x.OpenTunnels(), d, what)
	}
}
