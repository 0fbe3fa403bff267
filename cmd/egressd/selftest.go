package main

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/egressd/egressd/ca"
	"github.com/egressd/egressd/daemon"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy"
	"github.com/egressd/egressd/sandbox"
	"github.com/egressd/egressd/selftest"
)

func init() { commands["selftest"] = cmdSelftest }

// historyFile, in the state directory, gets one JSON line per self-test run
// (selftest command and serve alike); `egressd report` reads it.
const historyFile = "selftest-history.jsonl"

// probeNSPrefix names the probe namespaces; CleanupStale removes those of
// dead processes.
const probeNSPrefix = "egprobe-"

// unlistedName is a name no allow rule should cover: the CONNECT probe's
// target and the SNI a fronting probe offers. .invalid never resolves
// (RFC 6761), so even a leak reaches nobody.
const unlistedName = "egressd-selftest-unlisted.invalid"

// metadataNames are metadata host names the proxy must refuse.
var metadataNames = []string{"metadata.google.internal"}

// proxyOnly is why serve without --walls does not run the direct-route
// probes: egressd manages no walls then, and building a probe namespace
// would add a link to a namespace egressd was not asked to touch.
const proxyOnly = "proxy-only mode: serve manages no walls (run serve --walls, or egressd selftest as root, to prove the direct routes)"

// needsRoot is why the direct-route probes do not run without root.
const needsRoot = "needs root: the direct-route probes run from a probe namespace wired like a sandbox; run egressd as root (`serve --no-selftest` serves unverified, and says so)"

