package tools_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/egressd/egressd/event"
)

// TestGoSDKClient: the official Go SDK's client lists the fetch tool,
// fetches an allowed page as Markdown, and gets tool errors with the
// reason for the metadata address and an unlisted host; each call is a
// decision line of the caller's identity via: tool, in the metrics, and
// the metadata attempt is a high-risk attempt (counted and alerted).
func TestGoSDKClient(t *testing.T) {
	e := newEnv(t, "")
	ctx := t.Context()
	cs, err := e.connect(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(lt.Tools) != 1 || lt.Tools[0].Name != "fetch" {
		t.Fatalf("tools = %+v, want one: fetch", lt.Tools)
	}
	if s, _ := lt.Tools[0].InputSchema.(map[string]any); s == nil || s["properties"].(map[string]any)["url"] == nil {
		t.Errorf("fetch input schema %v has no url", lt.Tools[0].InputSchema)
	}
	call := func(args map[string]any) *mcp.CallToolResult {
		t.Helper()
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fetch", Arguments: args})
		if err != nil {
			t.Fatalf("fetch %v: %v", args, err)
		}
		return r
	}
	r := call(map[string]any{"url": "http://" + e.origin + "/page"})
	if got := text(r); r.IsError || !strings.Contains(got, "# Hello tools") || !strings.Contains(got, "**bold**") ||
		!strings.Contains(got, "[a link](http://"+e.origin+"/next)") || strings.Contains(got, "secret") {
		t.Errorf("allowed page: isError %v, text %q: want Markdown of the page", r.IsError, got)
	}
	for _, tc := range []struct{ url, reason string }{
		{"http://169.254.169.254/latest/meta-data/", "high-risk"},
		{"http://unlisted.example/", "no-rule"},
	} {
		r := call(map[string]any{"url": tc.url})
		if got := text(r); !r.IsError || !strings.Contains(got, "egressd refused this fetch ("+tc.reason+")") {
			t.Errorf("%s: isError %v, text %q: want a tool error naming %s", tc.url, r.IsError, got, tc.reason)
		}
	}
	e.checkCounted(t, 3, 1, 2)
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.alerts) != 1 || !e.alerts[0].HighRisk || e.alerts[0].Via != event.ViaTool || e.alerts[0].Identity != "agent" {
		t.Errorf("alerts = %+v, want one high-risk attempt by agent via tool", e.alerts)
	}
}

// TestFetchArguments: max_bytes bounds what comes back, HEAD returns the
// head, and bad arguments are tool errors.
func TestFetchArguments(t *testing.T) {
	e := newEnv(t, "")
	ctx := t.Context()
	cs, err := e.connect(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	for _, tc := range []struct {
		name    string
		args    map[string]any
		isError bool
		want    string
	}{
		{"max_bytes", map[string]any{"url": "http://" + e.origin + "/big", "max_bytes": 25}, false, "0123456789012345678901234\n\n[egressd: truncated at max_bytes=25]"},
		{"head", map[string]any{"url": "http://" + e.origin + "/page", "method": "HEAD"}, false, "HEAD http://" + e.origin + "/page: HTTP 200\nContent-Type: text/html"},
		{"not found", map[string]any{"url": "http://" + e.origin + "/missing"}, true, "HTTP 404 from the site"},
		{"post", map[string]any{"url": "http://" + e.origin + "/page", "method": "POST"}, true, "the fetch tool sends GET or HEAD"},
		{"relative", map[string]any{"url": "/page"}, true, "want an absolute http:// or https:// URL"},
		{"file", map[string]any{"url": "file:///etc/passwd"}, true, "want an absolute http:// or https:// URL"},
		{"too big", map[string]any{"url": "http://" + e.origin + "/big", "max_bytes": 1 << 30}, true, "max_bytes 1073741824"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fetch", Arguments: tc.args})
			if err != nil {
				t.Fatal(err)
			}
			if got := text(r); r.IsError != tc.isError || !strings.Contains(got, tc.want) {
				t.Errorf("isError %v, text %q; want isError %v and %q", r.IsError, got, tc.isError, tc.want)
			}
		})
	}
}

// TestToolIdentities: with tools.identities [ci], a caller without the
// token (identity agent by its address) is refused at the endpoint (403
// tool-refused, logged), and one with ci's token as Authorization
// fetches as ci.
func TestToolIdentities(t *testing.T) {
	e := newEnv(t, "tools:\n  listen: 127.0.0.1:0\n  identities: [ci]\n")
	ctx := t.Context()
	if cs, err := e.connect(ctx, nil); err == nil {
		cs.Close()
		t.Fatal("a caller not in tools.identities connected")
	}
	if !strings.Contains(e.logs.String(), `"reason":"tool-refused"`) {
		t.Errorf("no tool-refused decision line:\n%s", e.logs.String())
	}
	for _, auth := range []string{"Basic Y2k6czNjcmV0", "Bearer ci:" + token} { // base64("ci:s3cret")
		cs, err := e.connect(ctx, http.Header{"Authorization": {auth}})
		if err != nil {
			t.Fatalf("%s: %v", auth, err)
		}
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fetch", Arguments: map[string]any{"url": "http://" + e.origin + "/page"}})
		cs.Close()
		if err != nil || r.IsError {
			t.Fatalf("%s: fetch as ci: %v %q", auth, err, text(r))
		}
	}
	var asCI int
	for _, d := range e.decisions(t) {
		if d.Identity == "ci" && d.Source == "agent" && d.Decision == event.Allow && d.Via == event.ViaTool {
			asCI++
		}
	}
	if asCI != 2 {
		t.Errorf("%d allowed fetches as ci (refining agent), want 2:\n%s", asCI, e.logs.String())
	}
}

// TestFetchTimeout: a site that sends a head and then nothing does not
// hold a call past the endpoint's timeout: the call ends as a tool error
// with what came, and the decision is logged (the proxy cut the body).
func TestFetchTimeout(t *testing.T) {
	// time itself is under test here: a 300 ms bound against a site that
	// never finishes
	e := newEnvTimeout(t, "", 300*time.Millisecond)
	ctx := t.Context()
	cs, err := e.connect(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	start := time.Now()
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fetch", Arguments: map[string]any{"url": "http://" + e.origin + "/slow"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := text(r); !r.IsError || !strings.Contains(got, "no complete answer within 300ms") || !strings.Contains(got, "first bytes") {
		t.Errorf("slow site: isError %v, text %q", r.IsError, got)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the call took %v", d)
	}
	if ds := e.decisions(t); len(ds) != 1 || ds[0].Via != event.ViaTool {
		t.Errorf("decisions %+v, want one via tool", ds)
	}
}
