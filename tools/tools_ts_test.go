package tools_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tsSDK returns a directory whose node_modules holds the official
// TypeScript MCP SDK: EGRESSD_MCP_TS_SDK (.ci/run installs it there), or
// a fresh npm install into a temp dir. It skips, with the reason, where
// node or npm is missing or the install fails, unless
// EGRESSD_REQUIRE_NODE=1 (CI), where that fails the test.
func tsSDK(t *testing.T) (node, dir string) {
	t.Helper()
	skip := func(why string, args ...any) {
		t.Helper()
		if os.Getenv("EGRESSD_REQUIRE_NODE") == "1" {
			t.Fatalf(why, args...)
		}
		t.Skipf(why, args...)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		skip("node is not installed: the TypeScript MCP client cannot run (%v)", err)
	}
	if dir = os.Getenv("EGRESSD_MCP_TS_SDK"); dir != "" {
		return node, dir
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		skip("npm is not installed: cannot install @modelcontextprotocol/sdk (%v)", err)
	}
	dir = t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "install", "--no-audit", "--no-fund", "--silent", "--prefix", dir, "@modelcontextprotocol/sdk@1")
	cmd.Env = append(os.Environ(), "npm_config_cache="+filepath.Join(dir, ".npm"))
	if out, err := cmd.CombinedOutput(); err != nil {
		skip("npm install @modelcontextprotocol/sdk failed (no registry reachable?): %v\n%s", err, out)
	}
	return node, dir
}

// TestTypeScriptSDKClient: the same checks as TestGoSDKClient through a
// second, independent client implementation.
func TestTypeScriptSDKClient(t *testing.T) {
	node, dir := tsSDK(t)
	script, err := os.ReadFile("testdata/ts_client.mjs")
	if err != nil {
		t.Fatal(err)
	}
	// node resolves the SDK from the script's own directory
	path := filepath.Join(dir, "ts_client.mjs")
	if err := os.WriteFile(path, script, 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, "")
	allowed := "http://" + e.origin + "/page"
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, path, e.endpoint, allowed, "http://169.254.169.254/latest/meta-data/", "http://unlisted.example/")
	cmd.Env = append(os.Environ(), "NO_PROXY=*", "HTTP_PROXY=", "HTTPS_PROXY=")
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("node client: %v\n%s\n%s", err, out, stderr)
	}
	var got struct {
		Tools []string
		Calls []struct {
			URL     string
			IsError bool
			Text    string
		}
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(got.Tools) != 1 || got.Tools[0] != "fetch" {
		t.Errorf("tools = %v, want [fetch]", got.Tools)
	}
	if len(got.Calls) != 3 {
		t.Fatalf("calls = %+v", got.Calls)
	}
	if c := got.Calls[0]; c.IsError || !strings.Contains(c.Text, "# Hello tools") {
		t.Errorf("allowed page: %+v", c)
	}
	for i, reason := range []string{"high-risk", "no-rule"} {
		if c := got.Calls[i+1]; !c.IsError || !strings.Contains(c.Text, "egressd refused this fetch ("+reason+")") {
			t.Errorf("%s: %+v: want a tool error naming %s", c.URL, c, reason)
		}
	}
	e.checkCounted(t, 3, 1, 2)
}
