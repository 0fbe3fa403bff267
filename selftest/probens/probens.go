// Package probens runs the self-test catalog for a policy where a sandbox
// would run it: from a probe namespace wired like a sandbox (as root), or
// from loopback with the direct-route probes reported as not run. It also
// keeps the set of the self-test's own connections to the proxy (so the
// proxy can exempt them from its readiness gate and label them
// egressd-selftest), and turns a report into the daemon's verdict.
package probens

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/egressd/egressd/nft"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/sandbox"
	"github.com/egressd/egressd/selftest"
	"github.com/egressd/egressd/selftest/plan"
	"github.com/egressd/egressd/selftest/probe"
)

// ProxyOnly is why serve without --walls does not run the direct-route
// probes: egressd manages no walls then, and building a probe namespace
// would add a link to a namespace egressd was not asked to touch.
const ProxyOnly = "proxy-only mode: serve manages no walls (run serve --walls, or egressd selftest as root, to prove the direct routes)"

// NeedsRoot is why the direct-route probes do not run without root.
const NeedsRoot = "needs root: the direct-route probes run from a probe namespace wired like a sandbox; run egressd as root (`serve --no-selftest --allow-unverified` serves unverified, and says so)"

// Modes of a run: where the probes came from.
const (
	ModeNamespace = "namespace" // a probe namespace wired like a sandbox
	ModeLoopback  = "loopback"  // egressd's own namespace: direct routes not run
)

// Run runs the catalog for p with the given trust roots. namespace asks
// for the probe namespace (serve --walls, selftest); without root the
// loopback environment is used. remote is for a run outside the serving
// process (`egressd selftest` beside serve): its connections are not in
// this process's Conns, so it asks the proxy for a probe run token, and
// its requests count as probe traffic there too. The error is for a run
// that could not start (the probe namespace could not be built); probes
// that could not run are in the report.
func Run(ctx context.Context, p *policy.Policy, roots *x509.CertPool, namespace, remote bool) (*selftest.Report, string, error) {
	return run(ctx, p, roots, namespace, remote, false)
}

// Controls runs only the positive controls of p's self-test, from where
// Run would run them: an outage's retry, until they pass.
func Controls(ctx context.Context, p *policy.Policy, roots *x509.CertPool, namespace bool) (*selftest.Report, error) {
	rep, _, err := run(ctx, p, roots, namespace, false, true)
	return rep, err
}

func run(ctx context.Context, p *policy.Policy, roots *x509.CertPool, namespace, remote, controlsOnly bool) (*selftest.Report, string, error) {
	env, err := Open(p, namespace)
	if err != nil {
		return nil, "", err
	}
	defer env.Close()
	if tryOn := selftest.ProbeLink(ctx); tryOn != nil {
		// the caller's walls for the probe link alone (a reload's
		// candidate), before any probe
		if env.link == "" {
			return nil, "", errors.New("the probe link was to be given other walls, but this run builds no probe namespace (" + env.skip + ")")
		}
		if err := tryOn(env.link); err != nil {
			return nil, "", fmt.Errorf("walls for the probe link %s: %w", env.link, err)
		}
	}
	c := plan.Derive(p, roots)
	c.ControlsOnly = controlsOnly
	env.Apply(&c)
	if remote {
		// best effort: a proxy that is not running has no counters to spare
		if pl, err := probe.FetchPlan(ctx, probe.Options{Proxy: env.proxy, Dial: env.proxyDial, Timeout: 5 * time.Second}); err == nil {
			c.UserAgent = pl.UserAgent()
		}
	}
	rep, err := selftest.Run(ctx, c)
	if err != nil {
		return nil, "", err
	}
	return rep, env.Mode, nil
}

