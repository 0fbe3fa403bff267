package proxy

import (
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/egressd/egressd/event"
	"github.com/egressd/egressd/policy"
)

// decisionLines counts the decision records in a log.
// decisionLines counts the decision lines of a log (a tunnel's open and
// close records share the message but are not decisions).
func decisionLines(log string) int {
	n := 0
	for l := range strings.SplitSeq(log, "\n") {
		if strings.Contains(l, `"msg":"`+event.Msg+`"`) && !strings.Contains(l, `"`+event.KeyTunnel+`":"`) {
			n++
		}
	}
	return n
}

// TestEveryRequestDecided: heads that net/http itself would answer with a
// bare 400/501/505/417 (malformed absolute-form targets in URL-confusion
// spellings, bad heads) are each one decision: X-Egressd-Deny, exactly one
// decision line, counted, and a metadata attempt in any spelling is
// counted high-risk and alerted even though it cannot be parsed.
func TestEveryRequestDecided(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	var mu sync.Mutex
	var alerts []Attempt
	h := newHarnessWith(t, testConfig, testNames, func(c *Config) {
		c.Registry = reg
		c.Alert = func(a Attempt) { mu.Lock(); alerts = append(alerts, a); mu.Unlock() }
	})
	port := h.plain.port()
	tests := []struct {
		name, head string
		reason     string
		highRisk   bool
	}{
		{"backslash before @", "GET http://169.254.169.254\\@allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n", "bad-target", true},
		{"fragment @", "GET http://169.254.169.254#@allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n", "bad-target", true},
		{"control char in host", "GET http://169.254.169.254\x01/ HTTP/1.1\r\nHost: x\r\n\r\n", "bad-target", true},
		{"space in target", "GET http://169.254.169.254 /x HTTP/1.1\r\nHost: x\r\n\r\n", "bad-target", true},
		{"decimal metadata with bad escape", "GET http://2852039166%zz/ HTTP/1.1\r\nHost: x\r\n\r\n", "bad-target", true},
		{"localhost tab", "GET http://localhost\t:" + port + "/ HTTP/1.1\r\nHost: x\r\n\r\n", "bad-target", true},
		{"non-ASCII Host", "GET http://allowed.test:" + port + "/ HTTP/1.1\r\nHost: \xe2\x91\xa0\xe2\x91\xa5\xe2\x91\xa8.254.169.254\r\n\r\n", "bad-request", true},
		{"bad host, public", "GET http://exa mple.test/ HTTP/1.1\r\nHost: x\r\n\r\n", "bad-target", false},
		{"unknown transfer coding", "POST http://allowed.test:" + port + "/ HTTP/1.1\r\nHost: allowed.test:" + port + "\r\nTransfer-Encoding: gzip\r\n\r\n", "bad-request", false},
		{"HTTP/2.0 line", "GET http://allowed.test:" + port + "/ HTTP/2.0\r\nHost: allowed.test\r\n\r\n", "bad-request", false},
		{"missing Host", "GET http://allowed.test:" + port + "/ HTTP/1.1\r\n\r\n", "bad-request", false},
		{"malformed header line", "GET http://allowed.test:" + port + "/ HTTP/1.1\r\nHost: allowed.test:" + port + "\r\nNo colon here\r\n\r\n", "bad-request", false},
		{"bad version", "GET http://allowed.test:" + port + "/ HTTX/1.1\r\nHost: allowed.test\r\n\r\n", "bad-request", false},
		{"unknown Expect", "GET http://allowed.test:" + port + "/ HTTP/1.1\r\nHost: allowed.test:" + port + "\r\nExpect: teapot\r\n\r\n", "bad-request", false},
		{"Transfer_Encoding", "POST http://allowed.test:" + port + "/ HTTP/1.1\r\nHost: allowed.test:" + port + "\r\nContent-Length: 5\r\nTransfer_Encoding: chunked\r\n\r\n0\r\n\r\n", "bad-request", false},
		{"content_length", "POST http://allowed.test:" + port + "/ HTTP/1.1\r\nHost: allowed.test:" + port + "\r\ncontent_length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "bad-request", false},
		{"userinfo net/http accepts", "GET http://allowed.test@169.254.169.254/ HTTP/1.1\r\nHost: 169.254.169.254\r\nConnection: close\r\n\r\n", "bad-target", true},
		{"CONNECT with userinfo", "CONNECT a@169.254.169.254:443 HTTP/1.1\r\nHost: 169.254.169.254:443\r\n\r\n", "bad-target", true},
		{"origin-form to a proxy", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "not-proxy-request", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mu.Lock()
			alerts = nil
			mu.Unlock()
			lines := decisionLines(h.logs.String())
			highRisk := sumMetric(t, reg, "egressd_high_risk_total")
			requests := sumMetric(t, reg, "egressd_requests_total")
			hits := h.plain.hits.Load()
			out := h.raw(tt.head)
			if want := "X-Egressd-Deny: " + tt.reason + "\r\n"; !strings.Contains(out, want) {
				t.Errorf("answer %.200q, want %q", out, want)
			}
			if n := decisionLines(h.logs.String()) - lines; n != 1 {
				t.Errorf("%d decision lines, want 1; log:\n%s", n, h.logs.String())
			}
			if n := sumMetric(t, reg, "egressd_requests_total") - requests; n != 1 {
				t.Errorf("egressd_requests_total grew by %v, want 1", n)
			}
			wantHR := 0.0
			if tt.highRisk {
				wantHR = 1
			}
			if n := sumMetric(t, reg, "egressd_high_risk_total") - highRisk; n != wantHR {
				t.Errorf("egressd_high_risk_total grew by %v, want %v", n, wantHR)
			}
			mu.Lock()
			got := len(alerts)
			mu.Unlock()
			if want := int(wantHR); got != want {
				t.Errorf("%d alerts, want %d", got, want)
			}
			if h.plain.hits.Load() != hits {
				t.Errorf("a refused head reached the origin")
			}
		})
	}
	// negative control: a plain good request is one allow line
	lines := decisionLines(h.logs.String())
	out := h.raw(fmt.Sprintf("GET http://allowed.test:%s/ HTTP/1.1\r\nHost: allowed.test:%s\r\nConnection: close\r\n\r\n", port, port))
	if !strings.HasPrefix(out, "HTTP/1.1 200") {
		t.Errorf("good request: %.200q", out)
	}
	if n := decisionLines(h.logs.String()) - lines; n != 1 {
		t.Errorf("good request: %d decision lines, want 1", n)
	}
}

