//go:build linux

package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/egressd/egressd/internal/testnet"
	"github.com/egressd/egressd/selftest"
)

// TestToolsFromSandbox: `serve --walls` with tools.listen on the gateway
// address. From the sandbox (a namespace on the walls' interface prefix,
// as a container runtime wires one) an MCP client reaches the endpoint
// through the walls, fetches an allowed page and gets a tool error for the
// metadata address, each a decision of the sandbox's identity via: tool;
// the boot self-test probed egressd's own endpoint (sealed), and `egressd
// probe --tool-server` from inside the sandbox finds it sealed too.
func TestToolsFromSandbox(t *testing.T) {
	t.Parallel()
	l := newSTLab(t)
	f, err := os.OpenFile(l.cfg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	// selftest is the config's last section: tool_servers continues it
	f.WriteString("  tool_servers:\n    - {name: egressd, url: \"http://198.51.100.1:8931/mcp\"}\n" +
		"identities:\n  - name: sbx-a\n    cidrs: [" + testnet.SandboxAddr4.String() + "/32]\n" +
		"tools:\n  listen: 198.51.100.1:8931\n")
	f.Close()
	l.startServe(t) // "ready": the boot self-test, tool-server probes included, is sealed

	ctx := t.Context()
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil, DialContext: l.topo.SandboxDialer().DialContext}}
	c := mcp.NewClient(&mcp.Implementation{Name: "sandbox-agent", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://198.51.100.1:8931/mcp", HTTPClient: hc, DisableStandaloneSSE: true, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("the sandbox cannot reach the tool endpoint through the walls: %v", err)
	}
	defer cs.Close()
	for _, tc := range []struct {
		url, want string
		isError   bool
	}{
		{"http://allowed.test/", "", false},
		{"http://169.254.169.254/latest/meta-data/", "egressd refused this fetch (high-risk)", true},
	} {
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fetch", Arguments: map[string]any{"url": tc.url}})
		if err != nil {
			t.Fatal(err)
		}
		got := r.Content[0].(*mcp.TextContent).Text
		if r.IsError != tc.isError || !strings.Contains(got, tc.want) {
			t.Errorf("fetch %s from the sandbox: isError %v, %q", tc.url, r.IsError, got)
		}
	}
	for _, what := range [][]string{{`"host":"allowed.test"`, `"decision":"allow"`}, {`"host":"169.254.169.254"`, `"reason":"high-risk"`}} {
		if _, err := l.serve.logs.Wait(10*time.Second, l.serve.exited, append(what, `"identity":"sbx-a"`, `"via":"tool"`)...); err != nil {
			t.Errorf("the fetch's decision line as sbx-a via tool: %v", err)
		}
	}

	// the sandbox trusts the origins' CA and egressd's (inspected rules),
	// for the positive controls
	bundle := filepath.Join(l.dir, "bundle.pem")
	egressdCA, err := os.ReadFile(filepath.Join(l.state, "ca", "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(bundle, append(append([]byte{}, l.topo.CA.CertPEM...), egressdCA...), 0o644)
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
	code, out, errs := l.egressdIn(t, l.topo.Sandbox, nobody, []string{"SSL_CERT_FILE=" + bundle, "PATH=/usr/bin:/bin", "HOME=/nonexistent"}, "probe", "--proxy", "198.51.100.1:3128", "--dns", "198.51.100.1:53", "--json",
		"--tool-server", "egressd=http://198.51.100.1:8931/mcp")
	rep := selftestJSON(t, out, errs)
	// Judged on its tool-server probes and on leaks: the rest of the
	// catalog is TestInSandboxProbe's (under load its 1 s proxy probes may
	// time out, which is "incomplete", not a leak).
	var tool int
	for _, r := range rep.Results {
		if strings.HasPrefix(r.ID, "tool-server/egressd/") {
			tool++
			if r.Status != selftest.Pass {
				t.Errorf("%s from the sandbox: %s %s %s", r.ID, r.Status, r.Result, r.Detail)
			}
		}
	}
	if code == exitDeny || len(rep.Leaks()) > 0 || tool < 9 {
		t.Errorf("in-sandbox probe with --tool-server: exit %d, %s, %d tool-server probes\n%s\n%s", code, rep.Outcome(), tool, tableOf(rep), errs)
	}
}
