package selftest

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// fakeInternet is the only server the test tool servers reach, whatever
// host they are asked for: it stands in for the metadata service, the
// canary and any site, on 127.0.0.1, and logs the requests it got (the
// canary log at /log).
type fakeInternet struct {
	srv *httptest.Server
	mu  sync.Mutex
	log []string
}

func newFakeInternet(t *testing.T) *fakeInternet {
	f := &fakeInternet{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if r.URL.Path == "/log" {
			io.WriteString(w, strings.Join(f.log, "\n"))
			return
		}
		f.log = append(f.log, r.Host+r.URL.RequestURI())
		io.WriteString(w, `{"AccessKeyId": "ASIA-FAKE", "SecretAccessKey": "fake"}`)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// fetchAnything fetches any URL from the fake internet: what a careless
// fetch tool does, minus the real network.
func (f *fakeInternet) fetchAnything(ctx context.Context, u string) (string, error) {
	addr := strings.TrimPrefix(f.srv.URL, "http://")
	var d net.Dialer
	c := &http.Client{Transport: &http.Transport{Proxy: nil, DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", addr)
	}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

type fetchArgs struct {
	Address string `json:"address"`
}

// toolServer serves an MCP fetch tool named "get" (argument "address")
// answering with fetch, on 127.0.0.1.
func toolServer(t *testing.T, fetch func(ctx context.Context, u string) *mcp.CallToolResult) string {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "test-tools", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "get", Description: "fetch a URL"}, func(ctx context.Context, _ *mcp.CallToolRequest, in fetchArgs) (*mcp.CallToolResult, any, error) {
		return fetch(ctx, in.Address), nil, nil
	})
	ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(ts.Close)
	return ts.URL + "/mcp"
}

func textResult(isErr bool, s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: isErr, Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// TestToolServerProbes: a careless fetch tool (it fetches anything) leaks
// on every refused target, each leak naming it and carrying what it
// returned, and its canary shows in the canary log; a careful one (tool
// errors), and one that passes on egressd's refusal as content, pass; the
// positive control passes through both. A tool server that is not there
// is an error, never a pass.
func TestToolServerProbes(t *testing.T) {
	t.Parallel()
	net := newFakeInternet(t)
	expect := net.srv.URL + "/ok"
	careless := toolServer(t, func(ctx context.Context, u string) *mcp.CallToolResult {
		b, err := net.fetchAnything(ctx, u)
		if err != nil {
			return textResult(true, err.Error())
		}
		return textResult(false, b)
	})
	careful := toolServer(t, func(ctx context.Context, u string) *mcp.CallToolResult {
		if u == expect {
			b, _ := net.fetchAnything(ctx, u)
			return textResult(false, b)
		}
		return textResult(true, "refused: "+u)
	})
	relaying := toolServer(t, func(ctx context.Context, u string) *mcp.CallToolResult {
		if u == expect {
			return textResult(false, "fine")
		}
		return textResult(false, "HTTP 403\negressd: denied: high-risk: never allowed")
	})
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	servers := []ToolServer{
		{Name: "careless", URL: careless, Tool: "get", Arg: "address"},
		{Name: "careful", URL: careful, Tool: "get", Arg: "address"},
		{Name: "relaying", URL: relaying, Tool: "get", Arg: "address"},
		{Name: "gone", URL: gone.URL + "/mcp", Tool: "get", Arg: "address"},
	}
	rep, err := Run(context.Background(), Config{
		Dial: wall, SkipDirect: "test: no direct probes",
		CanaryURL: "http://canary.example/", CanaryLog: net.srv.URL + "/log",
		Metadata: []netip.Addr{netip.MustParseAddr("169.254.169.254")}, MetadataNames: []string{"metadata.google.internal"},
		Unlisted: "egressd-selftest-unlisted.invalid:443", ExpectReachable: []string{expect},
		ToolServers: servers, Timeout: 3 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	kinds := []string{"canary", "canary-log", "metadata-literal/169.254.169.254", "metadata-decimal/169.254.169.254", "metadata-hex/169.254.169.254",
		"metadata-octal/169.254.169.254", "metadata-short/169.254.169.254", "metadata-ipv6-mapped/169.254.169.254",
		"metadata-name/metadata.google.internal", "unlisted", "expect"}
	byID := map[string]Result{}
	for _, r := range rep.Results {
		byID[r.ID] = r
	}
	for _, ts := range servers {
		for _, k := range kinds {
			id := "tool-server/" + ts.Name + "/" + k
			r, ok := byID[id]
			if !ok {
				t.Errorf("%s: no such probe", id)
				continue
			}
			want := Pass
			switch {
			case ts.Name == "gone" && k != "canary-log":
				want = Error
			case ts.Name == "careless" && k != "expect":
				want = Leak
			}
			if r.Status != want {
				t.Errorf("%s: %s (%s: %s), want %s", id, r.Status, r.Result, r.Detail, want)
			}
			if want == Leak && k != "canary-log" && (!strings.Contains(r.Detail, "tool server careless") || !strings.Contains(r.Detail, "ASIA-FAKE")) {
				t.Errorf("%s: detail %q: want the server named and what it returned", id, r.Detail)
			}
			if want == Leak && k == "canary-log" && !strings.Contains(r.Detail, "tool server careless") {
				t.Errorf("%s: detail %q: want the server named", id, r.Detail)
			}
		}
	}
	if rep.Sealed() {
		t.Error("a careless tool server: the run is sealed")
	}
}
