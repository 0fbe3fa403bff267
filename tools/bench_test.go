package tools_test

import (
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkFetch: one fetch call of a small allowed HTML page through the
// Go SDK client, the stateless endpoint and the proxy, on loopback.
func BenchmarkFetch(b *testing.B) {
	e := newEnv(b, "")
	cs, err := e.connect(b.Context(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer cs.Close()
	args := map[string]any{"url": "http://" + e.origin + "/page"}
	for b.Loop() {
		r, err := cs.CallTool(b.Context(), &mcp.CallToolParams{Name: "fetch", Arguments: args})
		if err != nil || r.IsError {
			b.Fatal(err, r)
		}
	}
}
