package proxy

import (
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/honeytoken"
)

const honeyConfig = `
version: 1
resolver:
  upstreams: ["{DNS}"]
allow:
  - name: origin
    hosts: [allowed.test]
    cidrs: [127.0.0.0/8]
    ports: ["1-65535"]
    pages: ["*"]
  - name: jira
    hosts: [jira.test]
    cidrs: [127.0.0.0/8]
    ports: ["1-65535"]
    pages: [read]
    read_posts: [jira-search]
  - name: wild
    hosts: ["*.wild.test"]
    cidrs: [127.0.0.0/8]
    ports: ["1-65535"]
    pages: ["*"]
`

// TestHoneytokenRefused: a canary credential in the query, the path, a
// header, Basic credentials, a read-POST's JSON body or a CONNECT name is
// refused with reason honeytoken, whatever the rule allows, and alerted
// with the identity it was issued to, its kind and where it was; the same
// requests without it pass.
func TestHoneytokenRefused(t *testing.T) {
	t.Parallel()
	reg := honeytoken.NewRegistry()
	ts, err := honeytoken.Issue("sandbox-7")
	if err != nil {
		t.Fatal(err)
	}
	reg.Set("run", ts)
	aws, secret, gh, api := ts[0].Value, ts[1].Value, ts[2].Value, ts[3].Value
	var mu sync.Mutex
	var alerts []Attempt
	alerted := make(chan struct{}, 64) // an alert follows its decision line and the client's answer
	h := newHarnessWith(t, honeyConfig, map[string][]string{"allowed.test": {"127.0.0.1"}, "jira.test": {"127.0.0.1"}, "x.wild.test": {"127.0.0.1"}}, func(c *Config) {
		c.Honeytokens = reg
		c.Alert = func(a Attempt) { mu.Lock(); alerts = append(alerts, a); mu.Unlock(); alerted <- struct{}{} }
	})
	port := h.plain.port()
	base := "http://allowed.test:" + port
	jira := "http://jira.test:" + port + "/rest/api/2/search"
	tests := []struct {
		name, method, url, body string
		hdr                     map[string]string
		kind, where             string // "" when allowed
	}{
		{"query, allowed host", "GET", base + "/search?q=x&key=" + aws, "", nil, "aws-access-key-id", "query"},
		{"query without it", "GET", base + "/search?q=x&key=abc", "", nil, "", ""},
		{"path", "GET", base + "/u/" + gh + "/repos", "", nil, "github-token", "path"},
		{"header", "GET", base + "/", "", map[string]string{"X-Api-Key": api}, "api-key", "header X-Api-Key"},
		{"header without it", "GET", base + "/", "", map[string]string{"X-Api-Key": "not-a-canary"}, "", ""},
		{"signed-looking authorization", "GET", base + "/", "", map[string]string{"Authorization": "AWS4-HMAC-SHA256 Credential=" + aws + "/20261201/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00"}, "aws-access-key-id", "header Authorization"},
		{"basic credentials", "GET", base + "/", "", map[string]string{"Authorization": "Basic " + b64("x-access-token:"+gh)}, "github-token", "header Authorization"},
		{"read-POST json body", "POST", jira, `{"jql":"project = X AND text ~ \"` + secret + `\"","maxResults":10}`, map[string]string{"Content-Type": "application/json"}, "aws-secret-access-key", "body"},
		{"read-POST json body without it", "POST", jira, `{"jql":"project = X","maxResults":10}`, map[string]string{"Content-Type": "application/json"}, "", ""},
		{"host under a wildcard, lower case", "GET", "http://" + strings.ToLower(aws) + ".wild.test:" + port + "/", "", nil, "aws-access-key-id", "host"},
		{"query, percent-escaped", "GET", base + "/search?key=%" + fmt.Sprintf("%02x", aws[0]) + aws[1:], "", nil, "aws-access-key-id", "query"},
		{"query, double-escaped", "GET", base + "/search?key=%25" + fmt.Sprintf("%02X", aws[0]) + aws[1:], "", nil, "aws-access-key-id", "query"},
		{"path, percent-escaped", "GET", base + "/u/%" + fmt.Sprintf("%02X", gh[0]) + gh[1:], "", nil, "github-token", "path"},
		{"cookie, percent-escaped", "GET", base + "/", "", map[string]string{"Cookie": "s=%" + fmt.Sprintf("%02x", api[0]) + api[1:]}, "api-key", "header Cookie"},
		{"query, base64", "GET", base + "/search?d=" + b64("key="+secret), "", nil, "aws-secret-access-key", "query"},
		{"host, split over labels", "GET", "http://" + strings.ToLower(aws[:9]+"."+aws[9:]) + ".wild.test:" + port + "/", "", nil, "aws-access-key-id", "host"},
		{"denied host: still honeytoken", "GET", "http://unlisted.test:" + port + "/?k=" + api, "", nil, "api-key", "query"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mu.Lock()
			alerts = nil
			mu.Unlock()
			var body io.Reader
			if tt.body != "" {
				body = strings.NewReader(tt.body)
			}
			resp, text := h.do(tt.method, tt.url, body, tt.hdr)
			if tt.kind == "" {
				if resp == nil || resp.StatusCode != 200 {
					t.Fatalf("without a canary: %v %s", resp, text)
				}
				return
			}
			if resp == nil || resp.StatusCode != 403 || resp.Header.Get("X-Egressd-Deny") != "honeytoken" || !strings.Contains(text, tt.kind) {
				t.Fatalf("got %v %q, want 403 honeytoken naming %s", resp, text, tt.kind)
			}
			waitAlert(t, alerted)
			mu.Lock()
			defer mu.Unlock()
			if len(alerts) != 1 || alerts[0].Honeytoken != tt.kind || alerts[0].HoneytokenOf != "sandbox-7" || alerts[0].Where != tt.where || alerts[0].Reason != "honeytoken" {
				t.Fatalf("alerts %+v, want one naming %s in %s", alerts, tt.kind, tt.where)
			}
		})
	}
	// the decision line names kind, owner and place
	line := waitLog(t, h, `"honeytoken_where":"body"`)
	var rec map[string]any
	json.Unmarshal([]byte(line), &rec)
	if rec["honeytoken"] != "aws-secret-access-key" || rec["honeytoken_of"] != "sandbox-7" || rec["reason"] != "honeytoken" {
		t.Fatalf("decision line %s", line)
	}
	// a CONNECT to a name carrying one is refused before any tunnel
	c, err := net.Dial("tcp", h.proxyURL.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "CONNECT %s.wild.test:443 HTTP/1.1\r\nHost: x\r\n\r\n", strings.ToLower(gh))
	buf := make([]byte, 512)
	n, _ := c.Read(buf)
	if !strings.HasPrefix(string(buf[:n]), "HTTP/1.1 403") || !strings.Contains(string(buf[:n]), "X-Egressd-Deny: honeytoken") {
		t.Fatalf("CONNECT with a canary label: %q", buf[:n])
	}
}

