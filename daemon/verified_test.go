package daemon

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/policy"
)

// TestUnverifiedIsNotReady: --no-selftest alone leaves /readyz at 503 and
// the proxy refusing (nothing proves the walls); --allow-unverified serves,
// loudly; egressd_verified is 1 only after a sealed self-test.
func TestUnverifiedIsNotReady(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		opt          Options
		readyz       int
		proxy        int
		verified     string
		statusSubstr string
	}{
		{"no-selftest", Options{NoSelftest: true}, 503, 503, "egressd_verified 0", "--no-selftest"},
		{"no-selftest allow-unverified", Options{NoSelftest: true, AllowUnverified: true}, 200, 200, "egressd_verified 0", "WARNING"},
		{"sealed", Options{Verify: func(context.Context, *policy.Policy) Verdict { return Verdict{Sealed: true} }}, 200, 200, "egressd_verified 1", "sealed"},
		{"leak", Options{Verify: func(context.Context, *policy.Policy) Verdict { return Verdict{Leaks: []string{"x"}} }}, 503, 503, `egressd_selftest_runs_total{result="leak",trigger="boot"} 1`, "leak"},
		// a positive control that fails is not a leak, in /readyz and metrics
		{"control failed", Options{Verify: func(context.Context, *policy.Policy) Verdict {
			return Verdict{ControlsFailed: []string{"expect/https://example.org/: timeout"}}
		}}, 503, 503, `egressd_selftest_runs_total{result="control-failed",trigger="boot"} 1`, "not ready: control-failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
			defer o.Close()
			path := filepath.Join(t.TempDir(), "egressd.yaml")
			os.WriteFile(path, []byte(config("127.0.0.1:0", port(o.URL))), 0o600)
			pl, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			opt := tt.opt
			opt.Load = func() (*policy.Policy, error) { return policy.Load(path) }
			opt.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
			opt.ProxyListener = pl
			d, err := New(opt)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			started := make(chan struct{})
			go func() { done <- d.Run(ctx, started) }()
			defer func() { cancel(); <-done }()
			<-started
			admin := "http://" + d.adminAddr
			get := func(u string, c *http.Client) (int, string) {
				resp, err := c.Get(u)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				return resp.StatusCode, string(b)
			}
			<-d.Booted() // readiness is set
			if code, body := get(admin+"/readyz", http.DefaultClient); code != tt.readyz || !strings.Contains(body, tt.statusSubstr) {
				t.Errorf("/readyz: %d %q, want %d containing %q", code, body, tt.readyz, tt.statusSubstr)
			}
			px := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: pl.Addr().String()}), DisableKeepAlives: true}}
			if code, _ := get(o.URL, px); code != tt.proxy {
				t.Errorf("proxy: %d, want %d", code, tt.proxy)
			}
			if _, m := get(admin+"/metrics", http.DefaultClient); !strings.Contains(m, "\n"+tt.verified+"\n") {
				t.Errorf("metrics lack %q", tt.verified)
			}
		})
	}
}
