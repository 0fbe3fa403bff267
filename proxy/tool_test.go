package proxy

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/egressd/egressd/event"
	"github.com/egressd/egressd/honeytoken"
)

// toolRequest is a request the tool endpoint makes for a caller at remote.
func toolRequest(t *testing.T, method, rawURL, remote string) *http.Request {
	t.Helper()
	r := httptest.NewRequest(method, rawURL, nil)
	r.RequestURI = rawURL
	r.RemoteAddr = remote
	return r
}

// TestServeToolIsAProxyRequest: a fetch made by the tool endpoint goes
// through the checkpoint under the caller's identity: the same decision,
// dial and log line, marked via: tool, and counted like any request (a
// high-risk attempt too).
func TestServeToolIsAProxyRequest(t *testing.T) {
	t.Parallel()
	cfg := testConfig + "  - name: agent\n    cidrs: [127.0.0.7/32]\n"
	h := newHarness(t, cfg, testNames)
	port := h.plain.port()
	tests := []struct {
		name, url  string
		wantStatus int
		wantReason string
		body       string
	}{
		{"allowed", "http://allowed.test:" + port + "/page", 200, "", "origin says hi to GET /page"},
		{"unlisted", "http://unlisted.test:" + port + "/", 403, "no-rule", "egressd: denied: no-rule"},
		{"metadata", "http://169.254.169.254/latest/meta-data/", 403, "high-risk", "egressd: denied: high-risk"},
		{"metadata by name", "http://meta.test:" + port + "/", 403, "high-risk", "egressd: denied"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			h.px.ServeTool(w, toolRequest(t, "GET", tc.url, "127.0.0.7:40000"))
			if w.Code != tc.wantStatus || w.Header().Get("X-Egressd-Deny") != tc.wantReason || !strings.Contains(w.Body.String(), tc.body) {
				t.Fatalf("got %d %q %q, want %d %q %q", w.Code, w.Header().Get("X-Egressd-Deny"), w.Body.String(), tc.wantStatus, tc.wantReason, tc.body)
			}
		})
	}
	// ServeTool returns after the decision is logged (an allowed one when
	// goproxy closes the body)
	lines := h.logs.String()
	var n int
	for l := range strings.SplitSeq(lines, "\n") {
		if !strings.Contains(l, `"msg":"decision"`) {
			continue
		}
		var rec event.Record
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatal(err)
		}
		n++
		if rec.Via != event.ViaTool || rec.Identity != "agent" {
			t.Errorf("decision %s: via %q identity %q, want via %q identity agent", l, rec.Via, rec.Identity, event.ViaTool)
		}
	}
	if n != len(tests) {
		t.Errorf("%d decision lines, want %d:\n%s", n, len(tests), lines)
	}
	if got := counter(h.px.m.highRisk); got != 2 {
		t.Errorf("egressd_high_risk_total = %v, want 2", got)
	}
	if got := counter(h.px.m.tools.WithLabelValues("deny", "high-risk")); got != 2 {
		t.Errorf("egressd_tool_calls_total{deny,high-risk} = %v, want 2", got)
	}
	if got := counter(h.px.m.tools.WithLabelValues("allow", "allowed")); got != 1 {
		t.Errorf("egressd_tool_calls_total{allow,allowed} = %v, want 1", got)
	}
}

// TestToolGate: with tools.identities set, a caller of another identity
// is refused (403 tool-refused, logged via tool), a listed one passes, and
// ServeTool refuses the unlisted one too.
func TestToolGate(t *testing.T) {
	t.Parallel()
	cfg := testConfig + "  - name: agent\n    cidrs: [127.0.0.7/32]\n  - name: other\n    cidrs: [127.0.0.8/32]\ntools:\n  listen: 127.0.0.1:0\n  identities: [agent]\n"
	h := newHarness(t, cfg, testNames)
	if r := toolRequest(t, "POST", "http://127.0.0.1/mcp", "127.0.0.7:1"); !h.px.ToolGate(httptest.NewRecorder(), r) {
		t.Error("agent was refused the tools")
	}
	w := httptest.NewRecorder()
	if h.px.ToolGate(w, toolRequest(t, "POST", "http://127.0.0.1/mcp", "127.0.0.8:1")) {
		t.Fatal("other was let through the tool gate")
	}
	if w.Code != 403 || w.Header().Get("X-Egressd-Deny") != "tool-refused" {
		t.Errorf("refusal %d %q", w.Code, w.Header().Get("X-Egressd-Deny"))
	}
	waitLog(t, h, `"reason":"tool-refused"`)
	// an in-sandbox probe's session passes the gate; each of its fetches
	// is then refused unless it is a live probe run's request to a target
	// of its plan (none here)
	r := toolRequest(t, "POST", "http://127.0.0.1/mcp", "127.0.0.8:1")
	r.Header.Set("User-Agent", ProbeUserAgentPrefix+"not-a-live-token")
	if !h.px.ToolGate(httptest.NewRecorder(), r) {
		t.Error("a probe run's session was refused at the gate")
	}
	r = toolRequest(t, "GET", "http://allowed.test:"+h.plain.port()+"/", "127.0.0.8:1")
	r.Header.Set("User-Agent", ProbeUserAgentPrefix+"not-a-live-token")
	w = httptest.NewRecorder()
	h.px.ServeTool(w, r)
	if w.Code != 403 || w.Header().Get("X-Egressd-Deny") != "tool-refused" {
		t.Errorf("an unverified probe label's fetch: %d %q, want 403 tool-refused", w.Code, w.Header().Get("X-Egressd-Deny"))
	}
	w = httptest.NewRecorder()
	h.px.ServeTool(w, toolRequest(t, "GET", "http://allowed.test:"+h.plain.port()+"/", "127.0.0.8:1"))
	if w.Code != 403 || w.Header().Get("X-Egressd-Deny") != "tool-refused" || h.plain.hits.Load() != 0 {
		t.Errorf("ServeTool for other: %d %q, origin hits %d", w.Code, w.Header().Get("X-Egressd-Deny"), h.plain.hits.Load())
	}
}

