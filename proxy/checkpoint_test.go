package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/egressd/egressd/internal/testutil"
	"github.com/egressd/egressd/policy"
)

// Tests of issue 11's holes (and ECH and CONNECT-time decisions): each
// fails against the code before the fix.

// inspectedTLS opens an inspected tunnel to authority and completes the
// TLS handshake with egressd's CA.
func (h *harness) inspectedTLS(t testing.TB, authority, sni string) *tls.Conn {
	t.Helper()
	c := h.connect(t, authority)
	tc := tls.Client(c, &tls.Config{ServerName: sni, RootCAs: h.mitmCA.Pool()})
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err != nil {
		t.Fatalf("inspected handshake to %s: %v", authority, err)
	}
	return tc
}

// TestInspectedHeadLimit: a 64 MiB header inside an inspected tunnel gets
// 431 with X-Egressd-Deny once over limits.header_bytes, and the proxy's
// heap does not grow with it.
func TestInspectedHeadLimit(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	port := h.tlsO.port()
	tc := h.inspectedTLS(t, "docs.test:"+port, "docs.test")
	defer tc.Close()
	tc.SetDeadline(time.Now().Add(20 * time.Second))
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	go func() {
		fmt.Fprintf(tc, "GET /guide HTTP/1.1\r\nHost: docs.test:%s\r\nX-Big: ", port)
		chunk := bytes.Repeat([]byte("A"), 64<<10)
		for range 1024 { // 64 MiB, never ended
			if _, err := tc.Write(chunk); err != nil {
				return
			}
		}
	}()
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatalf("no answer to a 64 MiB head: %v", err)
	}
	runtime.ReadMemStats(&after)
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || resp.Header.Get("X-Egressd-Deny") != "header-too-large" {
		t.Errorf("64 MiB head: %d %q, want 431 header-too-large", resp.StatusCode, resp.Header.Get("X-Egressd-Deny"))
	}
	// The whole process (client included) may not have allocated the head:
	// the client writes from one 64 KiB buffer, the proxy keeps at most
	// header_bytes of it.
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
		t.Errorf("allocated %d MiB while refusing one head, want < 16", grew>>20)
	}
	if h.tlsO.hits.Load() != 0 {
		t.Errorf("an oversized head reached the origin")
	}
	waitLog(t, h, `"reason":"header-too-large"`)

	// a request target over policy.MaxURLLen: 414
	tc2 := h.inspectedTLS(t, "docs.test:"+port, "docs.test")
	defer tc2.Close()
	fmt.Fprintf(tc2, "GET /%s HTTP/1.1\r\nHost: docs.test:%s\r\n\r\n", strings.Repeat("a", policy.MaxURLLen+10), port)
	resp, err = http.ReadResponse(bufio.NewReader(tc2), nil)
	if err != nil || resp.StatusCode != http.StatusRequestURITooLong || resp.Header.Get("X-Egressd-Deny") != "url-too-long" {
		t.Errorf("long URL in a tunnel: %v %v, want 414 url-too-long", resp, err)
	}
	// negative control: a normal request in a tunnel passes
	tc3 := h.inspectedTLS(t, "docs.test:"+port, "docs.test")
	defer tc3.Close()
	fmt.Fprintf(tc3, "GET /guide HTTP/1.1\r\nHost: docs.test:%s\r\nX-Small: %s\r\n\r\n", port, strings.Repeat("b", 1000))
	if resp, err := http.ReadResponse(bufio.NewReader(tc3), nil); err != nil || resp.StatusCode != 200 {
		t.Errorf("normal request in a tunnel: %v %v", resp, err)
	}
}

