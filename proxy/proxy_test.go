package proxy

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/testutil"
)

const testConfig = `
version: 1
resolver:
  upstreams: ["{DNS}"]
allow:
  - name: origin
    hosts: [allowed.test, mixed.test, meta.test, private.test, rebind.test, loop.test]
    cidrs: [127.0.0.0/8]
    ports: ["1-65535"]
    pages: ["*"]
  - name: raw-ssh
    hosts: [ssh.test]
    cidrs: [127.0.0.0/8]
    ports: ["1-65535"]
    pages: ["*"]
    tls: false
  - name: pypi-mirror
    hosts: [pypi.test]
    cidrs: [127.0.0.0/8]
    ports: ["1-65535"]
    mirror: pypi
  - name: docs
    hosts: [docs.test]
    cidrs: [127.0.0.0/8]
    ports: ["1-65535"]
    pages: [read, download]
identities:
  - name: agent-a
    user: agent-a
    token_sha256: 2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881 # sha256("x"), basic()'s password
`

var testNames = map[string][]string{
	"allowed.test":  {"127.0.0.1"},
	"ssh.test":      {"127.0.0.1"},
	"pypi.test":     {"127.0.0.1"},
	"docs.test":     {"127.0.0.1"},
	"loop.test":     {"127.0.0.1"},
	"meta.test":     {"169.254.169.254"},
	"private.test":  {"10.0.0.5"},
	"mixed.test":    {"10.0.0.5", "127.0.0.1"},
	"rebind.test":   {"127.0.0.1", "169.254.169.254"},
	"unlisted.test": {"127.0.0.1"},
}

func TestPlainHTTP(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	port := h.plain.port()
	tests := []struct {
		name       string
		url        string
		wantStatus int
		wantReason string
		reachable  bool
	}{
		{"allowed", "http://allowed.test:" + port + "/hello", 200, "", true},
		{"allowed by cidr literal", "http://127.0.0.1:" + port + "/x", 200, "", true},
		{"unlisted host", "http://unlisted.test:" + port + "/", 403, "no-rule", false},
		{"name to metadata", "http://meta.test:" + port + "/latest/meta-data/", 403, "high-risk", false},
		{"name to private", "http://private.test:" + port + "/", 403, "special-address", false},
		{"one good one private answer", "http://mixed.test:" + port + "/", 200, "", true},
		{"rebinding pair with metadata", "http://rebind.test:" + port + "/", 403, "high-risk", false},
		{"proxy loop by address", "http://" + h.proxyURL.Host + "/", 403, "proxy-loop", false},
		{"upstream unreachable", "http://allowed.test:1/", 502, "upstream-unreachable", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := h.plain.hits.Load()
			resp, body := h.do("GET", tt.url, nil, nil)
			if resp == nil {
				t.Fatalf("no response: %s", body)
			}
			if resp.StatusCode != tt.wantStatus || resp.Header.Get("X-Egressd-Deny") != tt.wantReason {
				t.Fatalf("got %d %q (%s), want %d %q", resp.StatusCode, resp.Header.Get("X-Egressd-Deny"), body, tt.wantStatus, tt.wantReason)
			}
			if got := h.plain.hits.Load() - before; (got > 0) != tt.reachable {
				t.Errorf("origin saw %d requests, want reachable=%v", got, tt.reachable)
			}
			if tt.wantStatus == 403 && !strings.Contains(body, tt.wantReason) {
				t.Errorf("403 body %q does not name the reason", body)
			}
		})
	}
}