// waitAlert waits for the next alert: it is raised after the decision line
// is written and the client answered, so a test that looked at once would
// race it.
func waitAlert[T any](t *testing.T, alerted <-chan T) {
	t.Helper()
	select {
	case <-alerted:
	case <-time.After(10 * time.Second):
		t.Fatal("no alert within 10 s")
	}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// TestHoneytokenSNI: on the transparent TLS listener the SNI names the
// host; a canary label in it is refused (the handshake fails) and logged
// and alerted with where "sni", even under an allowing wildcard rule.
func TestHoneytokenSNI(t *testing.T) {
	t.Parallel()
	reg := honeytoken.NewRegistry()
	ts, _ := honeytoken.Issue("sandbox-8")
	reg.Set("run", ts)
	var mu sync.Mutex
	var alerts []Attempt
	alerted := make(chan struct{}, 64) // an alert follows its decision line and the client's answer
	h := newHarnessWith(t, honeyConfig, map[string][]string{"x.wild.test": {"127.0.0.1"}}, func(c *Config) {
		c.Honeytokens = reg
		c.Alert = func(a Attempt) { mu.Lock(); alerts = append(alerts, a); mu.Unlock(); alerted <- struct{}{} }
	})
	addr := transparentListen(t, h.px.ServeTransparentTLS, h.tlsO.port())
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	sni := strings.ToLower(ts[3].Value) + ".wild.test"
	if err := tls.Client(c, &tls.Config{ServerName: sni, RootCAs: h.upCA.Pool()}).Handshake(); err == nil {
		t.Fatal("a handshake with a canary in the SNI succeeded")
	}
	line := waitLog(t, h, `"honeytoken_where":"sni"`)
	if !strings.Contains(line, `"reason":"honeytoken"`) || !strings.Contains(line, `"honeytoken":"api-key"`) {
		t.Fatalf("log line %s", line)
	}
	waitAlert(t, alerted)
	mu.Lock()
	defer mu.Unlock()
	if len(alerts) != 1 || alerts[0].Where != "sni" || alerts[0].HoneytokenOf != "sandbox-8" {
		t.Fatalf("alerts %+v", alerts)
	}
}

// TestReadBodyUnknownCoding: a body egressd reads (a read-POST, a mirror
// protocol read) is read in the one coding it inflates (gzip); a body
// under any other Content-Encoding would reach the server decoded into
// bytes no check read, so it is refused.
func TestReadBodyUnknownCoding(t *testing.T) {
	t.Parallel()
	h := newHarnessWith(t, honeyConfig, map[string][]string{"jira.test": {"127.0.0.1"}}, nil)
	jira := "http://jira.test:" + h.plain.port() + "/rest/api/2/search"
	body := `{"jql":"project = X","maxResults":10}`
	for _, tc := range []struct {
		coding string
		want   int
	}{{"", 200}, {"identity", 200}, {"deflate", 403}, {"br", 403}, {"gzip, deflate", 403}, {"x-custom", 403}} {
		hdr := map[string]string{"Content-Type": "application/json"}
		if tc.coding != "" {
			hdr["Content-Encoding"] = tc.coding
		}
		resp, text := h.do("POST", jira, strings.NewReader(body), hdr)
		if resp == nil || resp.StatusCode != tc.want {
			t.Errorf("Content-Encoding %q: %v %q, want %d", tc.coding, resp, text, tc.want)
		}
	}
}
