package proxy

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"context"
	"github.com/egressd/egressd/policy"
)

// TestAlertsAndProbeTraffic: high-risk attempts by a sandbox and every
// attempt by an evaluation identity reach Config.Alert; probe traffic (the
// self-test's connections, a run token the daemon vouches for) never does,
// and is counted in egressd_probe_requests_total instead of
// egressd_requests_total and egressd_high_risk_total. A made-up probe
// User-Agent changes nothing.
func TestAlertsAndProbeTraffic(t *testing.T) {
	t.Parallel()
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	defer origin.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(origin.URL, "http://"))
	pol, err := policy.Parse(strings.NewReader(`version: 1
allow:
  - name: origin
    cidrs: [127.0.0.1/32]
    ports: [`+port+`]
    pages: ["*"]
identities:
  - name: agent
    user: agent
    token_sha256: 30c952fab122c3f9759f02a6d95c3758b246b4fee239957b2d4fee46e26170c4
  - name: eval-1
    user: eval
    token_sha256: 30c952fab122c3f9759f02a6d95c3758b246b4fee239957b2d4fee46e26170c4
    evaluation: true
`), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var alerts []Attempt
	var selftestPort atomicPort
	reg := prometheus.NewRegistry()
	px := New(pol, Config{
		Logger:   slog.New(slog.DiscardHandler),
		Registry: reg,
		Alert: func(a Attempt) {
			mu.Lock()
			alerts = append(alerts, a)
			mu.Unlock()
		},
		ReadyExempt: func(ap, _ netip.AddrPort) bool { return ap.Port() == selftestPort.get() },
		Probe: ProbeHooks{Label: func(id, ua, host string) bool {
			return id == "agent" && ua == "egressd-probe/good" && host == "169.254.169.254"
		}},
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go px.Serve(l)
	defer px.Shutdown(t.Context())
	get := func(user, ua, target string, selftest bool) int {
		t.Helper()
		d := &net.Dialer{}
		tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", User: url.UserPassword(user, "pw"), Host: l.Addr().String()}), DisableKeepAlives: true,
			DialContext: func(ctx context.Context, n, a string) (net.Conn, error) {
				c, err := d.DialContext(ctx, n, a)
				if err == nil && selftest {
					selftestPort.set(uint16(c.LocalAddr().(*net.TCPAddr).Port))
				}
				return c, err
			}}
		req, _ := http.NewRequest("GET", target, nil)
		if ua != "" {
			req.Header.Set("User-Agent", ua)
		}
		resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	meta := "http://169.254.169.254/latest/meta-data/"
	tests := []struct {
		name, user, ua, target string
		selftest               bool
		status                 int
		alert                  string // "" none, else the identity alerted
		highRisk, probes       float64
	}{
		{"agent allowed", "agent", "", origin.URL, false, 200, "", 0, 0},
		{"agent metadata", "agent", "", meta, false, 403, "agent", 1, 0},
		{"evaluation allowed", "eval", "", origin.URL, false, 200, "eval-1", 1, 0},
		{"evaluation denied", "eval", "", "http://unlisted.example/", false, 403, "eval-1", 1, 0},
		{"self-test metadata", "", "", meta, true, 403, "", 1, 1},
		{"probe run metadata", "agent", "egressd-probe/good", meta, false, 403, "", 1, 2},
		{"made-up probe token", "agent", "egressd-probe/forged", meta, false, 403, "agent", 2, 2},
		// anything under a probe label that is not probe traffic is an
		// alert of its own kind, allowed or not
		{"made-up probe token, allowed", "agent", "egressd-probe/forged", origin.URL, false, 200, "agent", 2, 2},
	}
	for _, tt := range tests {
		mu.Lock()
		alerts = nil
		mu.Unlock()
		if code := get(tt.user, tt.ua, tt.target, tt.selftest); code != tt.status {
			t.Errorf("%s: status %d, want %d", tt.name, code, tt.status)
		}
		selftestPort.set(0)
		mu.Lock()
		got := ""
		if len(alerts) == 1 {
			got = alerts[0].Identity
		} else if len(alerts) > 1 {
			got = "many"
		}
		mu.Unlock()
		if got != tt.alert {
			t.Errorf("%s: alert %q, want %q", tt.name, got, tt.alert)
		}
		if forged := strings.HasSuffix(tt.ua, "/forged"); len(alerts) == 1 && (alerts[0].Kind == AlertProbeLabel) != forged {
			t.Errorf("%s: alert kind %q", tt.name, alerts[0].Kind)
		}
		if n := sumMetric(t, reg, "egressd_high_risk_total"); n != tt.highRisk {
			t.Errorf("%s: egressd_high_risk_total %v, want %v", tt.name, n, tt.highRisk)
		}
		if n := sumMetric(t, reg, "egressd_probe_requests_total"); n != tt.probes {
			t.Errorf("%s: egressd_probe_requests_total %v, want %v", tt.name, n, tt.probes)
		}
	}
}

type atomicPort struct {
	mu sync.Mutex
	p  uint16
}

func (a *atomicPort) set(p uint16) { a.mu.Lock(); a.p = p; a.mu.Unlock() }
func (a *atomicPort) get() uint16  { a.mu.Lock(); defer a.mu.Unlock(); return a.p }

// sumMetric sums a counter family's values in reg.
func sumMetric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