// TestMetadataSpellingsNeverDial sends metadata in many spellings through
// the proxy: each is a 403 and the proxy never even attempts a dial.
func TestMetadataSpellingsNeverDial(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	spellings := []string{
		"169.254.169.254", "0xA9FEA9FE", "2852039166", "0251.0376.0251.0376", "169.254.43518",
		"0xa9.0xfe.0xa9.0xfe", "169.16689662", "[::ffff:169.254.169.254]", "[::ffff:a9fe:a9fe]",
		"[64:ff9b::a9fe:a9fe]", "[2002:a9fe:a9fe::]", "[fd00:ec2::254]", "metadata.google.internal",
		"METADATA.google.internal.", "169.254.169.254.nip.io", "100.100.100.200", "169.254.170.2",
	}
	for _, s := range spellings {
		before := h.guard.attempts.Load()
		// raw request line: Go's client would normalise some spellings
		out := h.raw("GET http://" + s + "/latest/meta-data/ HTTP/1.1\r\nHost: " + s + "\r\nConnection: close\r\n\r\n")
		if !strings.HasPrefix(out, "HTTP/1.1 403") || !strings.Contains(out, "X-Egressd-Deny: high-risk") {
			t.Errorf("%s: got %.120q, want 403 high-risk", s, out)
		}
		if h.guard.attempts.Load() != before {
			t.Errorf("%s: the proxy attempted a dial", s)
		}
		out = h.raw("CONNECT " + s + ":443 HTTP/1.1\r\nHost: " + s + ":443\r\n\r\n")
		if !strings.HasPrefix(out, "HTTP/1.1 403") || !strings.Contains(out, "X-Egressd-Deny: high-risk") {
			t.Errorf("CONNECT %s: got %.120q, want 403 high-risk", s, out)
		}
	}
	if n := h.guard.attempts.Load(); n != 0 {
		t.Errorf("%d dial attempts, want 0", n)
	}
	if !strings.Contains(h.logs.String(), `"level":"WARN","msg":"decision"`) || !strings.Contains(h.logs.String(), `"high_risk":true`) {
		t.Errorf("high-risk hits not logged at warning level with high_risk=true")
	}
}

func TestConnectSplice(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	port := h.tlsO.port()
	resp, body := h.do("GET", "https://allowed.test:"+port+"/spliced", nil, nil)
	if resp == nil || resp.StatusCode != 200 || !strings.Contains(body, "/spliced") {
		t.Fatalf("allowed CONNECT: got %v %q", resp, body)
	}
	// the certificate came from the upstream CA: the tunnel was spliced, not inspected
	c := h.connect(t, "allowed.test:"+port)
	tc := tls.Client(c, &tls.Config{ServerName: "allowed.test", RootCAs: h.upCA.Pool()})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("spliced handshake: %v", err)
	}
	tc.Close()

	// unlisted → 403 with the reason, before any tunnel
	out := h.raw("CONNECT unlisted.test:" + port + " HTTP/1.1\r\nHost: unlisted.test:" + port + "\r\n\r\n")
	if !strings.HasPrefix(out, "HTTP/1.1 403") || !strings.Contains(out, "X-Egressd-Deny: no-rule") {
		t.Errorf("CONNECT unlisted: %.200q", out)
	}
}

func TestConnectSNIMismatch(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	port := h.tlsO.port()
	before := h.tlsO.hits.Load()
	for _, sni := range []string{"evil.test", "", "allowed.test.evil.test"} {
		c := h.connect(t, "allowed.test:"+port)
		tc := tls.Client(c, &tls.Config{ServerName: sni, InsecureSkipVerify: true})
		tc.SetDeadline(time.Now().Add(5 * time.Second))
		if err := tc.Handshake(); err == nil {
			t.Errorf("SNI %q in a tunnel to allowed.test: handshake succeeded, want refused", sni)
		}
		tc.Close()
	}
	if h.tlsO.hits.Load() != before {
		t.Errorf("the origin served a request through a fronted tunnel")
	}
	waitLog(t, h, `"reason":"sni-mismatch"`)
	// negative control: the right SNI passes the same path
	c := h.connect(t, "allowed.test:"+port)
	tc := tls.Client(c, &tls.Config{ServerName: "allowed.test", RootCAs: h.upCA.Pool()})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("matching SNI refused: %v", err)
	}
	tc.Close()
}

func TestConnectRawTCP(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	echo := testutil.EchoServer(t)
	_, port, _ := net.SplitHostPort(echo)
	c := h.connect(t, "ssh.test:"+port)
	defer c.Close()
	io.WriteString(c, "SSH-2.0-test\r\n")
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "SSH-2.0-test\r\n" {
		t.Fatalf("raw tunnel echo: %q %v", line, err)
	}
	// the same plaintext on a TLS rule is refused
	c2 := h.connect(t, "allowed.test:"+port)
	defer c2.Close()
	io.WriteString(c2, "SSH-2.0-test\r\n")
	c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, _ := c2.Read(make([]byte, 64)); n != 0 {
		t.Errorf("non-TLS bytes on a TLS rule were relayed")
	}
	waitLog(t, h, `"reason":"not-tls"`)
}