// TestTunnelRequestsDecided: inside an inspected tunnel, heads the inner
// net/http server would refuse on its own are decisions too, and an
// origin-form target with "://" in its query is decided as the path it is
// (no false host-mismatch).
func TestTunnelRequestsDecided(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, head string
		status     string
		reason     string
	}{
		{"control char in path", "GET /a\x01b HTTP/1.1\r\nHost: docs.test:{PORT}\r\n\r\n", "403", "bad-target"},
		{"unknown transfer coding", "POST /guide HTTP/1.1\r\nHost: docs.test:{PORT}\r\nTransfer-Encoding: gzip\r\n\r\n", "400", "bad-request"},
		{"missing Host", "GET /guide HTTP/1.1\r\n\r\n", "400", "bad-request"},
		{"Transfer_Encoding", "POST /guide HTTP/1.1\r\nHost: docs.test:{PORT}\r\nContent-Length: 5\r\nTransfer_Encoding: chunked\r\n\r\n0\r\n\r\n", "400", "bad-request"},
		{"URL in the query", "GET /guide?u=https://example.com/x HTTP/1.1\r\nHost: docs.test:{PORT}\r\nConnection: close\r\n\r\n", "200", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, testConfig, testNames) // a log of its own
			port := h.tlsO.port()
			tt.head = strings.ReplaceAll(tt.head, "{PORT}", port)
			tc := h.inspectedTLS(t, "docs.test:"+port, "docs.test")
			defer tc.Close()
			io.WriteString(tc, tt.head)
			out, _ := io.ReadAll(tc)
			if !strings.HasPrefix(string(out), "HTTP/1.1 "+tt.status) {
				t.Errorf("answer %.200q, want %s", out, tt.status)
			}
			if tt.reason != "" && !strings.Contains(string(out), "X-Egressd-Deny: "+tt.reason+"\r\n") {
				t.Errorf("answer %.200q, want X-Egressd-Deny: %s", out, tt.reason)
			}
			tc.Close()
			// An inspected CONNECT is logged only when cut: the inner
			// request's line is the one.
			if _, err := h.logs.Wait(10*time.Second, nil, `"`+event.KeyDecision+`":"`); err != nil { // a decision, not the tunnel's open record
				t.Fatal(err)
			}
			if n := decisionLines(h.logs.String()); n != 1 {
				t.Errorf("%d decision lines, want 1; log:\n%s", n, h.logs.String())
			}
		})
	}
}

