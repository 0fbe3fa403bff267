package proxy

import (
	"bytes"
	"compress/gzip"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestHeaderBudgetLive is issue 12 item 3 through the live proxy: a read
// rule refuses a request whose headers are over limits.read_head_bytes
// (reason header-budget), and a mirror rule forwards only its ecosystem's
// headers.
func TestHeaderBudgetLive(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []http.Header
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Clone())
		mu.Unlock()
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	_, port, _ := net.SplitHostPort(l.Addr().String())
	h := newHarness(t, testConfig, testNames)

	big := strings.Repeat("A", 30<<10)
	resp, body := h.do("GET", "http://docs.test:"+port+"/guide", nil, map[string]string{"X-Exfil": big})
	if resp == nil || resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-Egressd-Deny") != "header-budget" {
		t.Errorf("30 KB header on a read rule: %v %q, want 403 header-budget", resp, body)
	}
	resp, body = h.do("GET", "http://pypi.test:"+port+"/simple/requests/", nil, map[string]string{"X-Exfil": big, "Cookie": "session=secret", "User-Agent": "pip/24.0"})
	if resp == nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("pypi mirror read with extra headers: %v %q, want 200 with them dropped", resp, body)
	}
	resp, body = h.do("GET", "http://pypi.test:"+port+"/simple/flask/", nil, map[string]string{"User-Agent": strings.Repeat("U", 20<<10)})
	if resp == nil || resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-Egressd-Deny") != "header-budget" {
		t.Errorf("20 KB User-Agent on a mirror rule: %v %q, want 403 header-budget", resp, body)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 {
		t.Fatalf("origin saw %d requests, want 1 (the mirror read)", len(seen))
	}
	if seen[0].Get("X-Exfil") != "" || seen[0].Get("Cookie") != "" || seen[0].Get("User-Agent") != "pip/24.0" {
		t.Errorf("mirror forwarded %v", seen[0])
	}
}

// TestGitBodyForwardedAsChecked: a gzip upload-pack body was checked
// inflated but forwarded as sent, so its gzip header (file name, comment,
// extra field: free bytes up to the body cap) reached the server
// unchecked. The body forwarded is the one checked.
func TestGitBodyForwardedAsChecked(t *testing.T) {
	t.Parallel()
	var got []byte
	var gotEnc string
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = io.ReadAll(r.Body)
		gotEnc = r.Header.Get("Content-Encoding")
	}))
	defer origin.Close()
	_, port := splitPort(origin.Listener.Addr().String())
	cfg := "version: 1\nresolver:\n  upstreams: [\"{DNS}\"]\nallow:\n  - name: git\n    hosts: [git.test]\n    cidrs: [127.0.0.0/8]\n    ports: [\"1-65535\"]\n    mirror: git\n"
	h := newHarness(t, cfg, map[string][]string{"git.test": {"127.0.0.1"}})
	const plain = "0014command=ls-refs\n0000"
	const secret = "EXFIL-gzip-header-comment"
	for _, withEncoding := range []bool{true, false} {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Comment, zw.Name, zw.Extra = secret, secret, []byte(secret)
		io.WriteString(zw, plain)
		zw.Close()
		hdr := map[string]string{"Content-Type": "application/x-git-upload-pack-request"}
		if withEncoding {
			hdr["Content-Encoding"] = "gzip"
		}
		got, gotEnc = nil, ""
		resp, body := h.do("POST", "http://git.test:"+port+"/r.git/git-upload-pack", bytes.NewReader(buf.Bytes()), hdr)
		if resp == nil {
			t.Fatalf("POST: %s", body)
		}
		if resp.StatusCode == 200 && bytes.Contains(got, []byte(secret)) {
			t.Errorf("Content-Encoding %v: the gzip header's free fields reached the server", withEncoding)
		}
		if resp.StatusCode == 200 && (string(got) != plain || gotEnc != "") {
			t.Errorf("Content-Encoding %v: server got %q (encoding %q), want the checked body %q unencoded", withEncoding, got, gotEnc, plain)
		}
	}
}
