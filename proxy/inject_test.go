package proxy

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// authOrigin answers 200 only with the right Authorization, records what
// each request carried, and redirects /redirect to another host.
type authOrigin struct {
	addr string
	mu   sync.Mutex
	seen []string // "host path auth"
}

func newAuthOrigin(t *testing.T, want *string, redirectTo *string) *authOrigin {
	t.Helper()
	o := &authOrigin{}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o.addr = l.Addr().String()
	srv := &http.Server{ErrorLog: log.New(io.Discard, "", 0), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		o.seen = append(o.seen, fmt.Sprintf("%s %s %s", r.Host, r.URL.Path, strings.Join(r.Header.Values("Authorization"), "|")))
		o.mu.Unlock()
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, *redirectTo, http.StatusFound)
			return
		}
		if r.Header.Get("Authorization") != *want {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		io.WriteString(w, "package bytes")
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return o
}

func (o *authOrigin) log() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.seen...)
}

const injectConfig = `
version: 1
resolver:
  upstreams: ["{DNS}"]
identities:
  - name: build
    user: build
    token_sha256: 2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881 # "x", the password basic() sends
  - name: research
    user: research
    token_sha256: 2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881
deny:
  message: "ask #platform; the internal mirror is https://mirror.example.net"
allow:
  - name: registry
    hosts: [registry.test]
    cidrs: [127.0.0.0/8]
    ports: ["1-65535"]
    identities: [build]
    inject: {prefix: "Bearer ", value_from: "file:{TOKEN}", plain_http: true}
    message: "registry: downloads only"
  - name: registry-tls
    hosts: [tlsreg.test]
    cidrs: [127.0.0.0/8]
    ports: ["1-65535"]
    inject: {prefix: "Bearer ", value_from: "file:{TOKEN}"}
  - name: other
    hosts: [other.test]
    cidrs: [127.0.0.0/8]
    ports: ["1-65535"]
    pages: ["*"]
`

func TestInjectCredential(t *testing.T) {
	t.Parallel()
	const secret = "tok-9f8e7d6c5b4a"
	dir := t.TempDir()
	tokFile := filepath.Join(dir, "registry-token")
	writeFile(t, tokFile, []byte(secret+"\n"))
	want := "Bearer " + secret
	var otherURL string
	reg := newAuthOrigin(t, &want, &otherURL)
	other := newAuthOrigin(t, &want, &otherURL)
	_, regPort := splitPort(reg.addr)
	_, otherPort := splitPort(other.addr)
	otherURL = "http://other.test:" + otherPort + "/stolen"
	h := newHarness(t, strings.ReplaceAll(injectConfig, "{TOKEN}", tokFile), map[string][]string{
		"registry.test": {"127.0.0.1"}, "other.test": {"127.0.0.1"}, "tlsreg.test": {"127.0.0.1"},
	})
	as := func(user string, extra map[string]string) map[string]string {
		m := map[string]string{"Proxy-Authorization": "Basic " + basic(user)}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	regURL := "http://registry.test:" + regPort

	// The sandbox holds no token: egressd adds it.
	resp, body := h.do("GET", regURL+"/pkg.tgz", nil, as("build", nil))
	if resp == nil || resp.StatusCode != 200 || body != "package bytes" {
		t.Fatalf("install as build: %v %q; want 200 with the injected token", resp, body)
	}
	// A token the sandbox brings is replaced, never forwarded.
	resp, _ = h.do("GET", regURL+"/pkg.tgz", nil, as("build", map[string]string{"Authorization": "Bearer attacker-account"}))
	if resp == nil || resp.StatusCode != 200 {
		t.Fatalf("own token: %v", resp)
	}
	// Another identity: the rule does not apply; the default deny with
	// the operator's message, and nothing reaches the registry.
	resp, body = h.do("GET", regURL+"/pkg.tgz", nil, as("research", nil))
	if resp == nil || resp.StatusCode != 403 || resp.Header.Get("X-Egressd-Deny") != "no-rule" || !strings.Contains(body, "ask #platform") {
		t.Errorf("as research: %v %q; want 403 no-rule with deny.message", resp, body)
	}
	// A redirect to another host: egressd does not follow it, and the
	// client's next request to that host carries no credential.
	resp, _ = h.do("GET", regURL+"/redirect", nil, as("build", nil))
	if resp == nil || resp.StatusCode != http.StatusFound {
		t.Fatalf("redirect: %v", resp)
	}
	resp, _ = h.do("GET", otherURL, nil, as("build", nil))
	if resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the redirected request reached other.test with %v; want 401 (no credential)", resp)
	}
	// TRACE would echo the credential back.
	resp, _ = h.do("TRACE", regURL+"/", nil, as("build", nil))
	if resp == nil || resp.StatusCode != 403 {
		t.Errorf("TRACE: %v; want 403", resp)
	}
	// Over a plain connection a rule without plain_http refuses rather
	// than send the credential in the clear; over TLS (inspected) it works.
	resp, _ = h.do("GET", "http://tlsreg.test:"+h.tlsO.port()+"/x", nil, as("build", nil))
	if resp == nil || resp.StatusCode != 403 || resp.Header.Get("X-Egressd-Deny") != "inject-cleartext" {
		t.Errorf("cleartext: %v; want 403 inject-cleartext", resp)
	}
	resp, body = h.do("GET", "https://tlsreg.test:"+h.tlsO.port()+"/x", nil, as("build", nil))
	if resp == nil || resp.StatusCode != 200 {
		t.Errorf("inspected tunnel: %v %q", resp, body)
	}

	for _, l := range reg.log() {
		if !strings.HasSuffix(l, " "+want) && !strings.Contains(l, "/redirect") {
			t.Errorf("registry saw %q; want exactly the injected credential", l)
		}
		if strings.Contains(l, "attacker-account") {
			t.Errorf("the sandbox's own token reached the registry: %q", l)
		}
	}
	for _, l := range other.log() {
		if strings.Contains(l, secret) {
			t.Errorf("the credential followed a redirect to other.test: %q", l)
		}
	}
	// The secret never reaches a log line.
	if strings.Contains(h.logs.String(), secret) {
		t.Errorf("the decision log holds the secret:\n%s", h.logs.String())
	}

	// Rotation: the next request carries the new secret.
	const rotated = "tok-rotated-0001"
	writeFile(t, tokFile+".new", []byte(rotated))
	if err := os.Rename(tokFile+".new", tokFile); err != nil {
		t.Fatal(err)
	}
	want = "Bearer " + rotated
	if resp, _ := h.do("GET", regURL+"/pkg.tgz", nil, as("build", nil)); resp == nil || resp.StatusCode != 200 {
		t.Errorf("after rotation: %v; want the new token", resp)
	}
	// A missing secret fails closed, and the error names the file only.
	os.Remove(tokFile)
	resp, body = h.do("GET", regURL+"/pkg.tgz", nil, as("build", nil))
	if resp == nil || resp.StatusCode != http.StatusBadGateway || resp.Header.Get("X-Egressd-Deny") != "inject-unavailable" {
		t.Errorf("missing secret: %v %q; want 502 inject-unavailable", resp, body)
	}
	if strings.Contains(h.logs.String(), rotated) {
		t.Error("the rotated secret reached a log line")
	}
}