// TestLimitsFollowReload: net/http's limits follow a reload. A head
// within a raised limits.header_bytes passes (net/http's own limit was the
// one at start: a bare 431), and a shortened request_header_timeout ends a
// silent head on a server started under the old one.
func TestLimitsFollowReload(t *testing.T) {
	t.Parallel()
	cfg := strings.Replace(testConfig, "identities:\n", "limits:\n  request_header_timeout: 60s\nidentities:\n", 1)
	h := newHarness(t, cfg, testNames)
	port := h.plain.port()
	reload := func(limits string) {
		t.Helper()
		p, err := policy.Parse(strings.NewReader("version: 1\nlimits:\n"+limits+"allow:\n  - name: origin\n    cidrs: [127.0.0.0/8]\n    ports: [\"1-65535\"]\n    pages: [\"*\"]\n"), "reload.yaml")
		if err != nil {
			t.Fatal(err)
		}
		h.px.SetPolicy(p)
	}
	reload("  header_bytes: 131072\n  request_header_timeout: 60s\n")
	pad := strings.Repeat("X-Pad: "+strings.Repeat("a", 1000)+"\r\n", 64) // 64 KiB of head
	out := h.raw(fmt.Sprintf("GET http://127.0.0.1:%s/ HTTP/1.1\r\nHost: 127.0.0.1:%s\r\n%sConnection: close\r\n\r\n", port, port, pad))
	if !strings.HasPrefix(out, "HTTP/1.1 200") {
		t.Errorf("64 KiB head under a raised header_bytes of 128 KiB: %.200q, want 200", out)
	}

	reload("  request_header_timeout: 300ms\n")
	c, err := net.Dial("tcp", h.proxyURL.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET http://127.0.0.1:"+port+"/ HTTP/1.1\r\n") // and nothing more
	c.SetReadDeadline(time.Now().Add(10 * time.Second))              // a bound for a wedged test, not a wait
	start := time.Now()
	_, err = io.ReadAll(c)
	if err != nil || time.Since(start) > 5*time.Second {
		t.Errorf("silent head after a reload to request_header_timeout 300ms: closed after %v (%v), want well under 5s", time.Since(start), err)
	}
}

// TestNotReadyBodyReasonOnly: the 503 of the readiness gate tells the
// sandbox the reason code only; the daemon's detail (which rules, which
// probes leaked) goes to the log, where the operator reads it.
func TestNotReadyBodyReasonOnly(t *testing.T) {
	t.Parallel()
	const secret = "probe metadata-direct leaked under rule internal-billing"
	h := newHarnessWith(t, testConfig, testNames, func(c *Config) {
		c.Gate = func(*policy.Policy) (policy.Reason, string) {
			return policy.ReasonNotReady, "egressd is not ready: " + secret
		}
	})
	port := h.plain.port()
	for _, target := range []string{"http://allowed.test:" + port + "/", "https://allowed.test:" + h.tlsO.port() + "/"} {
		resp, body := h.do("GET", target, nil, nil)
		if resp == nil {
			// a refused CONNECT: the client reports the status line only,
			// whose reason phrase names the reason ("503 egressd not-ready")
			if !strings.Contains(body, "egressd not-ready") || strings.Contains(body, "internal-billing") {
				t.Errorf("%s: %s", target, body)
			}
			continue
		}
		if resp.StatusCode != 503 || resp.Header.Get("X-Egressd-Deny") != "not-ready" {
			t.Errorf("%s: %d %q, want 503 not-ready", target, resp.StatusCode, resp.Header.Get("X-Egressd-Deny"))
		}
		if strings.Contains(body, "internal-billing") || strings.Contains(body, "metadata-direct") {
			t.Errorf("%s: the 503 body tells the sandbox the daemon's state: %q", target, body)
		}
	}
	waitLog(t, h, secret)
	// the CONNECT's 503, read raw
	out := h.raw("CONNECT allowed.test:" + h.tlsO.port() + " HTTP/1.1\r\nHost: allowed.test:" + h.tlsO.port() + "\r\n\r\n")
	if !strings.HasPrefix(out, "HTTP/1.1 503") || strings.Contains(out, "internal-billing") {
		t.Errorf("CONNECT: %.300q, want a 503 without the daemon's detail", out)
	}
}

// TestGoErrorStatus: net/http's own answers are recognised; a handler's
// response with the same headers (Date among them) is not.
func TestGoErrorStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		p    string
		want int
	}{
		{"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request", 400},
		{"HTTP/1.1 400 Bad Request: missing required Host header\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request: missing required Host header", 400},
		{"HTTP/1.1 501 Not Implemented\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\nUnsupported transfer encoding", 501},
		{"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n431 Request Header Fields Too Large", 431},
		{"HTTP/1.1 400 Bad Request\r\nDate: Tue, 01 Dec 2026 21:00:00 GMT\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\nx", 0},
		{"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain; charset=utf-8\r\nDate: Tue, 01 Dec 2026 21:00:00 GMT\r\nConnection: close\r\n\r\n", 0},
		{"HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n", 0},
		{"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n", 0},
		{"HTTP/1.1 4", 0},
	}
	for _, tt := range tests {
		if got := goErrorStatus([]byte(tt.p)); got != tt.want {
			t.Errorf("goErrorStatus(%.60q) = %d, want %d", tt.p, got, tt.want)
		}
	}
}
