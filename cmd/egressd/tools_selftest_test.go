package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/daemon"
	"github.com/egressd/egressd/internal/testutil"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/report"
	"github.com/egressd/egressd/selftest"
)

// bootWithToolServers boots serve's daemon with its real self-test
// (proxy-only: loopback) on a policy whose tool endpoint is on, listing
// egressd's own endpoint and extra as selftest.tool_servers; it returns
// the daemon, the admin address and the state directory.
func bootWithToolServers(t *testing.T, extra string) (*daemon.Daemon, string, string) {
	t.Helper()
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello from the allowed origin") }))
	t.Cleanup(origin.Close)
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, oport, _ := net.SplitHostPort(strings.TrimPrefix(origin.URL, "http://"))
	cfg := fmt.Sprintf(`version: 1
listen:
  proxy: %s
  admin: 127.0.0.1:0
allow:
  - name: origin
    cidrs: [127.0.0.1/32]
    ports: [%s]
tools:
  listen: %s
selftest:
  interval: 1h
  timeout: 3s
  canary_url: http://egressd-canary.example/
  metadata: [169.254.169.254]
  expect_reachable: [%s/]
  tool_servers:
    - {name: egressd, url: "http://%s/mcp"}
%s`, pl.Addr(), oport, tl.Addr(), origin.URL, tl.Addr(), extra)
	stateDir := t.TempDir()
	opt := daemon.Options{
		Load:          func() (*policy.Policy, error) { return policy.Parse(strings.NewReader(cfg), "tools.yaml") },
		Logger:        slog.New(slog.NewJSONHandler(io.Discard, nil)),
		ProxyListener: pl,
		ToolsListener: tl,
	}
	origAddr := strings.TrimPrefix(origin.URL, "http://")
	opt.ProxyConfig.Control = func(network, address string, _ syscall.RawConn) error {
		if address != origAddr {
			t.Errorf("the proxy dialed %s %s", network, address)
			return errors.New("test: only the loopback origin")
		}
		return nil
	}
	g := daemon.Gateway{Options: opt}
	wireSelftest(&g, stateDir)
	opt = g.Options
	d, err := daemon.New(opt)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	started := make(chan struct{})
	go func() { done <- d.Run(ctx, started) }()
	t.Cleanup(func() { cancel(); <-done })
	<-started
	select {
	case <-d.Booted():
	case <-time.After(60 * time.Second):
		t.Fatal("the boot self-test did not finish")
	}
	_, _, admin := d.Addrs()
	return d, admin, stateDir
}

func readyz(t *testing.T, admin string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestSelftestToolServers: with only egressd's own tool endpoint listed
// in selftest.tool_servers, the boot self-test is sealed (its fetch
// refuses every refused target and reaches the positive control) and
// /readyz is 200; with a careless fetch server listed too, the self-test
// reports leaks naming it, /readyz is 503 and says so, and the history
// holds the evidence (what it returned).
func TestSelftestToolServers(t *testing.T) {
	// Not parallel: its in-process self-test marks its 127.0.0.1 ports as probes in the process-wide probens.Conns for 30 s.
	t.Run("egressd's own endpoint: sealed", func(t *testing.T) {
		d, admin, dir := bootWithToolServers(t, "")
		if ok, why := d.Ready(); !ok {
			t.Fatalf("not ready: %s", why)
		}
		if code, body := readyz(t, admin); code != 200 {
			t.Errorf("/readyz %d %s", code, body)
		}
		h, _, err := selftest.ReadHistory(filepath.Join(dir, selftest.HistoryFile))
		if err != nil || len(h) != 1 {
			t.Fatalf("history: %v %d", err, len(h))
		}
		var tool int
		for _, r := range h[0].Report.Results {
			if strings.HasPrefix(r.ID, "tool-server/egressd/") {
				tool++
				if r.Status != selftest.Pass {
					t.Errorf("%s: %s %s %s", r.ID, r.Status, r.Result, r.Detail)
				}
				if strings.HasSuffix(r.ID, "/expect") && !strings.HasSuffix(r.Result, "bytes of content") {
					t.Errorf("%s: %s: the positive control must fetch, at boot too (the self-test passes egressd's readiness gate)", r.ID, r.Result)
				}
			}
		}
		if tool < 10 { // canary, 6 metadata spellings, a metadata name, unlisted, the control
			t.Errorf("%d tool-server probes of egressd's endpoint ran, want 10", tool)
		}
	})
	t.Run("a careless fetch server: leak", func(t *testing.T) {
		careless := testutil.CarelessFetchServer(t)
		d, admin, dir := bootWithToolServers(t, "    - {name: careless, url: \""+careless+"\"}\n")
		if ok, why := d.Ready(); ok {
			t.Fatalf("ready with a careless tool server listed: %s", why)
		}
		code, body := readyz(t, admin)
		if code != 503 || !strings.Contains(body, "leak") || !strings.Contains(body, "tool-server/careless/metadata-literal/169.254.169.254") {
			t.Errorf("/readyz %d %q: want 503 naming the careless tool server's metadata leak", code, body)
		}
		if strings.Contains(body, "tool-server/egressd/") {
			t.Errorf("/readyz names egressd's own endpoint as leaking: %s", body)
		}
		h, _, err := selftest.ReadHistory(filepath.Join(dir, selftest.HistoryFile))
		if err != nil || len(h) != 1 {
			t.Fatalf("history: %v %d", err, len(h))
		}
		var leaks int
		for _, r := range h[0].Report.Leaks() {
			if !strings.HasPrefix(r.ID, "tool-server/careless/") || !strings.Contains(r.Detail, "ASIA-FAKE-KEY") {
				t.Errorf("leak %s: %s: want only the careless server's, with what it returned", r.ID, r.Detail)
			}
			leaks++
		}
		if leaks < 9 {
			t.Errorf("%d leaks, want the canary, 6 metadata spellings, a metadata name and the unlisted host", leaks)
		}
		// the evidence pack names the server and shows what it returned
		var md strings.Builder
		report.Write(&md, report.Input{Now: time.Now(), Policy: d.Policy(), Runs: h})
		if !strings.Contains(md.String(), "`tool-server/careless/metadata-literal/169.254.169.254`") || !strings.Contains(md.String(), "ASIA-FAKE-KEY") {
			t.Errorf("the report lacks the careless tool server's leak and its evidence:\n%s", md.String())
		}
	})
}