func cmdSelftest(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("selftest", stderr)
	cfg := configFlag(fs)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	stateDir := fs.String("state-dir", defaultStateDir(), "directory holding egressd's CA and the self-test history")
	if pos, err := parseFlags(fs, args); err != nil || len(pos) > 0 {
		fmt.Fprintln(stderr, "usage: egressd selftest [--config FILE] [--json] [--state-dir DIR]")
		return exitUsage
	}
	p, err := loadPolicy(*cfg)
	if err != nil {
		printConfigError(stderr, err)
		return exitUsage
	}
	rep, mode, err := runSelftest(ctx, p, *stateDir, true)
	if err != nil {
		fmt.Fprintf(stderr, "egressd selftest: could not run: %v\n", err)
		return exitUsage
	}
	if err := recordRun(*stateDir, "selftest", mode, p, rep); err != nil {
		fmt.Fprintf(stderr, "egressd selftest: %v\n", err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetEscapeHTML(false)
		enc.Encode(rep)
	} else {
		rep.WriteTable(stdout)
	}
	if mode == modeLoopback && os.Geteuid() != 0 {
		fmt.Fprintln(stderr, "egressd selftest: not root: only the probes through the proxy and the resolver ran, from loopback; the direct-route probes need a probe namespace: run `sudo egressd selftest`")
	}
	switch rep.Outcome() {
	case selftest.OutcomeSealed:
		return exitOK
	case selftest.OutcomeLeak:
		return exitDeny
	}
	return exitUsage
}

// wireSelftest connects the self-test to serve: boot, reload and schedule
// all run the catalog (from a probe namespace as root; from loopback, with
// the direct-route probes reported as not run, otherwise), append the run
// to the history, and turn the report into the daemon's verdict. An
// incomplete run is never a sealed one.
func wireSelftest(opt *daemon.Gateway, stateDir string) {
	if opt.NoSelftest {
		return
	}
	log := opt.Logger
	walls := opt.Walls != nil
	opt.ReadyExempt = probeConns.has
	opt.Verify = func(ctx context.Context, p *policy.Policy) daemon.Verdict {
		rep, mode, err := runSelftest(ctx, p, stateDir, walls)
		if err == nil {
			if herr := recordRun(stateDir, "serve", mode, p, rep); herr != nil && log != nil {
				log.Error("self-test history", "err", herr)
			}
		}
		v := verdict(rep, err)
		if rep != nil && log != nil && !v.Sealed {
			for _, r := range append(rep.Failures(), rep.Unfinished()...) {
				log.LogAttrs(ctx, slog.LevelError, "self-test probe", slog.String("probe", r.ID), slog.String("status", string(r.Status)),
					slog.String("route", r.Route), slog.String("target", r.Target), slog.String("result", r.Result), slog.String("detail", r.Detail))
			}
		}
		return v
	}
}

// verdict maps a report to the daemon's verdict: sealed only if every probe
// ran and passed; leaks and failed positive controls are named; a run with
// probes that did not run or could not tell is an error, not a pass.
func verdict(rep *selftest.Report, err error) daemon.Verdict {
	if err != nil {
		return daemon.Verdict{Err: err}
	}
	v := daemon.Verdict{Sealed: rep.Sealed()}
	for _, r := range rep.Failures() {
		v.Leaks = append(v.Leaks, r.ID+": "+r.Detail)
	}
	var u, skipped []selftest.Result
	for _, r := range rep.Unfinished() {
		if r.Status == selftest.NotRun && r.Detail == proxyOnly {
			skipped = append(skipped, r)
		} else {
			u = append(u, r)
		}
	}
	if len(u) > 0 && len(v.Leaks) == 0 {
		v.Err = fmt.Errorf("self-test incomplete: %s", unfinishedSummary(u, len(rep.Results)))
	}
	if len(skipped) > 0 {
		// Proxy-only mode proves the checkpoint and says what it did not
		// prove; it is sealed only if everything else passed.
		v.Sealed = len(v.Leaks) == 0 && len(u) == 0
		v.Note = fmt.Sprintf("%d direct-route probes not run: %s", len(skipped), proxyOnly)
	}
	return v
}

// unfinishedSummary groups the probes that did not finish by reason:
// "17 of 36 probes not run: needs root: ...".
func unfinishedSummary(u []selftest.Result, total int) string {
	var reasons []string
	n := map[string]int{}
	for _, r := range u {
		k := string(r.Status) + ": " + r.Detail
		if n[k] == 0 {
			reasons = append(reasons, k)
		}
		n[k]++
	}
	parts := make([]string, len(reasons))
	for i, k := range reasons {
		parts[i] = fmt.Sprintf("%d of %d probes %s", n[k], total, k)
	}
	return strings.Join(parts, "; ")
}

// Modes of a run: where the probes came from.
const (
	modeNamespace = "namespace" // a probe namespace wired like a sandbox
	modeLoopback  = "loopback"  // egressd's own namespace: direct routes not run
)

// runSelftest runs the catalog for p. The error is for a run that could
// not start (the probe namespace could not be built); probes that could not
// run are in the report.
func runSelftest(ctx context.Context, p *policy.Policy, stateDir string, namespace bool) (*selftest.Report, string, error) {
	env, err := openProbeEnv(p, namespace)
	if err != nil {
		return nil, "", err
	}
	defer env.close()
	c := selftestConfig(p, trustRoots(p, stateDir))
	env.apply(&c)
	rep, err := selftest.Run(ctx, c)
	if err != nil {
		return nil, "", err
	}
	return rep, env.mode, nil
}

// recordRun appends a run to the history in stateDir.
func recordRun(stateDir, source, mode string, p *policy.Policy, rep *selftest.Report) error {
	if err := appendHistory(stateDir, historyLine{Source: source, Mode: mode, Config: p.Source, Report: rep}); err != nil {
		return fmt.Errorf("record self-test history in %s: %w", stateDir, err)
	}
	return nil
}

// historyLine is one line of the history file.
type historyLine struct {
	Source string           `json:"source"` // "selftest", "serve" or "run"
	Mode   string           `json:"mode"`   // modeNamespace or modeLoopback
	Config string           `json:"config"` // the config file the run tested
	Report *selftest.Report `json:"report"`
}

func appendHistory(stateDir string, h historyLine) error {
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(stateDir, historyFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	// One write per line: O_APPEND keeps concurrent runs' lines whole.
	_, werr := f.Write(append(b, '\n'))
	return errors.Join(werr, f.Close())
}

// trustRoots verifies the positive controls: the system roots, the
// config's upstream_ca, and egressd's own CA (inspected rules).
func trustRoots(p *policy.Policy, stateDir string) *x509.CertPool {
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	for _, f := range []string{p.UpstreamCA, filepath.Join(stateDir, "ca", ca.CertFile)} {
		if f == "" {
			continue
		}
		if pem, err := os.ReadFile(f); err == nil {
			pool.AppendCertsFromPEM(pem)
		}
	}
	return pool
}

// selftestConfig derives the catalog from the policy: the selftest keys,
// plus requests the policy refuses on each mirror and page-type rule, a
// fronting probe on a host-only rule, and the Host-header trick. The
// socket hooks and the proxy and resolver addresses come from the probe
// environment.
func selftestConfig(p *policy.Policy, roots *x509.CertPool) selftest.Config {
	st := &p.Selftest
	c := selftest.Config{
		TCP: st.TCP, UDP: st.UDP, IPv6: st.IPv6, Resolvers: st.Resolvers,
		Metadata: st.Metadata, MetadataNames: metadataNames,
		CanaryName: st.CanaryName, CanaryURL: st.CanaryURL, CanaryLog: st.CanaryLog,
		ExpectReachable: st.ExpectReachable,
		RootCAs:         roots,
		Timeout:         st.Timeout,
	}
	seen := map[netip.Addr]bool{}
	for _, list := range [][]netip.AddrPort{st.TCP, st.UDP, st.IPv6, st.Resolvers} {
		for _, ap := range list {
			if a := ap.Addr().Unmap(); !seen[a] {
				seen[a] = true
				c.ICMP = append(c.ICMP, a)
			}
		}
	}
	if t, err := policy.ParseAuthority(unlistedName + ":443"); err == nil && !p.DecideTarget(&t).Allow {
		c.Unlisted = unlistedName + ":443"
		c.SNIName = unlistedName
	}
	c.SNIHost = sniHost(p)
	if c.SNIName == "" {
		c.SNIHost = ""
	}
	if u := hostTrickURL(p, c.SNIHost); u != "" {
		c.HostTrickURL = u
		c.HostTrickHost = unlistedName
		for _, a := range st.Metadata {
			if a.Is4() {
				c.HostTrickHost = a.String()
				break
			}
		}
	}
	c.Refused = refusedRequests(p)
	c.Own = ownListeners(p)
	c.InspectHost, c.HeadBytes = inspectHost(p), p.Limits.HeaderBytes
	c.SilentHost, c.SilentDeadline = cmpOr(c.InspectHost, c.SNIHost), proxy.HelloTimeout
	// In transparent mode the walls send sandbox TCP 443 and 80 to
	// egressd: a direct probe there must find egressd refusing, not fail
	// for having connected.
	if p.Listen.Transparent != "" {
		c.Redirected = append(c.Redirected, 443)
	}
	if p.Listen.TransparentHTTP != "" {
		c.Redirected = append(c.Redirected, 80)
	}
	return c
}

// ownListeners are egressd's admin and DNS listeners as the proxy would
// dial them (an unspecified bind: loopback): none may be reachable through
// the proxy.
func ownListeners(p *policy.Policy) []string {
	var out []string
	for _, a := range []string{p.Listen.Admin, p.Listen.DNS} {
		h, port, err := net.SplitHostPort(a)
		if err != nil || port == "0" {
			continue
		}
		if ip := net.ParseIP(h); h == "" || ip != nil && ip.IsUnspecified() {
			h = "127.0.0.1"
		}
		out = append(out, net.JoinHostPort(h, port))
	}
	return out
}

// inspectHost picks host:port of an inspected rule on 443 (the first exact
// host), for the inner head-limit probe; "" when the policy has none.
func inspectHost(p *policy.Policy) string {
	for _, r := range p.Rules {
		h := ruleHost(r)
		if h == "" || !r.AllowsPort(443) {
			continue
		}
		t, err := policy.ParseAuthority(h + ":443")
		if err != nil {
			continue
		}
		if d := p.DecideTarget(&t); d.Allow && d.Inspect {
			return h + ":443"
		}
	}
	return ""
}

// sniHost picks host:port of a spliced (host-only, TLS) tunnel: an
// expect_reachable https URL if one is, else the first exact host of a
// host-only rule on 443. "" when the policy has none: then no tunnel can
// be fronted.
func sniHost(p *policy.Policy) string {
	spliced := func(hp string) bool {
		t, err := policy.ParseAuthority(hp)
		if err != nil || t.Addr.IsValid() {
			return false
		}
		d := p.DecideTarget(&t)
		return d.Allow && !d.Inspect && d.Rule.TLS
	}
	for _, s := range p.Selftest.ExpectReachable {
		u, err := url.Parse(s)
		if err != nil || u.Scheme != "https" {
			continue
		}
		hp := net.JoinHostPort(u.Hostname(), cmpOr(u.Port(), "443"))
		if spliced(hp) {
			return hp
		}
	}
	for _, r := range p.Rules {
		if h := ruleHost(r); h != "" && r.HostOnly() && r.TLS && r.AllowsPort(443) && spliced(h+":443") {
			return h + ":443"
		}
	}
	return ""
}

// hostTrickURL is an absolute http URL to an allowed host: the first
// expect_reachable target, else the fronting probe's host.
func hostTrickURL(p *policy.Policy, sni string) string {
	for _, s := range p.Selftest.ExpectReachable {
		if u, err := url.Parse(s); err == nil {
			port := u.Port()
			if port == "" {
				port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
			}
			return "http://" + net.JoinHostPort(u.Hostname(), port) + "/"
		}
	}
	if sni != "" {
		return "http://" + sni + "/"
	}
	return ""
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// ruleHost is a concrete host a rule covers: its first exact name, or a
// name under its first wildcard; "" for "*" and cidrs-only rules.
func ruleHost(r *policy.Rule) string {
	for h := range r.Hosts.All() {
		if h != "*" && !strings.HasPrefix(h, "*.") {
			return h
		}
	}
	for h := range r.Hosts.All() {
		if s, ok := strings.CutPrefix(h, "*."); ok {
			return "egressd-selftest." + s
		}
	}
	return ""
}

// pageProbes are the write pages a page-type rule must refuse unless it
// allows that page type.
var pageProbes = []struct {
	page                      policy.PageType
	method, path, ctype, body string
}{
	{policy.PageLogin, "POST", "/login", "application/x-www-form-urlencoded", "username=egressd-selftest&password=egressd-selftest"},
	{policy.PageUpload, "POST", "/upload", "multipart/form-data; boundary=egressd", "--egressd\r\nContent-Disposition: form-data; name=\"file\"; filename=\"egressd-selftest.txt\"\r\n\r\negressd-selftest\r\n--egressd--\r\n"},
	{policy.PagePosting, "POST", "/comments", "application/x-www-form-urlencoded", "comment=egressd-selftest"},
}

// refusedRequests derives, per mirror rule, a publish request to one of its
// hosts and, per page-type rule, a login, an upload and a posting request
// for each of those page types the rule does not allow. Each is checked
// offline against the policy: only requests the policy itself refuses
// become probes, with the reason the refusal must carry.
func refusedRequests(p *policy.Policy) []selftest.Request {
	var out []selftest.Request
	add := func(id, route, base, method, path, ctype, body string) {
		raw := base + path
		t, err := policy.ParseURL(raw)
		if err != nil {
			return
		}
		d := p.DecideRequest(&t, method, ctype, int64(len(body)))
		if d.Allow {
			return
		}
		out = append(out, selftest.Request{ID: id, Route: route, Method: method, URL: raw, ContentType: ctype, Body: body, Reason: d.Reason.String()})
	}
	for _, r := range p.Rules {
		host := ruleHost(r)
		if host == "" {
			continue
		}
		var base string
		switch {
		case r.AllowsPort(443):
			base = "https://" + host
		case r.AllowsPort(80):
			base = "http://" + host
		default:
			continue
		}
		if r.Mirror != policy.MirrorNone {
			// Each ecosystem declares its publish probe (policy/classify).
			if q, ok := policy.PublishProbe(r.Mirror); ok {
				add("mirror-publish/"+r.Name, fmt.Sprintf("proxy: %s publish on mirror rule %s", r.Mirror, r.Name), base, q.Method, q.Path, q.ContentType, q.Body)
			}
			continue
		}
		if r.AllPages {
			continue
		}
		// A read carrying data in its query: over limits.query_bytes it
		// must be refused (query-budget), whatever the page type.
		add("query-budget/"+r.Name, fmt.Sprintf("proxy: query over limits.query_bytes on rule %s", r.Name), base, "GET",
			"/egressd-selftest?q="+strings.Repeat("a", p.Limits.QueryBytes), "", "")
		// A read carrying data in a header: over limits.read_head_bytes it
		// must be refused (header-budget).
		if q, ok := headerBudgetProbe(p, r, base); ok {
			out = append(out, q)
		}
		for _, q := range pageProbes {
			if !r.Pages.Has(q.page) {
				add(fmt.Sprintf("page-%s/%s", q.page, r.Name), fmt.Sprintf("proxy: %s page on rule %s", q.page, r.Name), base, q.method, q.path, q.ctype, q.body)
			}
		}
	}
	return append(out, identityProbes(p)...)
}

// probeEnv is where the probes run and how they reach the proxy and the
// resolver.
type probeEnv struct {
	mode       string
	dial       selftest.DialFunc
	proxyDial  selftest.DialFunc
	dnsDial    selftest.DialFunc
	listenICMP func(string) (net.PacketConn, error)
	proxy, dns netip.AddrPort
	skip       string
	close      func()
}

func (e *probeEnv) apply(c *selftest.Config) {
	c.Dial, c.ProxyDial, c.ResolverDial, c.ListenICMP, c.SkipDirect = e.dial, probeConns.track(e.proxyDial), e.dnsDial, e.listenICMP, e.skip
	c.Proxy, c.DNS = e.proxy, e.dns
}

var probeSeq atomic.Uint64

// probeConns holds the local addresses of the self-test's open connections
// to egressd's own proxy. The proxy refuses everything until the boot
// self-test is sealed, which would include the self-test itself; with
// proxy.Config.ReadyExempt = probeConns.has these connections, and only
// they, pass the readiness gate.
var probeConns = connSet{m: map[netip.AddrPort]int{}}

type connSet struct {
	mu sync.Mutex
	m  map[netip.AddrPort]int
}

func (s *connSet) has(ap netip.AddrPort) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())] > 0
}