// Verdict maps a report to the daemon's verdict: sealed only if every
// probe ran and passed; leaks and failed positive controls are named; a
// run with probes that did not run or could not tell is an error, not a
// pass.
func Verdict(rep *selftest.Report, err error) selftest.Verdict {
	if err != nil {
		return selftest.Verdict{Err: err}
	}
	v := selftest.Verdict{Sealed: rep.Sealed()}
	for _, r := range rep.Leaks() {
		v.Leaks = append(v.Leaks, r.ID+": "+r.Detail)
	}
	for _, r := range rep.ControlsFailed() {
		v.ControlsFailed = append(v.ControlsFailed, r.ID+": "+r.Detail)
	}
	for _, r := range rep.Untestables() {
		v.Untestable = append(v.Untestable, r.ID+": "+r.Detail)
	}
	var u, skipped []selftest.Result
	for _, r := range rep.Unfinished() {
		if r.Status == selftest.NotRun && r.Detail == ProxyOnly {
			skipped = append(skipped, r)
		} else {
			u = append(u, r)
		}
	}
	// Unfinished probes are an error even beside a failed control: a run
	// that starts on an outage (runbox) must know every other probe told.
	if len(u) > 0 && len(v.Leaks) == 0 {
		v.Err = fmt.Errorf("self-test incomplete: %s", unfinishedSummary(u, len(rep.Results)))
		v.Incomplete = true // no leak found: not proven, and not a leak
	}
	var notes []string
	if len(skipped) > 0 {
		// Proxy-only mode proves the checkpoint and says what it did not
		// prove; it is sealed only if everything else passed.
		v.Sealed = len(v.Leaks) == 0 && len(v.ControlsFailed) == 0 && len(u) == 0
		notes = append(notes, fmt.Sprintf("%d direct-route probes not run: %s", len(skipped), ProxyOnly))
	}
	if len(v.Untestable) > 0 {
		notes = append(notes, fmt.Sprintf("%d probes untestable live (upstream unreachable; the policy denies them offline): %s", len(v.Untestable), untestableIDs(rep)))
	}
	v.Note = strings.Join(notes, "; ")
	return v
}