// TestHeadLimitsAgree: a plain head just over limits.header_bytes (but
// within Go's own slack of 4096) is refused by egressd with 431, so the
// hygiene scanner never stops watching a connection Go still serves.
func TestHeadLimitsAgree(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	port := h.plain.port()
	big := strings.Repeat("a", 32<<10+1000-200) // head of header_bytes+~1000
	out := h.raw(fmt.Sprintf("GET http://allowed.test:%s/ HTTP/1.1\r\nHost: allowed.test:%s\r\nX-Pad: %s\r\n\r\n"+
		"POST http://allowed.test:%s/ HTTP/1.1\r\nHost: allowed.test:%s\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		port, port, big, port, port))
	if !strings.HasPrefix(out, "HTTP/1.1 431") || !strings.Contains(out, "X-Egressd-Deny: header-too-large") {
		t.Errorf("head over header_bytes: %.200q, want 431 header-too-large", out)
	}
	if n := h.plain.hits.Load(); n != 0 {
		t.Errorf("origin saw %d requests from a connection whose first head was over the limit", n)
	}
}

// TestSilentTunnelCut: an inspected CONNECT that never sends its
// ClientHello, and a spliced one, are closed within the hello deadline; a
// silent client before its CONNECT line within the head deadline.
func TestSilentTunnelCut(t *testing.T) {
	t.Parallel()
	cfg := strings.Replace(testConfig, "identities:\n", "limits:\n  request_header_timeout: 300ms\nidentities:\n", 1)
	h := newHarnessWith(t, cfg, testNames, func(c *Config) { c.HelloTimeout = 300 * time.Millisecond })
	port := h.tlsO.port()
	for _, target := range []string{"docs.test:" + port, "allowed.test:" + port} {
		c := h.connect(t, target)
		start := time.Now()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || time.Since(start) > 3*time.Second {
			t.Errorf("silent tunnel to %s: still open after %s (%v)", target, time.Since(start), err)
		}
	}
	waitLog(t, h, `"reason":"no-client-hello"`)
	if strings.Contains(h.logs.String(), `"decision":"allow","reason":"no-client-hello"`) {
		t.Errorf("a cut tunnel was logged as allowed")
	}
	// partial head, before the CONNECT line ends
	c, err := net.Dial("tcp", h.proxyURL.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "CONNECT docs.test:")
	start := time.Now()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	io.ReadAll(c)
	if time.Since(start) > 3*time.Second {
		t.Errorf("a partial CONNECT line kept its connection %s", time.Since(start))
	}
}

// TestAcceptErrors: an accept error (out of descriptors) is logged and
// counted, and the listener goes on serving.
func TestAcceptErrors(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := &failingListener{Listener: l, fails: 3}
	go h.px.Serve(fl)
	waitLog(t, h, `"msg":"accept failed"`)
	waitFor(t, "egressd_accept_errors_total 3", func() bool {
		var m dto.Metric
		h.px.m.acceptErrors.Write(&m)
		return m.GetCounter().GetValue() == 3
	})
	if resp, err := (&http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: l.Addr().String()})}}).Get("http://allowed.test:" + h.plain.port() + "/"); err != nil || resp.StatusCode != 200 {
		t.Errorf("after accept errors the listener does not serve: %v %v", resp, err)
	}
}

// failingListener fails its first accepts with EMFILE, as a process out
// of descriptors does.
type failingListener struct {
	net.Listener
	fails int
}

func (l *failingListener) Accept() (net.Conn, error) {
	if l.fails > 0 {
		l.fails--
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: emfile{}}
	}
	return l.Listener.Accept()
}

type emfile struct{}

func (emfile) Error() string   { return "too many open files" }
func (emfile) Temporary() bool { return true }
func (emfile) Timeout() bool   { return false }