// track wraps a dialer so that each connection's local address is in the
// set while the connection is open.
func (s *connSet) track(dial selftest.DialFunc) selftest.DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		ap, err := netip.ParseAddrPort(c.LocalAddr().String())
		if err != nil {
			return c, nil
		}
		ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
		s.mu.Lock()
		s.m[ap]++
		s.mu.Unlock()
		return &trackedConn{Conn: c, done: func() {
			s.mu.Lock()
			if s.m[ap]--; s.m[ap] <= 0 {
				delete(s.m, ap)
			}
			s.mu.Unlock()
		}}, nil
	}
}

type trackedConn struct {
	net.Conn
	once sync.Once
	done func()
}

func (c *trackedConn) Close() error {
	c.once.Do(c.done)
	return c.Conn.Close()
}

// openProbeEnv builds the probe namespace as root: a namespace wired like
// a sandbox (the sandbox interface prefix, so the same walls apply; an
// address from the sandbox pool; default routes via this namespace), where
// every probe socket is created. Without root it returns the loopback
// environment: the probes through the proxy and the resolver run from
// here, and the direct-route probes are reported as not run.
func openProbeEnv(p *policy.Policy, namespace bool) (*probeEnv, error) {
	proxyAP, err := listenAddrPort(p.Listen.Proxy)
	if err != nil {
		return nil, fmt.Errorf("listen.proxy: %w", err)
	}
	var dnsAP netip.AddrPort
	if p.Listen.DNS != "" {
		if dnsAP, err = listenAddrPort(p.Listen.DNS); err != nil {
			return nil, fmt.Errorf("listen.dns: %w", err)
		}
	}
	local := loopbackDialer()
	if skip := needsRoot; !namespace || os.Geteuid() != 0 {
		if !namespace {
			skip = proxyOnly
		}
		refuse := func(context.Context, string, string) (net.Conn, error) { return nil, errors.New(skip) }
		return &probeEnv{mode: modeLoopback, dial: refuse, proxyDial: local, dnsDial: local, proxy: loopbackOf(proxyAP), dns: loopbackOf(dnsAP), skip: skip, close: func() {}}, nil
	}
	sandbox.CleanupStale(probeNSPrefix) // leftovers of crashed runs; best effort
	gw, err := sandbox.Current()
	if err != nil {
		return nil, err
	}
	name := sandbox.PIDName(probeNSPrefix, strconv.FormatUint(probeSeq.Add(1), 10))
	ns, err := sandbox.Create(name)
	if err != nil {
		gw.Close()
		return nil, fmt.Errorf("create probe namespace: %w", err)
	}
	closeNS := func() {
		ns.Close()
		// Best effort: the veth goes with the namespace, and a leftover
		// of a failed delete is removed by the next run's CleanupStale.
		sandbox.Delete(name)
		gw.Close()
	}
	link, err := wireProbeLink(p, ns, gw)
	if err != nil {
		closeNS()
		return nil, err
	}
	e := nsProbeEnv(ns)
	e.close = func() {
		// Now, rather than when the kernel gets round to the dead
		// namespace, so the next run finds the slot free.
		link.Delete()
		closeNS()
	}
	// The proxy and the resolver as a sandbox on this link sees them. One
	// listening on loopback only is out of every sandbox's reach: its
	// probes then run from here, over loopback.
	e.proxy, e.proxyDial = seenFrom(proxyAP, link, e.dial, local)
	e.dns, e.dnsDial = seenFrom(dnsAP, link, e.dial, local)
	return e, nil
}

