package daemon

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egressd/egressd/policy"
)

// probeClient is an HTTP client whose connections the daemon's
// ReadyExempt names: the self-test's own traffic, decided by a candidate.
type probeClient struct {
	mu    sync.Mutex
	conns map[netip.AddrPort]bool
}

func (p *probeClient) exempt(ap, _ netip.AddrPort) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.conns[ap]
}

func (p *probeClient) client(proxyAddr string) *http.Client {
	d := &net.Dialer{}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		Proxy:             http.ProxyURL(&url.URL{Scheme: "http", Host: proxyAddr}),
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err == nil {
				p.mu.Lock()
				p.conns[netip.MustParseAddrPort(c.LocalAddr().String())] = true
				p.mu.Unlock()
			}
			return c, err
		},
	}}
}

// connectStatus is the status egressd answers a CONNECT to authority
// with, from the self-test's own connection (probe) or a sandbox's.
func (df *doorFixture) connectStatus(t *testing.T, authority string, probe bool) int {
	t.Helper()
	c, err := net.Dial("tcp", df.d.proxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if probe {
		df.probe.mu.Lock()
		df.probe.conns[netip.MustParseAddrPort(c.LocalAddr().String())] = true
		df.probe.mu.Unlock()
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", authority, authority)
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Errorf("CONNECT %s: %v", authority, err)
		return 0
	}
	return resp.StatusCode
}

func statusOf(t *testing.T, c *http.Client, u string) int {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Errorf("GET %s: %v", u, err)
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// doorFixture is a daemon whose reload self-tests can be held open: while
// one runs, hold receives the candidate and the test decides when the
// verdict comes.
type doorFixture struct {
	*fixture
	probe   *probeClient
	pc      *http.Client
	reload  atomic.Bool // the next Verify calls are reloads' (boot and schedule are not held)
	inside  chan *policy.Policy
	release chan Verdict
}

func startDoor(t *testing.T) *doorFixture {
	t.Helper()
	df := &doorFixture{probe: &probeClient{conns: map[netip.AddrPort]bool{}}, inside: make(chan *policy.Policy), release: make(chan Verdict)}
	df.fixture = startWith(t, func(o *Options) {
		o.ProxyConfig.ReadyExempt = df.probe.exempt
		inner := o.Verify
		o.Verify = func(ctx context.Context, p *policy.Policy) Verdict {
			if !df.reload.Load() {
				return inner(ctx, p)
			}
			df.verifies.Add(1)
			df.inside <- p
			return <-df.release
		}
	})
	df.pc = df.probe.client(df.d.proxyAddr)
	df.reload.Store(true)
	return df
}

// reloadAsync starts a Reload and returns its result channel.
func (df *doorFixture) reloadAsync(why string) <-chan error {
	errc := make(chan error, 1)
	go func() { errc <- df.d.Reload(context.Background(), why) }()
	return errc
}

func (df *doorFixture) waitInside(t *testing.T) *policy.Policy {
	t.Helper()
	select {
	case p := <-df.inside:
		return p
	case <-time.After(10 * time.Second):
		t.Fatal("no reload self-test started")
		return nil
	}
}

func waitErr(t *testing.T, errc <-chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Reload did not return")
		return nil
	}
}

// TestReloadRefusesNoAllowedRequest: while a candidate is verified (a
// sealed one, a leaking one, an unchanged config, a burst of triggers),
// sandboxes keep being decided by the verified policy: not one allowed
// request is refused. Clients hammer an allowed origin all along and every
// non-200 is counted; inside each held self-test the test also asks
// itself, so the window is exercised whatever the scheduler does.
func TestReloadRefusesNoAllowedRequest(t *testing.T) {
	t.Parallel()
	df := startDoor(t)
	var stop atomic.Bool
	var refused, total atomic.Int64
	var wg sync.WaitGroup
	load := &http.Client{Timeout: 5 * time.Second, Transport: df.client.Transport}
	for range 2 {
		wg.Go(func() {
			for !stop.Load() {
				resp, err := load.Get(df.a)
				total.Add(1)
				if err != nil || resp.StatusCode != 200 {
					refused.Add(1)
				}
				if err == nil {
					resp.Body.Close()
				}
			}
		})
	}
	during := func(what string) {
		t.Helper()
		if got := df.status(t, df.a); got != 200 {
			t.Errorf("%s: origin a (allowed by the verified policy) got %d while the candidate was verified, want 200", what, got)
		}
	}

	// 1. a candidate that seals: a stays served throughout
	df.write(t, config("127.0.0.1:0", port(df.a), port(df.b)))
	errc := df.reloadAsync("test")
	df.waitInside(t)
	during("sealed candidate")
	df.release <- Verdict{Sealed: true}
	if err := waitErr(t, errc); err != nil {
		t.Fatalf("sealed reload: %v", err)
	}

	// 2. a candidate that leaks is dropped: a stays served throughout
	df.write(t, config("127.0.0.1:0", port(df.a)))
	errc = df.reloadAsync("test")
	df.waitInside(t)
	during("leaking candidate")
	df.release <- Verdict{Leaks: []string{"tcp-direct 203.0.113.100:443: connected"}}
	if err := waitErr(t, errc); err == nil {
		t.Fatal("a leaking candidate was not refused")
	}

	// 3. an unchanged config (the file the verified policy came from):
	// no self-test, nothing refused
	df.write(t, config("127.0.0.1:0", port(df.a), port(df.b)))
	errc = df.reloadAsync("SIGHUP")
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("unchanged reload: %v", err)
		}
	case <-df.inside:
		t.Error("an unchanged config ran a reload self-test, want a no-op")
		during("unchanged config")
		df.release <- Verdict{Sealed: true}
		waitErr(t, errc)
	case <-time.After(10 * time.Second):
		t.Fatal("the unchanged reload did not return")
	}
	if n := counter(t, df.fixture, `egressd_reloads_total{result="unchanged"}`); n != 1 {
		t.Errorf("egressd_reloads_total{result=\"unchanged\"} = %d, want 1", n)
	}

	// 4. a burst of writes: triggers that arrive while one candidate is
	// verified coalesce into one more reload
	df.write(t, config("127.0.0.1:0", port(df.a)))
	before := df.verifies.Load()
	first := df.reloadAsync("file change")
	df.waitInside(t)
	var burst []<-chan error
	for i := range 10 {
		if i%2 == 0 {
			df.write(t, config("127.0.0.1:0", port(df.a), port(df.b)))
		} else {
			df.write(t, config("127.0.0.1:0", port(df.a)))
		}
		burst = append(burst, df.reloadAsync("file change"))
	}
	// the burst has joined (or is about to join) one pending round; the
	// last write allows a only
	during("burst")
	df.release <- Verdict{Sealed: true}
	if err := waitErr(t, first); err != nil {
		t.Fatalf("first reload of the burst: %v", err)
	}
	// the coalesced round: the last file allows a only, as the first
	// round's candidate: it is unchanged and runs no self-test, or (if it
	// read a later write) one
	rounds := 1
	done := 0
	for done < len(burst) {
		select {
		case <-df.inside:
			rounds++
			during("burst, coalesced round")
			df.release <- Verdict{Sealed: true}
		case err := <-burst[done]:
			if err != nil {
				t.Errorf("burst reload %d: %v", done, err)
			}
			done++
		case <-time.After(10 * time.Second):
			t.Fatal("the burst did not finish")
		}
	}
	if n := df.verifies.Load() - before; n > 2 {
		t.Errorf("a burst of 11 triggers ran %d self-tests, want at most 2 (coalesced)", n)
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d requests across the reloads, %d refused; %d self-test rounds for the burst", total.Load(), refused.Load(), rounds)
	if refused.Load() != 0 {
		t.Errorf("%d of %d allowed requests refused across reloads, want 0", refused.Load(), total.Load())
	}
}