// TestIdentitySourceAuthoritative: a Proxy-Authorization label cannot
// escape the source address's quarantine or connection budget, an unknown
// label mints nothing, and a proven token refines the identity inside its
// source.
func TestIdentitySourceAuthoritative(t *testing.T) {
	t.Parallel()
	cfg := strings.Replace(testConfig, "identities:\n", "limits:\n  conns_per_identity: 2\nidentities:\n", 1)
	h := newHarness(t, cfg, testNames)
	target := "http://allowed.test:" + h.plain.port() + "/"
	h.px.Quarantine("127.0.0.1")
	for _, label := range []string{"evil", "agent-a"} {
		resp, _ := h.do("GET", target, nil, map[string]string{"Proxy-Authorization": "Basic " + basic(label)})
		if resp == nil || resp.StatusCode != 403 || resp.Header.Get("X-Egressd-Deny") != "quarantine" {
			t.Errorf("label %q from a quarantined source: %v, want 403 quarantine", label, resp)
		}
	}
	h.px.Lift("127.0.0.1")
	// a proven token names its identity in the log, with the source
	resp, _ := h.do("GET", target, nil, map[string]string{"Proxy-Authorization": "Basic " + basic("agent-a")})
	if resp == nil || resp.StatusCode != 200 {
		t.Fatalf("proven token: %v", resp)
	}
	waitLog(t, h, `"identity":"agent-a"`)
	// the wrong secret is a label, not the identity
	resp, _ = h.do("GET", target, nil, map[string]string{"Proxy-Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("agent-a:wrong"))})
	if resp == nil || resp.StatusCode != 200 {
		t.Fatalf("wrong secret: %v", resp)
	}
	if strings.Contains(h.logs.String(), `"identity":"user:`) {
		t.Errorf("an unknown label minted an identity")
	}
	// the connection budget is the source's, whatever the labels
	echo := testutil.EchoServer(t)
	_, eport := splitPort(echo)
	for _, label := range []string{"one", "two"} {
		c := rawConnect(t, h, "ssh.test:"+eport, label)
		defer c.Close()
	}
	out := h.raw(fmt.Sprintf("GET %s HTTP/1.1\r\nHost: allowed.test:%s\r\nProxy-Authorization: Basic %s\r\n\r\n", target, h.plain.port(), basic("three")))
	if !strings.HasPrefix(out, "HTTP/1.1 429") {
		t.Errorf("third connection of a source with a budget of 2, under a new label: %.100q, want 429", out)
	}
}

// rawConnect opens a CONNECT tunnel with a Proxy-Authorization label.
func rawConnect(t *testing.T, h *harness, authority, label string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", h.proxyURL.Host)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\n\r\n", authority, authority, basic(label))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.Contains(line, "200") {
		t.Fatalf("CONNECT %s as %s: %q %v", authority, label, line, err)
	}
	c.SetReadDeadline(time.Time{})
	return c
}

// TestReloadClosesTunnels: a spliced tunnel whose rule a reload removed is
// closed at the swap, and logged as a denial with the new reason.
func TestReloadClosesTunnels(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	echo := testutil.EchoServer(t)
	_, port := splitPort(echo)
	c := h.connect(t, "ssh.test:"+port)
	br := bufio.NewReader(c)
	io.WriteString(c, "ping\n")
	if l, _ := br.ReadString('\n'); l != "ping\n" {
		t.Fatalf("echo: %q", l)
	}
	keep := h.connect(t, "allowed.test:"+h.tlsO.port()) // still allowed after the reload
	cfg := strings.Replace(testConfig, "hosts: [ssh.test]", "hosts: [other.test]", 1)
	cfg = strings.ReplaceAll(cfg, "{DNS}", h.px.Policy().Resolver.Upstreams[0].String())
	next, err := policy.Parse(strings.NewReader(cfg), "next.yaml")
	if err != nil {
		t.Fatal(err)
	}
	h.px.SetPolicy(next)
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := br.ReadString('\n'); err == nil {
		t.Errorf("a tunnel the new policy denies is still open")
	}
	line := waitLog(t, h, `"reason":"no-rule"`)
	if !strings.Contains(line, `"decision":"deny"`) || !strings.Contains(line, "ssh.test") {
		t.Errorf("reload cut logged as %s", line)
	}
	keep.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := keep.Read(make([]byte, 1)); err == nil || !isTimeout(err) {
		t.Errorf("an allowed tunnel was closed by the reload: %v", err)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestCutsLoggedAsDeny: tunnels egressd cuts after the 200 are denials
// in the log; a plain request's bytes_out counts its head, and the query
// length is logged.
func TestCutsLoggedAsDeny(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	port := h.tlsO.port()
	c := h.connect(t, "allowed.test:"+port)
	io.WriteString(c, "SSH-2.0-test\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	c.Read(make([]byte, 1))
	line := waitLog(t, h, `"reason":"not-tls"`)
	if !strings.Contains(line, `"decision":"deny"`) {
		t.Errorf("not-tls cut logged as %s", line)
	}
	c2 := h.connect(t, "allowed.test:"+port)
	tc := tls.Client(c2, &tls.Config{ServerName: "evil.test", InsecureSkipVerify: true})
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	tc.Handshake()
	line = waitLog(t, h, `"reason":"sni-mismatch"`)
	if !strings.Contains(line, `"decision":"deny"`) {
		t.Errorf("sni-mismatch cut logged as %s", line)
	}
	resp, _ := h.do("GET", "http://allowed.test:"+h.plain.port()+"/q?abc=123", nil, nil)
	if resp == nil || resp.StatusCode != 200 {
		t.Fatalf("plain GET: %v", resp)
	}
	line = waitLog(t, h, `"path":"/q"`)
	if strings.Contains(line, `"bytes_out":0,`) || !strings.Contains(line, `"query_len":7`) {
		t.Errorf("a GET's head is not counted as data out, or the query length is missing: %s", line)
	}
}

// TestConnectWithHelloInOneWrite: a client that sends the CONNECT head and
// its ClientHello in one write gets its tunnel (the hello is not lost).
func TestConnectWithHelloInOneWrite(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	port := h.tlsO.port()
	raw, err := net.Dial("tcp", h.proxyURL.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	pc := &prefixConn{Conn: raw, pre: []byte("CONNECT allowed.test:" + port + " HTTP/1.1\r\nHost: allowed.test\r\n\r\n")}
	tc := tls.Client(pc, &tls.Config{ServerName: "allowed.test", RootCAs: h.upCA.Pool()})
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	if err := tc.Handshake(); err != nil {
		t.Fatalf("CONNECT and hello in one write: %v", err)
	}
}

// prefixConn sends pre with the first write and reads past a 200 head
// before the first read.
type prefixConn struct {
	net.Conn
	pre      []byte
	readHead bool
}

func (c *prefixConn) Write(p []byte) (int, error) {
	if c.pre != nil {
		b := append(c.pre, p...)
		c.pre = nil
		if _, err := c.Conn.Write(b); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if !c.readHead {
		var head []byte
		one := make([]byte, 1)
		for !bytes.HasSuffix(head, []byte("\r\n\r\n")) {
			if _, err := c.Conn.Read(one); err != nil {
				return 0, err
			}
			head = append(head, one[0])
		}
		if !bytes.HasPrefix(head, []byte("HTTP/1.1 200")) {
			return 0, fmt.Errorf("CONNECT: %q", head)
		}
		c.readHead = true
	}
	return c.Conn.Read(p)
}

// TestInspectedCleartextRefused: cleartext inside an inspected CONNECT to
// a TLS rule is refused (not-tls), never sent to the TLS port.
func TestInspectedCleartextRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	port := h.tlsO.port()
	c := h.connect(t, "docs.test:"+port)
	fmt.Fprintf(c, "GET /guide HTTP/1.1\r\nHost: docs.test:%s\r\n\r\n", port)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.Header.Get("X-Egressd-Deny") != "not-tls" {
		t.Errorf("cleartext in an inspected tunnel: %v %v, want not-tls", resp, err)
	}
	line := waitLog(t, h, `"reason":"not-tls"`)
	if !strings.Contains(line, `"decision":"deny"`) {
		t.Errorf("logged as %s", line)
	}
}

// TestInspectedUpgradeRefused: a protocol switch inside an inspected
// tunnel is an explicit denial (upgrade), logged, never forwarded.
func TestInspectedUpgradeRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	base := "https://docs.test:" + h.tlsO.port()
	for _, hdr := range []map[string]string{
		{"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version": "13"},
		{"Upgrade": "h2c", "Connection": "Upgrade, HTTP2-Settings", "HTTP2-Settings": "AAMAAABkAAQCAAAAAAIAAAAA"},
	} {
		resp, b := h.do("GET", base+"/guide", nil, hdr)
		if resp == nil || resp.StatusCode != 403 || resp.Header.Get("X-Egressd-Deny") != "upgrade" {
			t.Errorf("Upgrade %s: %v %q, want 403 upgrade", hdr["Upgrade"], resp, b)
		}
	}
	if n := h.tlsO.hits.Load(); n != 0 {
		t.Errorf("origin saw %d upgrade requests", n)
	}
	// negative control: the same request without Upgrade passes
	if resp, _ := h.do("GET", base+"/guide", nil, nil); resp == nil || resp.StatusCode != 200 {
		t.Errorf("plain GET: %v", resp)
	}
}

// TestSNICaseNormalized: an upper-case SNI names the same host.
func TestSNICaseNormalized(t *testing.T) {
	t.Parallel()
	tgt, err := policy.ParseAuthority("allowed.test:443")
	if err != nil {
		t.Fatal(err)
	}
	for _, sni := range []string{"ALLOWED.TEST", "Allowed.Test", "allowed.test."} {
		if !sniMatches(&tgt, sni) {
			t.Errorf("SNI %q does not match allowed.test", sni)
		}
	}
	addr, _ := policy.ParseAuthority("[2001:db8::1]:443")
	if !sniMatches(&addr, "2001:DB8::1") || sniMatches(&addr, "2001:db8::2") {
		t.Errorf("address SNI comparison")
	}
}

// withExtension returns a TLS ClientHello record with one more extension
// (typ, data), lengths fixed up.
func withExtension(t testing.TB, rec []byte, typ uint16, data []byte) []byte {
	t.Helper()
	// record(5) handshake(4) version(2) random(32) session id
	p := 5 + 4 + 2 + 32
	p += 1 + int(rec[p])
	p += 2 + int(binary.BigEndian.Uint16(rec[p:])) // cipher suites
	p += 1 + int(rec[p])                           // compression
	extLenAt := p
	ext := make([]byte, 4+len(data))
	binary.BigEndian.PutUint16(ext, typ)
	binary.BigEndian.PutUint16(ext[2:], uint16(len(data)))
	copy(ext[4:], data)
	out := append(append([]byte{}, rec...), ext...)
	add := len(ext)
	binary.BigEndian.PutUint16(out[3:], uint16(int(binary.BigEndian.Uint16(out[3:]))+add))
	hl := int(out[6])<<16 | int(out[7])<<8 | int(out[8]) + add
	out[6], out[7], out[8] = byte(hl>>16), byte(hl>>8), byte(hl)
	binary.BigEndian.PutUint16(out[extLenAt:], uint16(int(binary.BigEndian.Uint16(out[extLenAt:]))+add))
	return out
}

// TestSplicedECHRefused: a ClientHello carrying encrypted_client_hello on
// a spliced tunnel is cut (reason ech) and nothing reaches the origin.
func TestSplicedECHRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	port := h.tlsO.port()
	hello := recordHello(t, &tls.Config{ServerName: "allowed.test"})
	// an outer ECH extension: type outer, HKDF-SHA256, AES-128-GCM,
	// config id, a 32-byte enc and a 160-byte payload
	outer := []byte{0, 0, 1, 0, 1, 0x42, 0, 32}
	outer = append(outer, bytes.Repeat([]byte{7}, 32)...)
	outer = append(outer, 0, 160)
	outer = append(outer, bytes.Repeat([]byte{9}, 160)...)
	ech := withExtension(t, hello, extECH, outer)
	if _, _, err := peekClientHello(&memConn{r: bytes.NewReader(ech)}, 0); err != nil {
		t.Fatalf("test hello does not parse: %v", err)
	}
	c := h.connect(t, "allowed.test:"+port)
	c.Write(ech)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, _ := c.Read(make([]byte, 64)); n != 0 {
		t.Errorf("an ECH hello got an answer through a spliced tunnel")
	}
	line := waitLog(t, h, `"reason":"ech"`)
	if !strings.Contains(line, `"decision":"deny"`) {
		t.Errorf("logged as %s", line)
	}
	// negative control: the same hello without ECH is relayed
	c2 := h.connect(t, "allowed.test:"+port)
	c2.Write(hello)
	c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, _ := c2.Read(make([]byte, 64)); n == 0 {
		t.Errorf("a plain hello got no answer")
	}
}

// TestInspectedConnectDecidedEarly: under an inspected rule, a CONNECT to
// a name that resolves only to refused addresses gets its 403 at CONNECT.
func TestInspectedConnectDecidedEarly(t *testing.T) {
	t.Parallel()
	cfg := strings.Replace(testConfig, "hosts: [docs.test]", "hosts: [docs.test, docsmeta.test, docspriv.test]", 1)
	names := map[string][]string{"docsmeta.test": {"169.254.169.254"}, "docspriv.test": {"10.0.0.5"}}
	for k, v := range testNames {
		names[k] = v
	}
	h := newHarness(t, cfg, names)
	for host, reason := range map[string]string{"docsmeta.test": "high-risk", "docspriv.test": "special-address"} {
		out := h.raw("CONNECT " + host + ":443 HTTP/1.1\r\nHost: " + host + "\r\n\r\n")
		if !strings.HasPrefix(out, "HTTP/1.1 403") || !strings.Contains(out, "X-Egressd-Deny: "+reason) {
			t.Errorf("CONNECT %s: %.150q, want 403 %s", host, out, reason)
		}
	}
}

// TestProxyLoopEveryListener: every listener registered (and any local
// address on the port of one bound to all addresses) is proxy-loop.
func TestProxyLoopEveryListener(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	admin, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	go http.Serve(admin, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "admin") }))
	_, aport := splitPort(admin.Addr().String())
	// negative control: before it is registered, the rule reaches it
	if resp, _ := h.do("GET", "http://127.0.0.1:"+aport+"/metrics", nil, nil); resp == nil || resp.StatusCode != 200 {
		t.Fatalf("unregistered listener: %v", resp)
	}
	h.px.AddListener(admin.Addr())
	for _, u := range []string{"http://127.0.0.1:" + aport + "/metrics", "http://loop.test:" + aport + "/quarantine/x"} {
		resp, _ := h.do("GET", u, nil, nil)
		if resp == nil || resp.StatusCode != 403 || resp.Header.Get("X-Egressd-Deny") != "proxy-loop" {
			t.Errorf("%s: %v, want 403 proxy-loop", u, resp)
		}
	}
	for _, a := range []string{"127.0.0.1:" + aport, "loop.test:" + aport} {
		if out := h.raw("CONNECT " + a + " HTTP/1.1\r\nHost: " + a + "\r\n\r\n"); !strings.HasPrefix(out, "HTTP/1.1 403") || !strings.Contains(out, "X-Egressd-Deny: proxy-loop") {
			t.Errorf("CONNECT %s: %.100q, want 403 proxy-loop", a, out)
		}
	}
	// a listener bound to all addresses: loopback, 0.0.0.0 and every
	// interface address on its port are egressd
	h.px.AddListener(&net.TCPAddr{IP: net.IPv6unspecified, Port: 5353})
	self := []string{"127.0.0.1:5353", "127.0.0.2:5353", "[::1]:5353", "0.0.0.0:5353"}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if pn, ok := a.(*net.IPNet); ok {
				self = append(self, net.JoinHostPort(pn.IP.String(), "5353"))
			}
		}
	}
	for _, s := range self {
		if !h.px.isSelf(netip.MustParseAddrPort(s)) {
			t.Errorf("%s is not proxy-loop", s)
		}
	}
	for _, s := range []string{"127.0.0.1:5354", "198.51.100.7:5353"} {
		if h.px.isSelf(netip.MustParseAddrPort(s)) {
			t.Errorf("%s is proxy-loop", s)
		}
	}
}

