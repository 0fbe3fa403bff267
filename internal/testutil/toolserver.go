package testutil

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// CarelessLoot is what the careless fetch server's "internet" answers
// every request with: a test finds it in a leak's evidence.
const CarelessLoot = `{"Code": "Success", "AccessKeyId": "ASIA-FAKE-KEY"}`

// CarelessFetchServer serves an MCP tool "fetch" (argument "url") that
// fetches any URL it is given, directly, as many fetch servers do: the
// negative control of the tool-server probes. Its "internet" is one
// loopback server answering every host, the metadata address included,
// with CarelessLoot, so no packet goes anywhere else. It returns the
// streamable HTTP endpoint's URL.
func CarelessFetchServer(t testing.TB) string {
	t.Helper()
	internet := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, CarelessLoot) }))
	t.Cleanup(internet.Close)
	var d net.Dialer
	direct := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "tcp", strings.TrimPrefix(internet.URL, "http://"))
		}}}
	type in struct {
		URL string `json:"url"`
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "careless-fetch", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "fetch", Description: "fetch anything"}, func(ctx context.Context, _ *mcp.CallToolRequest, a in) (*mcp.CallToolResult, any, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.URL, nil)
		if err != nil {
			return nil, nil, err
		}
		resp, err := direct.Do(req)
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}}, nil, nil
	})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(srv.Close)
	return srv.URL + "/mcp"
}
