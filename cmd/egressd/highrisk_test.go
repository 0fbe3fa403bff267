//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"fmt"
	"github.com/egressd/egressd/configs"
	"github.com/egressd/egressd/daemon"
	"github.com/egressd/egressd/policy"
)

// defaultWithLocalTargets is configs/default.yaml with its listen section
// on free loopback ports, no DNS listener, and a selftest section whose
// metadata addresses, canary and rules are the default's but with no
// positive control (the default's is a real registry) and short timings;
// the alert webhook is a local server.
func defaultWithLocalTargets(t *testing.T, proxyAddr, hook string) string {
	t.Helper()
	src := string(configs.Default)
	listen := regexp.MustCompile(`(?m)^listen:\n(?:  .*\n)+`)
	src = listen.ReplaceAllString(src, "listen:\n  proxy: "+proxyAddr+"\n  admin: 127.0.0.1:0\n")
	for _, k := range []string{"tcp", "udp", "ipv6", "resolvers", "expect_reachable", "interval", "timeout"} {
		src = regexp.MustCompile(`(?m)^  `+k+`: .*\n`).ReplaceAllString(src, "")
	}
	src = strings.Replace(src, "\nselftest:\n", "\nselftest:\n  interval: 30ms\n  timeout: 300ms\n", 1)
	if !strings.Contains(src, "metadata: [169.254.169.254") {
		t.Fatal("configs/default.yaml no longer lists the metadata address: update this test")
	}
	return src + "\nalerts:\n  webhook: " + hook + "\n  batch: 50ms\n"
}

// TestScheduledSelftestIsNotHighRisk: serve with the default config's
// policy runs its scheduled self-test (proxy-only: the metadata, canary,
// unlisted, fronting and publish probes through the proxy) 20 times and
// egressd_high_risk_total stays 0, the probes counted apart under
// egressd-selftest; one real high-risk attempt by a client adds 1 and
// posts the alert webhook once.
func TestScheduledSelftestIsNotHighRisk(t *testing.T) {
	// Not parallel: its in-process self-test marks its 127.0.0.1 ports as probes in the process-wide probens.Conns for 30 s.
	var mu sync.Mutex
	var posts []map[string]any
	posted := make(chan struct{}, 16)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var v map[string]any
		json.NewDecoder(r.Body).Decode(&v)
		mu.Lock()
		posts = append(posts, v)
		mu.Unlock()
		posted <- struct{}{}
	}))
	defer hook.Close()
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := defaultWithLocalTargets(t, pl.Addr().String(), hook.URL+"/alert")
	opt := daemon.Options{
		Load:          func() (*policy.Policy, error) { return policy.Parse(strings.NewReader(cfg), "default.yaml") },
		Logger:        slog.New(slog.NewJSONHandler(io.Discard, nil)),
		ProxyListener: pl,
	}
	// nothing in this test may reach a real upstream
	opt.ProxyConfig.Control = func(network, address string, _ syscall.RawConn) error {
		t.Errorf("the proxy dialed %s %s", network, address)
		return errors.New("test: no upstream")
	}
	// serve's self-test wiring, onto Options (for the listener and the
	// dial guard above)
	g := daemon.Gateway{Options: opt}
	wireSelftest(&g, t.TempDir())
	opt = g.Options
	d, err := daemon.New(opt)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	started := make(chan struct{})
	go func() { done <- d.Run(ctx, started) }()
	defer func() { cancel(); <-done }()
	<-started
	_, _, admin := d.Addrs()
	metric := func(name string) float64 {
		resp, err := http.Get("http://" + admin + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var sum float64
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, name+" ") || strings.HasPrefix(l, name+"{") || strings.Contains(name, "{") && strings.HasPrefix(l, name) {
				var v float64
				if _, err := fmt.Sscan(l[strings.LastIndexByte(l, ' ')+1:], &v); err == nil {
					sum += v
				}
			}
		}
		return sum
	}
	deadline := time.Now().Add(60 * time.Second)
	for metric("egressd_selftest_runs_total") < 21 { // boot + 20 scheduled
		if time.Now().After(deadline) {
			t.Fatalf("20 scheduled runs did not happen in time: %v runs", metric("egressd_selftest_runs_total"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := metric(`egressd_probe_requests_total{decision="deny",identity="egressd-selftest"`); n < 20*4 {
		t.Errorf("self-test requests counted as probes: %v, want at least 4 per run", n)
	}
	if n := metric("egressd_high_risk_total"); n != 0 {
		t.Fatalf("egressd_high_risk_total after 20 self-test runs: %v, want 0", n)
	}
	if n := metric("egressd_alerts_total"); n != 0 {
		t.Fatalf("egressd_alerts_total after 20 self-test runs: %v, want 0", n)
	}
	// a real high-risk attempt by a client
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: pl.Addr().String()})}}
	resp, err := client.Get("http://169.254.169.254/latest/meta-data/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("metadata through the proxy: %d, want 403", resp.StatusCode)
	}
	if n := metric("egressd_high_risk_total"); n != 1 {
		t.Errorf("egressd_high_risk_total after one real attempt: %v, want 1", n)
	}
	select {
	case <-posted:
	case <-time.After(10 * time.Second):
		t.Fatal("the alert webhook was not posted")
	}
	// more scheduled runs: still one post, one attempt in it
	runs := metric("egressd_selftest_runs_total")
	for deadline := time.Now().Add(60 * time.Second); metric("egressd_selftest_runs_total") < runs+5; {
		if time.Now().After(deadline) {
			t.Fatalf("fewer than 5 scheduled self-test runs in 60 s (runs_total %v → %v)", runs, metric("egressd_selftest_runs_total"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(posts) != 1 {
		t.Fatalf("webhook posts: %d, want 1: %v", len(posts), posts)
	}
	at, _ := posts[0]["attempts"].([]any)
	if len(at) != 1 || !strings.Contains(mustJSON(at), `"host":"169.254.169.254"`) || !strings.Contains(mustJSON(at), `"identity":"127.0.0.1"`) {
		t.Errorf("webhook body: %v", posts[0])
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