// TestViaProxy: the local end of an upstream connection is known while it
// is open (the admin endpoint refuses such clients).
func TestViaProxy(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	seen := make(chan netip.AddrPort, 1)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	release := make(chan struct{})
	go http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ap := netip.MustParseAddrPort(r.RemoteAddr)
		seen <- ap
		<-release
	}))
	_, p := splitPort(l.Addr().String())
	go h.do("GET", "http://127.0.0.1:"+p+"/", nil, nil)
	ap := <-seen
	if !h.px.ViaProxy(ap) {
		t.Errorf("the proxy's upstream %s is not recognised", ap)
	}
	if h.px.ViaProxy(netip.MustParseAddrPort("127.0.0.1:1")) {
		t.Errorf("an unrelated address is taken for the proxy")
	}
	close(release)
}

// helloWithDotSNI is a Go ClientHello whose SNI is "allowed.test." (Go's
// client strips the dot, so one letter is turned into it).
func helloWithDotSNI(t testing.TB) []byte {
	hello := recordHello(t, &tls.Config{ServerName: "allowed.testx"})
	i := bytes.Index(hello, []byte("allowed.testx"))
	if i < 0 {
		t.Fatal("no SNI in the recorded hello")
	}
	hello[i+len("allowed.testx")-1] = '.'
	return hello
}

