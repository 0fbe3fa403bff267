package daemon

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/egressd/egressd/policy"
)

// TestToolsWall: the walls open tools.listen's port where sandboxes reach
// egressd, leave a loopback endpoint to the host, and refuse an address
// the walls do not open.
func TestToolsWall(t *testing.T) {
	t.Parallel()
	base := "version: 1\nlisten:\n  proxy: 10.237.0.1:3128\n"
	for _, tc := range []struct {
		name, tools string
		extra       []uint16
		err         string
	}{
		{"off", "", nil, ""},
		{"gateway", "tools:\n  listen: 10.237.0.1:8931\n", []uint16{8931}, ""},
		{"all addresses", "tools:\n  listen: 0.0.0.0:8931\n", []uint16{8931}, ""},
		{"loopback", "tools:\n  listen: 127.0.0.1:8931\n", nil, ""},
		{"elsewhere", "tools:\n  listen: 10.9.9.9:8931\n", nil, "tools.listen 10.9.9.9:8931: the walls let sandboxes reach the proxy's address 10.237.0.1 only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := policy.Parse(strings.NewReader(base+tc.tools), "t.yaml")
			if err != nil {
				t.Fatal(err)
			}
			s, err := WallSpec(p)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(s.ExtraPorts, tc.extra) {
				t.Errorf("ExtraPorts %v, want %v", s.ExtraPorts, tc.extra)
			}
		})
	}
}

// TestToolsEndpoint: serve listens on tools.listen and speaks MCP at
// /mcp, a fetch goes through the proxy (allowed origin: content; metadata:
// a tool error), and the endpoint itself is egressd's own listener, which
// no rule reaches through the proxy (proxy-loop).
func TestToolsEndpoint(t *testing.T) {
	t.Parallel()
	o := httptestOrigin(t)
	path := filepath.Join(t.TempDir(), "egressd.yaml")
	os.WriteFile(path, []byte(config("127.0.0.1:0", port(o))+"  - name: local-dev\n    cidrs: [127.0.0.0/8]\n    ports: [\"1-65535\"]\n    pages: [\"*\"]\ntools:\n  listen: 127.0.0.1:0\n"), 0o600)
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(Options{
		Load:   func() (*policy.Policy, error) { return policy.Load(path) },
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), NoSelftest: true, AllowUnverified: true, ProxyListener: pl,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx, started) }()
	t.Cleanup(func() { cancel(); <-done })
	<-started
	<-d.Booted()
	addr := d.ToolsAddr()
	if addr == "" {
		t.Fatal("no tool endpoint bound")
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp", DisableStandaloneSSE: true, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	for _, tc := range []struct {
		url     string
		isError bool
		want    string
	}{{o + "/x", false, "ok"}, {"http://169.254.169.254/", true, "(high-risk)"}} {
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fetch", Arguments: map[string]any{"url": tc.url}})
		if err != nil {
			t.Fatal(err)
		}
		if r.IsError != tc.isError || !strings.Contains(r.Content[0].(*mcp.TextContent).Text, tc.want) {
			t.Errorf("fetch %s: %v %q", tc.url, r.IsError, r.Content[0].(*mcp.TextContent).Text)
		}
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: pl.Addr().String()}), DisableKeepAlives: true}}
	resp, err := client.Get("http://" + addr + "/mcp")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 || resp.Header.Get("X-Egressd-Deny") != "proxy-loop" {
		t.Errorf("the tool endpoint through the proxy: %d %q, want 403 proxy-loop", resp.StatusCode, resp.Header.Get("X-Egressd-Deny"))
	}
}

func httptestOrigin(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return "http://" + l.Addr().String()
}