// nsProbeEnv is a probe environment whose every socket is created in ns:
// a probe namespace, or an `egressd run` sandbox itself.
func nsProbeEnv(ns *sandbox.NS) *probeEnv {
	d := &sandbox.Dialer{NS: ns}
	return &probeEnv{mode: modeNamespace, dial: d.DialContext, close: func() {},
		listenICMP: func(network string) (net.PacketConn, error) {
			var pc net.PacketConn
			err := sandbox.Do(ns, func() error {
				lc := net.ListenConfig{Control: sandbox.GuardControl(ns.Cookie())}
				var err error
				pc, err = lc.ListenPacket(context.Background(), network, "")
				return err
			})
			return pc, err
		}}
}

// wireProbeLink wires the probe namespace on one of the last slots of the
// sandbox pools, away from the ones `egressd run` uses.
func wireProbeLink(p *policy.Policy, ns, gw *sandbox.NS) (*sandbox.Link, error) {
	slots := probeSlots(p)
	var errs []error
	for i := 0; i < 8 && slots-1-i >= 0; i++ {
		link, err := sandbox.Wire(sandbox.Veth{
			Prefix: p.Sandbox.InterfacePrefix, Index: slots - 1 - i,
			SandboxNS: ns, GatewayNS: gw, Pool4: p.Sandbox.Pool4, Pool6: p.Sandbox.Pool6,
		})
		if err == nil {
			return link, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("wire probe link: %w", errors.Join(errs...))
}

// probeSlots is how many link indexes the pools and the interface name
// length allow.
func probeSlots(p *policy.Policy) int {
	n := 1 << 20
	if pr := p.Sandbox.Pool4; pr.IsValid() {
		n = min(n, 1<<max(0, 30-pr.Bits()))
	}
	if pr := p.Sandbox.Pool6; pr.IsValid() {
		n = min(n, 1<<min(20, max(0, 126-pr.Bits())))
	}
	byName := 1 // prefix + index fits IFNAMSIZ-1 bytes
	for range 15 - len(p.Sandbox.InterfacePrefix) {
		byName = min(byName*10, 1<<20)
	}
	return min(n, byName)
}

// seenFrom is a listen address as the probe namespace reaches it, with the
// dialer to use: an unspecified address is the link's gateway end; a
// loopback one cannot be reached from the namespace and is dialed from
// this one.
func seenFrom(ap netip.AddrPort, link *sandbox.Link, nsDial, local selftest.DialFunc) (netip.AddrPort, selftest.DialFunc) {
	switch {
	case !ap.IsValid():
		return ap, nsDial
	case ap.Addr().IsLoopback():
		return ap, local
	case ap.Addr().IsUnspecified():
		gw := link.Gateway4
		if ap.Addr().Is6() && link.Gateway6.IsValid() || !gw.IsValid() {
			gw = link.Gateway6
		}
		return netip.AddrPortFrom(gw.Addr(), ap.Port()), nsDial
	}
	return ap, nsDial
}

// loopbackOf is a listen address as this namespace reaches it.
func loopbackOf(ap netip.AddrPort) netip.AddrPort {
	if ap.IsValid() && ap.Addr().IsUnspecified() {
		if ap.Addr().Is6() {
			return netip.AddrPortFrom(netip.IPv6Loopback(), ap.Port())
		}
		return netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), ap.Port())
	}
	return ap
}