func TestInspectedMirror(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	port := h.tlsO.port()
	base := "https://pypi.test:" + port
	tests := []struct {
		method, path, ctype string
		body                string
		want                int
	}{
		{"GET", "/simple/requests/", "", "", 200},
		{"GET", "/pypi/requests/json", "", "", 200},
		{"POST", "/legacy/", "multipart/form-data; boundary=x", "--x--", 403},
		{"PUT", "/simple/requests/", "", "data", 403},
		{"GET", "/account/login/", "", "", 403},
		{"GET", "/simple/requests/?exfil=" + strings.Repeat("A", 300), "", "", 403},
	}
	for _, tt := range tests {
		t.Run(tt.method+tt.path[:min(len(tt.path), 30)], func(t *testing.T) {
			before := h.tlsO.hits.Load()
			var body io.Reader
			if tt.body != "" {
				body = strings.NewReader(tt.body)
			}
			resp, b := h.do(tt.method, base+tt.path, body, map[string]string{"Content-Type": tt.ctype})
			if resp == nil || resp.StatusCode != tt.want {
				t.Fatalf("got %v %q, want %d", resp, b, tt.want)
			}
			if resp.StatusCode == 200 && resp.TLS != nil {
				if issuer := resp.TLS.PeerCertificates[0].Issuer.CommonName; issuer != h.mitmCA.Certificate().Subject.CommonName {
					t.Errorf("inspected tunnel served a certificate from %q, not egressd's CA", issuer)
				}
			}
			if tt.want == 403 {
				if resp.Header.Get("X-Egressd-Deny") != "mirror" {
					t.Errorf("reason %q, want mirror", resp.Header.Get("X-Egressd-Deny"))
				}
				if h.tlsO.hits.Load() != before {
					t.Errorf("a denied mirror request reached the origin")
				}
			}
		})
	}
}

func TestInspectedPageTypes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	base := "https://docs.test:" + h.tlsO.port()
	tests := []struct {
		method, path, ctype string
		want                int
		page                string
	}{
		{"GET", "/guide/intro.html", "", 200, ""},
		{"GET", "/login", "", 403, "login"},
		{"GET", "/oauth/authorize?client_id=x&response_type=code", "", 403, "oauth"},
		{"POST", "/upload", "multipart/form-data; boundary=x", 403, "upload"},
		{"POST", "/comments", "application/x-www-form-urlencoded", 403, "posting"},
		{"GET", "/settings/admin", "", 403, "admin"},
		{"GET", "/guide/x?override", "override", 403, "X-HTTP-Method-Override"},
	}
	for _, tt := range tests {
		t.Run(tt.method+tt.path, func(t *testing.T) {
			var body io.Reader
			if tt.method == "POST" {
				body = strings.NewReader("--x--")
			}
			hdr := map[string]string{"Content-Type": tt.ctype}
			wantReason := "page-type"
			if tt.ctype == "override" {
				hdr = map[string]string{"X-HTTP-Method-Override": "DELETE"}
				wantReason = "method"
			}
			resp, b := h.do(tt.method, base+tt.path, body, hdr)
			if resp == nil || resp.StatusCode != tt.want {
				t.Fatalf("got %v %q, want %d", resp, b, tt.want)
			}
			if tt.want == 403 && (resp.Header.Get("X-Egressd-Deny") != wantReason || !strings.Contains(b, tt.page)) {
				t.Errorf("got reason %q body %q, want page-type naming %s", resp.Header.Get("X-Egressd-Deny"), b, tt.page)
			}
		})
	}
}

// TestInspectedHostMismatch: inside an inspected tunnel to docs.test, a
// request for another virtual host is refused.
func TestInspectedHostMismatch(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	port := h.tlsO.port()
	c := h.connect(t, "docs.test:"+port)
	pool := h.mitmCA.Pool()
	tc := tls.Client(c, &tls.Config{ServerName: "docs.test", RootCAs: pool})
	defer tc.Close()
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(tc, "GET /guide HTTP/1.1\r\nHost: allowed.test:%s\r\n\r\n", port)
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 400 || resp.Header.Get("X-Egressd-Deny") != "host-mismatch" {
		t.Errorf("got %d %q, want 400 host-mismatch", resp.StatusCode, resp.Header.Get("X-Egressd-Deny"))
	}
}