// untestableIDs names the untestable probes, the first few of them.
func untestableIDs(rep *selftest.Report) string {
	var ids []string
	for _, r := range rep.Untestables() {
		ids = append(ids, r.ID)
	}
	if len(ids) > 4 {
		return fmt.Sprintf("%s and %d more", strings.Join(ids[:3], ", "), len(ids)-3)
	}
	return strings.Join(ids, ", ")
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

// Env is where the probes run and how they reach the proxy and the
// resolver.
type Env struct {
	Mode       string
	dial       selftest.DialFunc
	proxyDial  selftest.DialFunc
	dnsDial    selftest.DialFunc
	listenICMP func(string) (net.PacketConn, error)
	proxy, dns netip.AddrPort
	skip       string
	link       string // the probe link's gateway-side interface ("": none)
	close      func()
}

// Close removes the probe namespace, if any.
func (e *Env) Close() { e.close() }

// Apply sets c's socket hooks and the proxy and resolver addresses; the
// proxy and resolver connections are tracked in Conns, and so are those to
// tool servers (from this namespace, like the canary log): egressd's own
// tool endpoint lets them through its readiness gate as the self-test. The resolver is
// asked over TCP: the DNS filter exempts only TCP clients in Conns, whose
// address a handshake proved (a UDP source can be spoofed).
func (e *Env) Apply(c *selftest.Config) {
	c.Dial, c.ProxyDial, c.ResolverDial, c.ListenICMP, c.SkipDirect = e.dial, Conns.track(e.proxyDial), Conns.track(e.dnsDial), e.listenICMP, e.skip
	c.Proxy, c.DNS, c.ResolverTCP = e.proxy, e.dns, true
	c.ToolDial = Conns.track(loopbackDialer())
}

// Conns holds the self-test's open connections to egressd's own proxy,
// resolver and tool endpoint. They refuse what the policy allows until the
// policy in force is the verified one, which would include the self-test's
// probes of a candidate; with proxy.Config.ReadyExempt (and the DNS
// filter's Exempt, which daemon wires from it) = Conns.Has these
// connections, and only they, pass the readiness gate, are decided by a
// candidate a reload verifies, are labelled egressd-selftest by the proxy,
// and their denials are not an agent's high-risk attempts.
//
// An entry is bound to the connection, not to the client address: the
// pair of the probe's address and port and egressd's listening address it
// dialed (one client port can be shared by connections to different
// destinations: Linux's connect() does so), and it lasts while the probe's
// socket still holds that pair (see ConnSet.track).
var Conns = ConnSet{m: map[connKey]int{}, closed: map[connKey]time.Time{}}

// connLinger bounds how long a closed connection stays in a ConnSet. A
// probe that gives up (its timeout, on a loaded machine) closes its
// connection while egressd may not yet have read the request it sent:
// decided after the connection left the set, that request would count as
// an agent's (a metadata probe as a high-risk attempt, an alert). So
// closing only shuts the probe's sending side (egressd sees the same end of
// input) and keeps the socket until egressd closes its side (the request
// has been decided), or connLinger has passed.
const connLinger = 30 * time.Second

// connKey is one connection: the self-test's client address and port, and
// egressd's address it dialed.
type connKey struct{ client, server netip.AddrPort }

func unmapped(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// ConnSet is a set of the self-test's open (and just closed, until
// egressd closed its side or connLinger) connections.
type ConnSet struct {
	mu     sync.Mutex
	m      map[connKey]int
	socks  map[connKey]net.Conn  // the probe's socket of each pair (its TCP state)
	closed map[connKey]time.Time // when a closed connection leaves the set
	now    func() time.Time      // tests move it; nil: time.Now
	ended  chan connKey          // tests: told when a lingering connection ended
}

func (s *ConnSet) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}

// Has reports whether the connection from client to server (egressd's
// own listening address, as the accepted connection's local address) is
// the self-test's: open, or closed by the probe less than connLinger ago
// and not yet closed by egressd.
func (s *ConnSet) Has(client, server netip.AddrPort) bool {
	k := connKey{unmapped(client), unmapped(server)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m[k] <= 0 {
		return false
	}
	// A probe socket in CLOSE (reset by egressd, or closed after
	// egressd's FIN) has given its automatic port back: another socket
	// may hold the pair now, and it cannot have before (CLOSE is final).
	if c := s.socks[k]; c != nil && socketClosed(c) {
		return false
	}
	until, ok := s.closed[k]
	return !ok || s.clock().Before(until)
}

// track wraps a dialer so that each connection is in the set while it is
// open, and after the probe closed it until egressd closed its side (or
// connLinger). That end is exact: while the probe's socket is open no other
// socket can have the pair (a bind of its port fails, SO_REUSEADDR or not:
// the probe's socket does not set it; a connect to the same listener finds
// the 4-tuple taken), and egressd closes its side only once it has answered
// what the probe sent. A socket that cannot shut one side (UDP: the DNS
// filter exempts TCP clients only) leaves the set when it closes.
func (s *ConnSet) track(dial selftest.DialFunc) selftest.DialFunc {
	if dial == nil {
		return nil // the caller's default applies
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		local, err1 := netip.ParseAddrPort(c.LocalAddr().String())
		remote, err2 := netip.ParseAddrPort(c.RemoteAddr().String())
		if err1 != nil || err2 != nil {
			return c, nil // not an IP connection: never exempt
		}
		k := connKey{unmapped(local), unmapped(remote)}
		s.add(k, c)
		return &trackedConn{Conn: c, s: s, k: k}, nil
	}
}

func (s *ConnSet) add(k connKey, c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock()
	for a, until := range s.closed { // forget what has lingered long enough
		if !now.Before(until) {
			delete(s.closed, a)
			delete(s.m, a)
			delete(s.socks, a)
		}
	}
	s.m[k]++
	if s.socks == nil {
		s.socks = map[connKey]net.Conn{}
	}
	s.socks[k] = c
}

// closing starts k's linger: the probe closed it.
func (s *ConnSet) closing(k connKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m[k] > 0 {
		s.closed[k] = s.clock().Add(connLinger)
	}
}

func (s *ConnSet) remove(k connKey) {
	s.mu.Lock()
	if s.m[k]--; s.m[k] <= 0 {
		delete(s.m, k)
		delete(s.closed, k)
		delete(s.socks, k)
	}
	s.mu.Unlock()
	if s.ended != nil {
		s.ended <- k
	}
}

type trackedConn struct {
	net.Conn
	once   sync.Once
	closed atomic.Bool
	s      *ConnSet
	k      connKey
}

// Read fails once the probe closed the connection, as on a closed socket:
// what egressd still sends is for the lingering reader alone.
func (c *trackedConn) Read(b []byte) (int, error) {
	if c.closed.Load() {
		return 0, net.ErrClosed
	}
	return c.Conn.Read(b)
}

// Close shuts the probe's sending side and lingers (track); the
// connection leaves the set before its socket is closed, so the pair is
// never free while it is still exempt.
func (c *trackedConn) Close() error {
	err := net.ErrClosed
	c.once.Do(func() {
		c.closed.Store(true)
		cw, ok := c.Conn.(interface{ CloseWrite() error })
		if !ok || cw.CloseWrite() != nil || c.Conn.SetReadDeadline(time.Now().Add(connLinger)) != nil {
			c.s.remove(c.k)
			err = c.Conn.Close()
			return
		}
		c.s.closing(c.k)
		err = nil
		go func() {
			_, _ = io.Copy(io.Discard, c.Conn) // until egressd closes its side, or connLinger
			c.s.remove(c.k)
			_ = c.Conn.Close()
		}()
	})
	return err
}

// Open builds the probe namespace as root: a namespace wired like
// a sandbox (the sandbox interface prefix, so the same walls apply; an
// address from the sandbox pool; default routes via this namespace), where
// every probe socket is created. Without root it returns the loopback
// environment: the probes through the proxy and the resolver run from
// here, and the direct-route probes are reported as not run.
func Open(p *policy.Policy, namespace bool) (*Env, error) {
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
	if skip := NeedsRoot; !namespace || os.Geteuid() != 0 {
		if !namespace {
			skip = ProxyOnly
		}
		refuse := func(context.Context, string, string) (net.Conn, error) { return nil, errors.New(skip) }
		return &Env{Mode: ModeLoopback, dial: refuse, proxyDial: local, dnsDial: local, proxy: loopbackOf(proxyAP), dns: loopbackOf(dnsAP), skip: skip, close: func() {}}, nil
	}
	gw, err := sandbox.Current()
	if err != nil {
		return nil, err
	}
	// Unnamed: held by its handle only, so building it needs
	// CAP_SYS_ADMIN but no writable /run/netns and no mount, and a crash
	// leaves nothing behind.
	ns, err := sandbox.CreateUnnamed()
	if err != nil {
		gw.Close()
		return nil, fmt.Errorf("create probe namespace: %w", err)
	}
	closeNS := func() {
		ns.Close()
		gw.Close()
	}
	link, err := wireProbeLink(p, ns, gw)
	if err != nil {
		closeNS()
		return nil, err
	}
	e := NSEnv(ns)
	e.link = link.GatewayName
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

// NSEnv is a probe environment whose every socket is created in ns (a
// probe namespace, or an `egressd run` sandbox itself); proxy and DNS are
// reached from ns too, at the addresses SetTargets gives.
func NSEnv(ns *sandbox.NS) *Env {
	d := &sandbox.Dialer{NS: ns}
	e := &Env{Mode: ModeNamespace, dial: d.DialContext, close: func() {},
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
	return e
}

// InNS points the environment's proxy and resolver at addresses reached
// from its own namespace (a sandbox's view of its gateway).
func (e *Env) InNS(proxyAP, dnsAP netip.AddrPort) {
	e.proxy, e.proxyDial = proxyAP, e.dial
	e.dns, e.dnsDial = dnsAP, e.dial
}

// wireProbeLink wires the probe namespace on one of the last slots of the
// sandbox pools, away from the ones `egressd run` uses.
func wireProbeLink(p *policy.Policy, ns, gw *sandbox.NS) (*sandbox.Link, error) {
	slots := Slots(p)
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

// Slots is how many link indexes the pools and the interface name
// length allow.
func Slots(p *policy.Policy) int {
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
	a, port, err := nft.ListenAddr(hp)
	if err != nil {
		return netip.AddrPort{}, err
	}
	return netip.AddrPortFrom(a, port), nil
}
