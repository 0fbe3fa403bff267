package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/policy"
)

func config(admin string, ports ...string) string {
	return fmt.Sprintf(`version: 1
listen:
  admin: %s
allow:
  - name: origin
    cidrs: [127.0.0.1/32]
    ports: [%s]
    pages: ["*"]
`, admin, strings.Join(ports, ", "))
}

type fixture struct {
	d        *Daemon
	path     string
	client   *http.Client
	a, b     string // origin URLs
	leak     atomic.Bool
	verifies atomic.Int64
	stop     func() error // ends Run and returns its error
}

func start(t *testing.T) *fixture { t.Helper(); return startWith(t, nil) }

// startWith starts a daemon whose Options mod may change first; with a
// mod, no config watcher runs (the test reloads explicitly).
func startWith(t *testing.T, mod func(*Options)) *fixture {
	t.Helper()
	f := &fixture{}
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	o2 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(o.Close)
	t.Cleanup(o2.Close)
	f.a, f.b = o.URL, o2.URL
	f.path = filepath.Join(t.TempDir(), "egressd.yaml")
	os.WriteFile(f.path, []byte(config("127.0.0.1:0", port(o.URL))), 0o600)
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opt := Options{
		Load:   func() (*policy.Policy, error) { return policy.Load(f.path) },
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Verify: func(context.Context, *policy.Policy) Verdict {
			f.verifies.Add(1)
			if f.leak.Load() {
				return Verdict{Leaks: []string{"tcp-direct 203.0.113.100:443: connected"}}
			}
			return Verdict{Sealed: true}
		},
		ProxyListener: pl,
	}
	if mod != nil {
		mod(&opt)
	}
	f.d, err = New(opt)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- f.d.Run(ctx, started) }()
	if mod == nil { // tests that change Options reload explicitly: no watcher reloads behind their back
		go f.d.WatchReload(ctx, f.path)
	}
	f.stop = sync.OnceValue(func() error { cancel(); return <-done })
	t.Cleanup(func() { f.stop() })
	select { // Run fails before "started" when a listener cannot be bound
	case <-started:
	case err := <-done:
		done <- err // for f.stop
		t.Fatalf("Run ended before serving: %v", err)
	}
	select { // the boot self-test has set readiness: no test races it
	case <-f.d.Booted():
	case <-time.After(10 * time.Second):
		t.Fatal("the boot self-test did not finish")
	}
	f.client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: pl.Addr().String()}), DisableKeepAlives: true}}
	return f
}

func port(u string) string {
	_, p, _ := net.SplitHostPort(strings.TrimPrefix(u, "http://"))
	return p
}

func (f *fixture) status(t *testing.T, u string) int {
	t.Helper()
	resp, err := f.client.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func (f *fixture) write(t *testing.T, s string) {
	t.Helper()
	tmp := f.path + ".tmp"
	if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, f.path); err != nil { // as editors and ConfigMaps do
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func TestReload(t *testing.T) {
	t.Parallel()
	f := start(t)
	if got := f.status(t, f.a); got != 200 {
		t.Fatalf("origin a: %d, want 200", got)
	}
	if got := f.status(t, f.b); got != 403 {
		t.Fatalf("origin b before reload: %d, want 403", got)
	}
	// a good change, seen by the file watcher (written again until seen:
	// the watcher may not be registered yet when the test starts writing)
	next := time.Now()
	waitFor(t, "the new policy", func() bool {
		if time.Now().After(next) {
			f.write(t, config("127.0.0.1:0", port(f.a), port(f.b)))
			next = time.Now().Add(time.Second)
		}
		return f.status(t, f.b) == 200
	})

	// a broken change: rejected, the old policy still answers
	f.write(t, "version: 1\nallow:\n  - hosts: [\"*.com\"]\n")
	if err := f.d.Reload(context.Background(), "test"); err == nil || !strings.Contains(err.Error(), `"*.com"`) {
		t.Fatalf("Reload of a broken config: %v, want the file:line error", err)
	}
	if f.status(t, f.a) != 200 || f.status(t, f.b) != 200 {
		t.Fatal("a broken config changed the policy in force")
	}

	// a change that leaks is dropped
	f.leak.Store(true)
	f.write(t, config("127.0.0.1:0", port(f.a)))
	if err := f.d.Reload(context.Background(), "test"); err == nil || !strings.Contains(err.Error(), "dropped") {
		t.Fatalf("Reload of a leaking config: %v, want its candidate dropped", err)
	}
	if got := f.status(t, f.b); got != 200 {
		t.Fatalf("after rollback origin b: %d, want 200 (the last good policy)", got)
	}
}

func TestReadiness(t *testing.T) {
	t.Parallel()
	f := start(t)
	admin := "http://" + f.d.adminAddr
	resp, err := http.Get(admin + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/readyz after a sealed boot self-test: %d", resp.StatusCode)
	}
	// a scheduled run that finds a leak takes readiness away, and the proxy refuses
	f.leak.Store(true)
	f.d.scheduled(context.Background())
	resp, _ = http.Get(admin + "/readyz")
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !strings.Contains(string(b), "leak") {
		t.Fatalf("/readyz after a leak: %d %q", resp.StatusCode, b)
	}
	if got := f.status(t, f.a); got != 503 {
		t.Fatalf("proxy while not ready: %d, want 503", got)
	}
	resp, _ = http.Get(admin + "/metrics")
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `egressd_selftest_runs_total{result="leak",trigger="schedule"} 1`) {
		t.Errorf("metrics lack the leak count")
	}
}

func TestNoSelftestIsLoud(t *testing.T) {
	t.Parallel()
	_, err := New(Options{Load: func() (*policy.Policy, error) { return policy.Parse(strings.NewReader("version: 1\n"), "x") }, Logger: slog.Default()})
	if err == nil || !strings.Contains(err.Error(), "--no-selftest") {
		t.Fatalf("New without Verify: %v, want a refusal naming --no-selftest", err)
	}
}

func TestReloadOnSIGHUP(t *testing.T) {
	// Not parallel: it sends SIGHUP to this process, which every running daemon's WatchReload would take.
	f := start(t)
	// our own registration keeps SIGHUP from ending the test binary while
	// WatchReload registers its handler
	guard := make(chan os.Signal, 16)
	signal.Notify(guard, syscall.SIGHUP)
	defer signal.Stop(guard)
	select { // readiness: WatchReload has registered its handler
	case <-f.d.Watching():
	case <-time.After(5 * time.Second):
		t.Fatal("WatchReload did not start watching")
	}
	// nothing touches the file: only SIGHUP can cause this reload, and it
	// finds the policy unchanged
	before := counter(t, f, `egressd_reloads_total{result="unchanged"}`)
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitFor(t, "a SIGHUP reload", func() bool {
		return counter(t, f, `egressd_reloads_total{result="unchanged"}`) > before
	})
}

func counter(t *testing.T, f *fixture, name string) int {
	t.Helper()
	resp, err := http.Get("http://" + f.d.adminAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, name+" ") {
			var n int
			fmt.Sscan(strings.TrimPrefix(l, name+" "), &n)
			return n
		}
	}
	return 0
}