// TestSNITrailingDot: a spliced tunnel whose ClientHello names the host
// with a trailing dot is the same host (normalized like hosts), not a
// refused hello; the client's own bytes go upstream.
func TestSNITrailingDot(t *testing.T) {
	t.Parallel()
	hello := helloWithDotSNI(t)
	h0, raw, err := peekClientHello(&memConn{r: bytes.NewReader(hello)}, 0)
	if err != nil || h0.ServerName != "allowed.test" || !bytes.Equal(raw, hello) {
		t.Fatalf("peek: %v %v, raw kept: %v", h0, err, bytes.Equal(raw, hello))
	}
	h := newHarness(t, testConfig, testNames)
	c := h.connect(t, "allowed.test:"+h.tlsO.port())
	c.Write(hello)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	// the origin (Go) refuses the dot itself: its alert is what shows the
	// hello got through egressd
	if n, _ := c.Read(make([]byte, 64)); n == 0 {
		t.Errorf("a hello for allowed.test. was cut in a tunnel to allowed.test")
	}
	if strings.Contains(h.logs.String(), `"reason":"no-client-hello"`) {
		t.Errorf("logged as no-client-hello")
	}
}

func FuzzStripSNIDot(f *testing.F) {
	f.Add(helloWithDotSNI(f))
	f.Add(recordHello(f, &tls.Config{ServerName: "allowed.test"}))
	f.Add([]byte{0x16, 3, 1, 0, 4, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, rec []byte) {
		out, ok := stripSNIDot(rec)
		if !ok {
			return
		}
		if len(out) != len(rec)-1 {
			t.Fatalf("out %d bytes from %d", len(out), len(rec))
		}
		if got := 5 + int(binary.BigEndian.Uint16(out[3:])); got != len(out) && got > len(out) {
			t.Fatalf("record length %d beyond %d bytes", got, len(out))
		}
		if _, again := stripSNIDot(out); again && bytes.Equal(out, rec) {
			t.Fatalf("no progress")
		}
	})
}

// TestStalledBodyCut: a client that sends a head and then stops sending
// its body is closed after limits.idle_timeout.
func TestStalledBodyCut(t *testing.T) {
	t.Parallel()
	cfg := strings.Replace(testConfig, "identities:\n", "limits:\n  idle_timeout: 300ms\nidentities:\n", 1)
	h := newHarness(t, cfg, testNames)
	port := h.plain.port()
	for _, host := range []string{"allowed.test", "unlisted.test"} { // allowed, and denied before the body is read
		c, err := net.Dial("tcp", h.proxyURL.Host)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST http://%s:%s/up HTTP/1.1\r\nHost: %s:%s\r\nContent-Length: 100\r\n\r\nabc", host, port, host, port)
		start := time.Now()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		io.ReadAll(c)
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("a stalled body to %s held its connection %s", host, took)
		}
	}
}