// TestLeakingCandidateNeverInForce: while a candidate that allows b is
// verified, only the self-test's own connections are decided by it (they
// reach b); a sandbox still gets the verified policy's 403, never a 200.
// The candidate leaks, so it is dropped: b stays denied for everyone.
func TestLeakingCandidateNeverInForce(t *testing.T) {
	t.Parallel()
	df := startDoor(t)
	df.write(t, config("127.0.0.1:0", port(df.a), port(df.b)))
	errc := df.reloadAsync("test")
	cand := df.waitInside(t)
	if got := df.status(t, df.b); got != 403 {
		t.Errorf("sandbox to b while the candidate that allows it is verified: %d, want 403 (the verified policy decides)", got)
	}
	if got := statusOf(t, df.pc, df.b); got != 200 {
		t.Errorf("the self-test's own connection to b: %d, want 200 (the candidate decides it)", got)
	}
	// A tunnel too: the self-test's CONNECT probes meet the candidate.
	bHost := strings.TrimSuffix(strings.TrimPrefix(df.b, "http://"), "/")
	if got := df.connectStatus(t, bHost, false); got != 403 {
		t.Errorf("sandbox CONNECT to b while the candidate that allows it is verified: %d, want 403", got)
	}
	if got := df.connectStatus(t, bHost, true); got != 200 {
		t.Errorf("the self-test's own CONNECT to b: %d, want 200 (the candidate decides it)", got)
	}
	if got := df.d.Policy(); got == cand {
		t.Error("the candidate is the policy in force before its self-test ended")
	}
	df.release <- Verdict{Leaks: []string{"tcp-direct 203.0.113.100:443: connected"}}
	if err := waitErr(t, errc); err == nil {
		t.Fatal("a leaking candidate was not refused")
	}
	for name, c := range map[string]*http.Client{"sandbox": df.client, "probe": df.pc} {
		if got := statusOf(t, c, df.b); got != 403 {
			t.Errorf("%s to b after the leaking candidate was dropped: %d, want 403", name, got)
		}
	}
	if got := df.status(t, df.a); got != 200 {
		t.Errorf("origin a after the dropped candidate: %d, want 200", got)
	}
	if ok, why := df.d.Ready(); !ok {
		t.Errorf("not ready after a dropped candidate: %s (the verified policy still serves)", why)
	}
}
