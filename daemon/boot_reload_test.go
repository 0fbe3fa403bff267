package daemon

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy"
)

// TestRedteamReloadDuringBootSelfTest: the boot self-test runs without
// reloadMu, and a reload (SIGHUP, a file change: WatchReload runs beside
// Run from the start) shows its candidate to every connection in the
// self-test's set, the boot run's included. The boot run's probes are
// then decided by the candidate, and the boot verdict (setReadiness) marks
// the boot policy verified on the candidate's answers: a boot policy that
// leaks is proven by a candidate that does not (talked round). Finished
// in the other order, the boot verdict overwrites the reload's: the
// policy in force (the candidate, swapped in) is no longer the verified
// one and egressd refuses everything (cries wolf).
func TestRedteamReloadDuringBootSelfTest(t *testing.T) {
	oa := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	ob := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer oa.Close()
	defer ob.Close()
	path := filepath.Join(t.TempDir(), "egressd.yaml")
	os.WriteFile(path, []byte(config("127.0.0.1:0", port(oa.URL))), 0o600)
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	probe := &probeClient{conns: map[netip.AddrPort]bool{}}
	bootIn, bootRel := make(chan *policy.Policy, 1), make(chan struct{})
	reloadIn, reloadRel := make(chan *policy.Policy, 1), make(chan struct{})
	var calls atomic.Int64
	d, err := New(Options{
		Load:          func() (*policy.Policy, error) { return policy.Load(path) },
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		ProxyListener: pl,
		ProxyConfig:   proxy.Config{ReadyExempt: probe.exempt},
		Verify: func(ctx context.Context, p *policy.Policy) Verdict {
			// boot first; the reload's second (the test orders them)
			if calls.Add(1) == 1 {
				bootIn <- p
				<-bootRel
			} else {
				reloadIn <- p
				<-reloadRel
			}
			return Verdict{Sealed: true}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx, nil) }()
	defer func() { cancel(); <-done }()

	var bootP *policy.Policy
	select {
	case bootP = <-bootIn:
	case <-time.After(10 * time.Second):
		t.Fatal("no boot self-test")
	}
	// The operator edits the config while the boot self-test runs.
	os.WriteFile(path, []byte(config("127.0.0.1:0", port(oa.URL), port(ob.URL))), 0o600)
	errc := make(chan error, 1)
	go func() { errc <- d.Reload(context.Background(), "file change") }()
	reloadInside := false
	select {
	case <-reloadIn:
		reloadInside = true
	case <-time.After(time.Second): // a reload that waits for the boot run
	}

	pc := probe.client(d.proxyAddr)
	if got := statusOf(t, pc, ob.URL); got == 200 {
		t.Errorf("the boot self-test's own request to b (the boot policy denies it): %d, want 403: the reload's candidate decided the boot run's probe, and the boot policy is verified on its answers", got)
	}

	// Finish both; the reload first when it got in.
	if reloadInside {
		close(reloadRel)
		if err := <-errc; err != nil {
			t.Fatalf("reload: %v", err)
		}
		close(bootRel)
	} else {
		close(bootRel)
		<-reloadIn
		close(reloadRel)
		if err := <-errc; err != nil {
			t.Fatalf("reload: %v", err)
		}
	}
	<-d.Booted()
	sandbox := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: pl.Addr().String()}), DisableKeepAlives: true}}
	resp, err := sandbox.Get(oa.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		ok, why := d.Ready()
		t.Errorf("sandbox to a after a sealed boot and a sealed reload: %d (ready %v: %s; in force is the boot policy: %v, verified is the boot policy: %v), want 200",
			resp.StatusCode, ok, why, d.Policy() == bootP, d.verified.Load() == bootP)
	}
}