func counter(c prometheus.Counter) float64 {
	var m dto.Metric
	c.Write(&m)
	return m.GetCounter().GetValue()
}

// TestServeToolHTTPSInjectAndMessage: a tool fetch of an https URL is
// sent over TLS verified against the upstream roots; a rule's inject
// applies for the token identity the tool's caller proves (the tool
// holds no credential); the operator's message reaches the denial.
func TestServeToolHTTPSInjectAndMessage(t *testing.T) {
	t.Parallel()
	const secret = "tok-tool-1234"
	tokFile := filepath.Join(t.TempDir(), "token")
	writeFile(t, tokFile, []byte(secret+"\n"))
	want := "Bearer " + secret
	var nowhere string
	reg := newAuthOrigin(t, &want, &nowhere)
	_, regPort := splitPort(reg.addr)
	h := newHarness(t, strings.ReplaceAll(injectConfig, "{TOKEN}", tokFile), map[string][]string{
		"registry.test": {"127.0.0.1"}, "other.test": {"127.0.0.1"}, "allowed.test": {"127.0.0.1"},
	})
	as := func(r *http.Request, user string) *http.Request {
		r.Header.Set("Proxy-Authorization", "Basic "+basic(user))
		return r
	}
	w := httptest.NewRecorder()
	h.px.ServeTool(w, as(toolRequest(t, "GET", "http://registry.test:"+regPort+"/pkg.tgz", "127.0.0.1:1"), "build"))
	if w.Code != 200 || w.Body.String() != "package bytes" {
		t.Errorf("registry as build via the tool: %d %q, want the injected token's 200", w.Code, w.Body.String())
	}
	w = httptest.NewRecorder()
	h.px.ServeTool(w, as(toolRequest(t, "GET", "http://registry.test:"+regPort+"/pkg.tgz", "127.0.0.1:1"), "research"))
	if w.Code != 403 || !strings.Contains(w.Body.String(), "ask #platform") {
		t.Errorf("registry as research via the tool: %d %q, want 403 with deny.message", w.Code, w.Body.String())
	}
	w = httptest.NewRecorder()
	h.px.ServeTool(w, toolRequest(t, "GET", "https://other.test:"+h.tlsO.port()+"/secure", "127.0.0.1:1"))
	if w.Code != 200 || !strings.Contains(w.Body.String(), "origin says hi to GET /secure") {
		t.Errorf("https via the tool: %d %q", w.Code, w.Body.String())
	}
}

// TestToolFetchHoneytoken: a fetch egressd's tool endpoint makes for a
// caller is scanned for honeytokens like any request (the tool sends it
// through the checkpoint): a canary in its URL, even under a rule that
// allows the host, is refused with reason honeytoken, logged via tool and
// alerted naming the identity it was issued to; the same fetch without it
// passes.
func TestToolFetchHoneytoken(t *testing.T) {
	t.Parallel()
	reg := honeytoken.NewRegistry()
	ts, err := honeytoken.Issue("sandbox-9")
	if err != nil {
		t.Fatal(err)
	}
	reg.Set("run", ts)
	alerted := make(chan Attempt, 4)
	h := newHarnessWith(t, testConfig, testNames, func(c *Config) {
		c.Honeytokens = reg
		c.Alert = func(a Attempt) { alerted <- a }
	})
	base := "http://allowed.test:" + h.plain.port() + "/search?q="
	w := httptest.NewRecorder()
	h.px.ServeTool(w, toolRequest(t, "GET", base+"ok", "127.0.0.1:40000"))
	if w.Code != 200 {
		t.Fatalf("a fetch without a canary: %d %q", w.Code, w.Body.String())
	}
	w = httptest.NewRecorder()
	h.px.ServeTool(w, toolRequest(t, "GET", base+ts[0].Value, "127.0.0.1:40001"))
	if w.Code != 403 || w.Header().Get("X-Egressd-Deny") != "honeytoken" {
		t.Fatalf("a fetch carrying a canary: %d %q %q, want 403 honeytoken", w.Code, w.Header().Get("X-Egressd-Deny"), w.Body.String())
	}
	line := waitLog(t, h, `"reason":"honeytoken"`)
	if !strings.Contains(line, `"via":"tool"`) || !strings.Contains(line, `"honeytoken_of":"sandbox-9"`) {
		t.Errorf("decision line %s: want via tool and the canary's owner", line)
	}
	waitAlert(t, alerted)
}