func TestSmuggling(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	port := h.plain.port()
	before := h.plain.hits.Load()
	tests := []struct{ name, req, reason string }{
		{"CL and TE", "POST http://allowed.test:" + port + "/ HTTP/1.1\r\nHost: allowed.test:" + port + "\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "bad-request"},
		{"Host mismatch", "GET http://allowed.test:" + port + "/ HTTP/1.1\r\nHost: meta.test\r\n\r\n", "host-mismatch"},
		{"two Hosts", "GET http://allowed.test:" + port + "/ HTTP/1.1\r\nHost: allowed.test\r\nHost: x\r\n\r\n", "bad-request"},
	}
	for _, tt := range tests {
		out := h.raw(tt.req)
		if !strings.HasPrefix(out, "HTTP/1.1 400") {
			t.Errorf("%s: got %.150q, want 400", tt.name, out)
		} else if !strings.Contains(out, "X-Egressd-Deny: "+tt.reason) && tt.name != "two Hosts" {
			t.Errorf("%s: got %.200q, want reason %s", tt.name, out, tt.reason)
		}
	}
	// a keep-alive connection: the scanner follows a chunked body to the next head
	out := h.raw("POST http://allowed.test:" + port + "/a HTTP/1.1\r\nHost: allowed.test:" + port + "\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n" +
		"GET http://allowed.test:" + port + "/b HTTP/1.1\r\nHost: allowed.test:" + port + "\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
	if !strings.Contains(out, "HTTP/1.1 200") || !strings.Contains(out, "HTTP/1.1 400") {
		t.Errorf("pipelined pair: got %.300q, want a 200 then a 400", out)
	}
	if got := h.plain.hits.Load() - before; got != 1 {
		t.Errorf("origin saw %d requests, want only the one clean request", got)
	}
	if out := h.raw("GET / HTTP/1.1\r\nHost: x\r\n\r\n"); !strings.HasPrefix(out, "HTTP/1.1 400") {
		t.Errorf("non-proxy request: %.100q, want 400", out)
	}
}

func TestQuarantineClosesTunnels(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	echo := testutil.EchoServer(t)
	_, port := splitPort(echo)
	c, err := net.Dial("tcp", h.proxyURL.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT ssh.test:%s HTTP/1.1\r\nHost: ssh.test\r\nProxy-Authorization: Basic %s\r\n\r\n", port, basic("agent-a"))
	br := bufio.NewReader(c)
	if line, _ := br.ReadString('\n'); !strings.Contains(line, "200") {
		t.Fatalf("CONNECT: %q", line)
	}
	br.ReadString('\n')
	io.WriteString(c, "ping\n")
	if l, _ := br.ReadString('\n'); l != "ping\n" {
		t.Fatalf("echo: %q", l)
	}
	if n := h.px.Quarantine("agent-a"); n != 1 {
		t.Errorf("Quarantine closed %d tunnels, want 1", n)
	}
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	var ne net.Error
	if _, err := br.ReadString('\n'); err == nil || errors.As(err, &ne) && ne.Timeout() {
		t.Errorf("the quarantined tunnel is still open (read: %v), want it closed", err)
	}
	resp, _ := h.do("GET", "http://allowed.test:"+h.plain.port()+"/", nil, map[string]string{"Proxy-Authorization": "Basic " + basic("agent-a")})
	if resp == nil || resp.StatusCode != 403 || resp.Header.Get("X-Egressd-Deny") != "quarantine" {
		t.Errorf("quarantined identity: got %v, want 403 quarantine", resp)
	}
	h.px.Lift("agent-a")
	resp, _ = h.do("GET", "http://allowed.test:"+h.plain.port()+"/", nil, map[string]string{"Proxy-Authorization": "Basic " + basic("agent-a")})
	if resp == nil || resp.StatusCode != 200 {
		t.Errorf("after lift: got %v, want 200", resp)
	}
}

func TestNotReady(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	h.ready.Store(false)
	before := h.plain.hits.Load()
	resp, _ := h.do("GET", "http://allowed.test:"+h.plain.port()+"/", nil, nil)
	if resp == nil || resp.StatusCode != 503 || h.plain.hits.Load() != before {
		t.Fatalf("got %v, want 503 and no upstream request while not ready", resp)
	}
	out := h.raw("CONNECT allowed.test:" + h.tlsO.port() + " HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	if !strings.HasPrefix(out, "HTTP/1.1 503") {
		t.Fatalf("CONNECT while not ready: %.100q, want 503", out)
	}
	// denials stay denials: never less safe, and they still explain themselves
	if resp, _ := h.do("GET", "http://unlisted.test:"+h.plain.port()+"/", nil, nil); resp == nil || resp.StatusCode != 403 {
		t.Fatalf("unlisted while not ready: %v, want 403", resp)
	}
	// an exempt connection (the self-test's probes) passes the gate
	h.px.exempt = func(_, _ netip.AddrPort) bool { return true }
	if resp, _ := h.do("GET", "http://allowed.test:"+h.plain.port()+"/", nil, nil); resp == nil || resp.StatusCode != 200 {
		t.Fatalf("exempt connection while not ready: %v, want 200", resp)
	}
	h.px.exempt = nil
	h.ready.Store(true)
	if resp, _ := h.do("GET", "http://allowed.test:"+h.plain.port()+"/", nil, nil); resp == nil || resp.StatusCode != 200 {
		t.Fatalf("got %v, want 200 once ready", resp)
	}
}

func TestUpstreamTimeout(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig+"limits:\n  response_header_timeout: 200ms\n", testNames)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() { // accept and say nothing
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	_, port := splitPort(l.Addr().String())
	resp, body := h.do("GET", "http://allowed.test:"+port+"/", nil, nil)
	if resp == nil || resp.StatusCode != 504 {
		t.Fatalf("got %v %q, want 504", resp, body)
	}
}

func TestDecisionLogLine(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	h.do("GET", "http://allowed.test:"+h.plain.port()+"/logged", nil, nil)
	line := waitLog(t, h, `"path":"/logged"`)
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"time", "identity", "method", "host", "port", "path", "page_type", "rule", "decision", "reason", "bytes"} {
		if _, ok := m[k]; !ok {
			t.Errorf("decision line lacks %q: %s", k, line)
		}
	}
	if m["decision"] != "allow" || m["rule"] != "origin" || m["bytes"].(float64) == 0 {
		t.Errorf("decision line: %s", line)
	}
}

// TestCurl runs the real curl binary through the proxy.
func TestCurl(t *testing.T) {
	t.Parallel()
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl not installed (apt-get install -y curl)")
	}
	h := newHarness(t, testConfig, testNames)
	run := func(args ...string) (string, string) {
		args = append([]string{"-s", "-o", "/dev/null", "-w", "%{http_code} %header{x-egressd-deny}", "--proxy", h.proxyURL.String(), "--max-time", "10", "--noproxy", ""}, args...)
		out, err := exec.Command(curl, args...).Output()
		return strings.TrimSpace(string(out)), fmt.Sprint(err)
	}
	if got, _ := run("http://allowed.test:" + h.plain.port() + "/"); got != "200" {
		t.Errorf("curl allowed: %q", got)
	}
	if got, _ := run("http://unlisted.test:" + h.plain.port() + "/"); got != "403 no-rule" {
		t.Errorf("curl unlisted: %q", got)
	}
	if got, _ := run("http://0xA9FEA9FE/latest/meta-data/"); got != "403 high-risk" {
		t.Errorf("curl metadata hex: %q", got)
	}
	caFile := t.TempDir() + "/ca.pem"
	writeFile(t, caFile, h.upCA.CertPEM())
	if got, _ := run("--cacert", caFile, "https://allowed.test:"+h.tlsO.port()+"/"); got != "200" {
		t.Errorf("curl CONNECT allowed: %q", got)
	}
}

func waitLog(t *testing.T, h *harness, substr string) string {
	t.Helper()
	line, err := h.logs.Wait(10*time.Second, nil, substr)
	if err != nil {
		t.Fatalf("%v in:\n%s", err, h.logs.String())
	}
	return line
}

// TestQuarantineHoldsAcrossUserLabels: the Proxy-Authorization user is a
// label the client picks, and it chose the identity the quarantine looked
// up: a quarantined address (or the identity its cidrs give) walked out by
// sending any user name.
func TestQuarantineHoldsAcrossUserLabels(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ cfg, quarantine string }{
		{testConfig + "  - name: sandbox\n    cidrs: [127.0.0.1/32]\n", "sandbox"}, // by cidrs
		{testConfig, "127.0.0.1"}, // no identity: by address
	} {
		h := newHarness(t, c.cfg, testNames)
		url := "http://allowed.test:" + h.plain.port() + "/"
		h.px.Quarantine(c.quarantine)
		for _, user := range []string{"", "fresh-label", "agent-a"} {
			hdr := map[string]string{}
			if user != "" {
				hdr["Proxy-Authorization"] = "Basic " + basic(user)
			}
			resp, _ := h.do("GET", url, nil, hdr)
			if resp == nil || resp.StatusCode != 403 || resp.Header.Get("X-Egressd-Deny") != "quarantine" {
				t.Errorf("quarantined %s, user %q: got %v, want 403 quarantine", c.quarantine, user, resp)
			}
		}
	}
}
