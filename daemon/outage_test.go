package daemon

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/egressd/egressd/policy"
)

// switchableUpstream is a resolver on 127.0.0.1 that can die (its socket
// closed: queries are refused by the kernel at once) and come back on the
// same port.
type switchableUpstream struct {
	t    *testing.T
	addr string
	mu   sync.Mutex
	srv  *dns.Server
}

func newSwitchableUpstream(t *testing.T) *switchableUpstream {
	u := &switchableUpstream{t: t, addr: "127.0.0.1:0"}
	u.start()
	t.Cleanup(u.stop)
	return u
}

func (u *switchableUpstream) start() {
	u.t.Helper()
	pc, err := net.ListenPacket("udp", u.addr)
	if err != nil {
		u.t.Fatalf("resolver back on %s: %v", u.addr, err)
	}
	u.addr = pc.LocalAddr().String()
	srv := &dns.Server{PacketConn: pc, Handler: answerA}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go srv.ActivateAndServe() //nolint:errcheck
	<-started
	u.mu.Lock()
	u.srv = srv
	u.mu.Unlock()
}

func (u *switchableUpstream) stop() {
	u.mu.Lock()
	srv := u.srv
	u.srv = nil
	u.mu.Unlock()
	if srv != nil {
		srv.Shutdown() //nolint:errcheck
	}
}

// TestOutageIsNotALeak: the upstream resolver dies after boot. The
// scheduled self-test's positive control (a name resolved through
// egressd's DNS by the self-test's own client) fails: that proves nothing,
// but it is no leak, so the verified policy keeps serving (an
// address-literal rule still answers 200), /readyz says degraded, a metric
// and the log say so, and the controls are re-run with backoff until the
// resolver is back, within seconds of its return. A leak still takes the
// door down.
func TestOutageIsNotALeak(t *testing.T) {
	t.Parallel()
	up := newSwitchableUpstream(t)
	const probeAddr = "127.0.0.1:41001"
	var f *fixture
	var leak, tries = false, 0
	var mu sync.Mutex
	f = startWith(t, func(o *Options) {
		o.Load = func() (*policy.Policy, error) {
			return policy.Parse(strings.NewReader(fmt.Sprintf(`version: 1
listen:
  admin: 127.0.0.1:0
  dns: 127.0.0.1:0
resolver:
  upstreams: [%q]
allow:
  - name: literal
    cidrs: [127.0.0.1/32]
    ports: ["1024-65535"]
    pages: ["*"]
  - name: names
    hosts: [control.example.com]
    cidrs: [203.0.113.0/24]
`, up.addr)), "t.yaml")
		}
		o.ProxyConfig.ReadyExempt = func(ap, _ netip.AddrPort) bool { return ap == netip.MustParseAddrPort(probeAddr) }
		o.OutageRetry = 20 * time.Millisecond
		o.Verify = func(ctx context.Context, p *policy.Policy) Verdict {
			mu.Lock()
			defer mu.Unlock()
			tries++
			if leak {
				return Verdict{Leaks: []string{"tcp-direct 203.0.113.100:443: connected"}}
			}
			if f == nil || f.d.dns == nil {
				return Verdict{Sealed: true} // boot: the resolver is up
			}
			// tryAsk: the daemon runs this (retries too), not the test
			if got := tryAsk(f.d, "tcp", probeAddr, "control.example.com"); got != "NOERROR+answer" {
				return Verdict{ControlsFailed: []string{"dns-control/control.example.com: " + got}}
			}
			return Verdict{Sealed: true}
		}
	})
	if got := f.status(t, f.a); got != 200 {
		t.Fatalf("origin a after boot: %d", got)
	}
	up.stop()
	f.d.scheduled(context.Background())
	if got := f.status(t, f.a); got != 200 {
		t.Errorf("an address-literal rule during a resolver outage: %d, want 200 (an outage is not a leak)", got)
	}
	code, body := readyz(t, f)
	if code != 200 || !strings.Contains(body, "degraded") {
		t.Errorf("/readyz during the outage: %d %q, want 200 and degraded", code, body)
	}
	if n := counter(t, f, "egressd_selftest_degraded"); n != 1 {
		t.Errorf("egressd_selftest_degraded = %d during the outage, want 1", n)
	}
	mu.Lock()
	before := tries
	mu.Unlock()
	up.start()
	waitFor(t, "the controls to pass again once the resolver is back", func() bool {
		code, body := readyz(t, f)
		return code == 200 && !strings.Contains(body, "degraded")
	})
	mu.Lock()
	if tries == before {
		t.Error("recovered without re-running the self-test")
	}
	mu.Unlock()
	if n := counter(t, f, "egressd_selftest_degraded"); n != 0 {
		t.Errorf("egressd_selftest_degraded = %d after recovery, want 0", n)
	}
	// a leak is not an outage: the door closes
	mu.Lock()
	leak = true
	mu.Unlock()
	f.d.scheduled(context.Background())
	if got := f.status(t, f.a); got != 503 {
		t.Errorf("origin a after a scheduled self-test found a leak: %d, want 503", got)
	}
	resp, err := http.Get("http://" + f.d.adminAddr + "/readyz")
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 503 || !strings.Contains(string(b), "leak") {
			t.Errorf("/readyz after a leak: %d %q", resp.StatusCode, b)
		}
	}
}

// TestOutageRetriesRunOnlyControls: while a deployment is degraded for an
// outage, each retry re-runs only the positive controls (Options.Controls),
// not the whole self-test; once they pass, one full self-test confirms and
// the deployment is no longer degraded.
func TestOutageRetriesRunOnlyControls(t *testing.T) {
	const failingControls = 3
	var full, controls atomic.Int64
	var outage atomic.Bool
	f := startWith(t, func(o *Options) {
		o.OutageRetry = 5 * time.Millisecond
		o.Verify = func(context.Context, *policy.Policy) Verdict {
			full.Add(1)
			if outage.Load() {
				return Verdict{ControlsFailed: []string{"expect/https://control.example.com/: upstream down"}}
			}
			return Verdict{Sealed: true}
		}
		o.Controls = func(context.Context, *policy.Policy) Verdict {
			if controls.Add(1) <= failingControls {
				return Verdict{ControlsFailed: []string{"expect/https://control.example.com/: upstream down"}}
			}
			outage.Store(false) // the upstream is back
			return Verdict{Sealed: true}
		}
	})
	boot := full.Load()
	outage.Store(true)
	f.d.scheduled(context.Background())
	if ok, why := f.d.Ready(); !ok || !strings.Contains(why, "degraded") {
		t.Fatalf("after a scheduled self-test during an outage: ready %v %q, want degraded", ok, why)
	}
	waitFor(t, "the controls to pass and one self-test to confirm", func() bool {
		_, why := f.d.Ready()
		return !strings.Contains(why, "degraded")
	})
	if n := controls.Load(); n != failingControls+1 {
		t.Errorf("controls-only runs: %d, want %d (%d failing, then one passing)", n, failingControls+1, failingControls)
	}
	// the scheduled run that found the outage, and the one that confirms
	if n := full.Load() - boot; n != 2 {
		t.Errorf("full self-tests after boot: %d, want 2 (the scheduled one, then one to confirm once the controls pass)", n)
	}
	if n := counter(t, f, `egressd_selftest_runs_total{result="control-failed",trigger="outage-controls"}`); n != failingControls {
		t.Errorf("control-failed outage-controls runs counted: %d, want %d", n, failingControls)
	}
}