// TestLeakWebhook: a scheduled self-test that finds a leak posts it to
// selftest.webhook, a sealed one posts nothing, and a reload that changes
// the webhook takes effect for the next run.
func TestLeakWebhook(t *testing.T) {
	t.Parallel()
	type post struct {
		hook string
		body map[string]any
	}
	posts := make(chan post, 4)
	hook := func(name string) string {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var body map[string]any
			json.NewDecoder(r.Body).Decode(&body)
			posts <- post{name, body}
		}))
		t.Cleanup(s.Close)
		return s.URL
	}
	first, second := hook("first"), hook("second")
	f := start(t)
	withHook := func(u string) string {
		return config("127.0.0.1:0", port(f.a)) + "selftest:\n  webhook: " + u + "\n"
	}
	ctx := context.Background()
	// explicit reloads: the file watcher may not be registered yet
	f.write(t, withHook(first))
	if err := f.d.Reload(ctx, "test"); err != nil || f.d.Policy().Selftest.Webhook != first {
		t.Fatalf("reload with the first webhook: %v, webhook %q", err, f.d.Policy().Selftest.Webhook)
	}

	f.d.scheduled(ctx) // sealed: nothing to report
	select {
	case p := <-posts:
		t.Fatalf("a sealed run posted to the %s webhook: %v", p.hook, p.body)
	case <-time.After(200 * time.Millisecond):
	}

	f.leak.Store(true)
	f.d.scheduled(ctx)
	select {
	case p := <-posts:
		if p.hook != "first" || p.body["event"] != "egressd.selftest.leak" || !strings.Contains(fmt.Sprint(p.body["leaks"]), "tcp-direct") {
			t.Fatalf("leak report: %s webhook, %v", p.hook, p.body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a leak was not posted to the webhook")
	}

	f.leak.Store(false) // the reload's own self-test must pass to keep the new policy
	f.write(t, withHook(second))
	if err := f.d.Reload(ctx, "test"); err != nil || f.d.Policy().Selftest.Webhook != second {
		t.Fatalf("reload with the second webhook: %v, webhook %q", err, f.d.Policy().Selftest.Webhook)
	}
	f.leak.Store(true)
	f.d.scheduled(ctx)
	select {
	case p := <-posts:
		if p.hook != "second" {
			t.Fatalf("after the reload the leak went to the %s webhook", p.hook)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a leak after the reload was not posted")
	}
}

// TestQuarantineLoopbackOnly: the quarantine API acts for loopback clients
// only, while metrics stay open to whoever reaches the admin port.
func TestQuarantineLoopbackOnly(t *testing.T) {
	t.Parallel()
	f := start(t)
	h := f.d.adminHandler()
	do := func(method, path, from string) int {
		req := httptest.NewRequest(method, path, nil)
		req.RemoteAddr = from
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	for _, from := range []string{"198.51.100.7:40000", "[2001:db8::7]:40000", "[::ffff:198.51.100.7]:40000", "not-an-address"} {
		for _, m := range []string{"POST", "DELETE", "GET"} {
			path := "/quarantine/agent-a"
			if m == "GET" {
				path = "/quarantine"
			}
			if code := do(m, path, from); code != http.StatusForbidden {
				t.Errorf("%s %s from %s: %d, want 403", m, path, from, code)
			}
		}
		if code := do("GET", "/metrics", from); code != http.StatusOK {
			t.Errorf("GET /metrics from %s: %d, want 200", from, code)
		}
	}
	if len(f.d.px.Quarantined()) != 0 {
		t.Fatalf("a remote client changed the quarantine: %v", f.d.px.Quarantined())
	}
	// negative control: the same calls from loopback act
	for _, from := range []string{"127.0.0.1:40000", "[::1]:40000", "[::ffff:127.0.0.1]:40000"} {
		if code := do("POST", "/quarantine/agent-a", from); code != http.StatusOK {
			t.Errorf("POST from %s: %d, want 200", from, code)
		}
		if got := f.d.px.Quarantined(); len(got) != 1 {
			t.Errorf("after POST from %s: quarantined %v", from, got)
		}
		if code := do("DELETE", "/quarantine/agent-a", from); code != http.StatusOK {
			t.Errorf("DELETE from %s: %d, want 200", from, code)
		}
	}
}

// TestOwnListenersThroughProxy: with a rule that unlocks loopback, the
// admin endpoint and the DNS port are still not reachable through the
// proxy (proxy-loop), so a sandbox cannot lift its own quarantine.
func TestOwnListenersThroughProxy(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "egressd.yaml")
	os.WriteFile(path, []byte(`version: 1
listen:
  admin: 127.0.0.1:0
  dns: 127.0.0.1:0
allow:
  - name: local-dev
    cidrs: [127.0.0.0/8]
    ports: ["1-65535"]
    pages: ["*"]
`), 0o600)
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(Options{
		Load:            func() (*policy.Policy, error) { return policy.Load(path) },
		Logger:          slog.New(slog.NewTextHandler(io.Discard, nil)),
		NoSelftest:      true,
		AllowUnverified: true,
		ProxyListener:   pl,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx, started) }()
	t.Cleanup(func() { cancel(); <-done })
	<-started
	_, dnsAddr, adminAddr := d.Addrs()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: pl.Addr().String()}), DisableKeepAlives: true}}
	d.Proxy().Quarantine("127.0.0.1")
	d.Proxy().Lift("127.0.0.1")
	for _, u := range []string{"http://" + adminAddr + "/metrics", "http://" + adminAddr + "/quarantine", "http://" + dnsAddr + "/"} {
		resp, err := client.Get(u)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 403 || resp.Header.Get("X-Egressd-Deny") != "proxy-loop" {
			t.Errorf("GET %s through the proxy: %d %q, want 403 proxy-loop", u, resp.StatusCode, resp.Header.Get("X-Egressd-Deny"))
		}
	}
	req, _ := http.NewRequest("DELETE", "http://"+adminAddr+"/quarantine/127.0.0.1", nil)
	if resp, err := client.Do(req); err != nil || resp.StatusCode != 403 {
		t.Errorf("DELETE quarantine through the proxy: %v %v", resp, err)
	}
	for _, a := range []string{adminAddr, dnsAddr} {
		c, err := net.Dial("tcp", pl.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", a, a)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 512)
		n, _ := c.Read(b)
		c.Close()
		if !strings.HasPrefix(string(b[:n]), "HTTP/1.1 403") || !strings.Contains(string(b[:n]), "X-Egressd-Deny: proxy-loop") {
			t.Errorf("CONNECT %s: %.100q, want 403 proxy-loop", a, b[:n])
		}
	}
}

// TestQuarantineRefusesProxyClients: a loopback client that is the local
// end of one of the proxy's own upstream connections is refused by the
// quarantine API (second lock behind proxy-loop).
func TestQuarantineRefusesProxyClients(t *testing.T) {
	t.Parallel()
	f := start(t)
	seen := make(chan string, 1)
	release := make(chan struct{})
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.RemoteAddr
		<-release
	}))
	defer o.Close()
	defer close(release)
	f.write(t, config("127.0.0.1:0", port(o.URL)))
	if err := f.d.Reload(context.Background(), "test"); err != nil {
		t.Fatal(err)
	}
	go f.client.Get(o.URL)
	from := <-seen
	req := httptest.NewRequest("POST", "/quarantine/agent-a", nil)
	req.RemoteAddr = from
	rec := httptest.NewRecorder()
	f.d.adminHandler().ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden {
		t.Errorf("quarantine API from the proxy's upstream %s: %d, want 403", from, rec.Code)
	}
	if len(f.d.px.Quarantined()) != 0 {
		t.Errorf("a request through the proxy changed the quarantine")
	}
}