// loopbackDialer dials egressd's own listeners from this namespace.
func loopbackDialer() selftest.DialFunc {
	d := &net.Dialer{Timeout: 5 * time.Second}
	return d.DialContext
}

func listenAddrPort(hp string) (netip.AddrPort, error) {
	a, port, err := daemon.ListenAddr(hp)
	if err != nil {
		return netip.AddrPort{}, err
	}
	return netip.AddrPortFrom(a, port), nil
}

// headerBudgetProbe is a read on rule r carrying one header as large as
// limits.read_head_bytes, if the policy refuses it (header-budget).
func headerBudgetProbe(p *policy.Policy, r *policy.Rule, base string) (selftest.Request, bool) {
	raw := base + "/egressd-selftest"
	t, err := policy.ParseURL(raw)
	if err != nil {
		return selftest.Request{}, false
	}
	d := p.DecideRequest(&t, "GET", "", 0)
	hdr := map[string]string{"X-Egressd-Selftest": strings.Repeat("a", p.Limits.ReadHeadBytes)}
	h := http.Header{}
	for k, v := range hdr {
		h.Set(k, v)
	}
	if !d.Allow || d.Rule != r {
		return selftest.Request{}, false
	}
	if _, ok, _ := p.CheckHead(&d, h); ok {
		return selftest.Request{}, false
	}
	return selftest.Request{ID: "header-budget/" + r.Name, Route: fmt.Sprintf("proxy: headers over limits.read_head_bytes on rule %s", r.Name),
		Method: "GET", URL: raw, Header: hdr, Reason: policy.ReasonHeaderBudget.String()}, true
}
