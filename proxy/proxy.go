package proxy

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/elazarl/goproxy"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/egressd/egressd/event"
	"github.com/egressd/egressd/honeytoken"
	"github.com/egressd/egressd/inject"
	"github.com/egressd/egressd/policy"
)

// CertIssuer gives the TLS server config used to terminate an inspected
// tunnel for host. It MUST NOT be goproxy's built-in CA, whose key is public.
type CertIssuer interface {
	ServerConfig(host string) (*tls.Config, error)
}

// Config wires a Proxy. Zero values are safe defaults except where noted.
type Config struct {
	Logger   *slog.Logger          // nil: discard
	Registry prometheus.Registerer // nil: metrics are kept but not registered
	CA       CertIssuer            // nil: inspected rules are denied (fail closed)
	// UpstreamRoots verifies upstream TLS for inspected tunnels; nil means
	// the system roots.
	UpstreamRoots *x509.CertPool
	// ResolverDial opens sockets to DNS upstreams; nil: net.Dialer.
	ResolverDial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Control runs on every upstream socket before connect; nil: none.
	Control func(network, address string, c syscall.RawConn) error
	// Ready gates what the proxy lets through: while it returns false an
	// allowed request or tunnel gets 503 (the boot self-test has not passed)
	// — denials still get their 403, which is never less safe. nil: always
	// ready.
	Ready func() bool
	// Gate, when set, is asked about every allowed request or tunnel with
	// the very policy that decided it: a non-empty reason refuses it with
	// 503 and that reason (e.g. "not-ready" for a policy whose self-test
	// has not passed, "audit-unavailable"). Asking with the deciding policy,
	// not a separate flag, is what makes a reload's swap and its gate one
	// step. nil: no gate.
	Gate func(p *policy.Policy) (reason policy.Reason, detail string)
	// ReadyExempt lets a client connection through the Ready gate: the
	// self-test's own probes, whose positive controls must pass before the
	// first sealed run can make egressd ready. nil: none. It is asked with
	// the client's address and port and egressd's own address the client
	// dialed (the connection, not just its client address: see
	// probens.Conns); the DNS filter's Exempt is the same predicate.
	// These connections are egressd's own self-test: logged as
	// SelftestIdentity and counted as probe traffic (probe.go).
	ReadyExempt func(client, server netip.AddrPort) bool
	// Probe connects the in-sandbox probes (probe.go); zero: none.
	Probe ProbeHooks
	// Alert is told of every high-risk attempt by a sandbox and every
	// attempt by an evaluation identity (never of probe traffic). It runs
	// on the request path: it must not block.
	Alert func(Attempt)
	// FDReserve is how many file descriptors the proxy leaves to the rest
	// of egressd (admin endpoint, netlink, audit log, DNS): below it new
	// clients are shed with 503 fd-limit. 0: 128; negative: no shedding.
	FDReserve int
	// FDLimit replaces the soft RLIMIT_NOFILE as the ceiling (tests).
	FDLimit func() int
	// HelloTimeout bounds the wait for a tunnel's ClientHello and
	// inspected handshake. 0: policy.DefaultHelloTimeout; tests shorten it.
	HelloTimeout time.Duration
	// NameBudget counts the distinct names each identity resolves under
	// wildcard rules; share it with the DNS filter (egressd's wiring does).
	// Nil: the proxy's own.
	NameBudget *policy.NameBudget
	// Secrets reads the credentials of inject rules; nil: a Store of the
	// proxy's own.
	Secrets *inject.Store
	// Honeytokens are the canary credentials refused wherever they appear
	// (honeytoken.go); nil: none.
	Honeytokens *honeytoken.Registry
}

// Attempt is a decision worth an alert.
type Attempt struct {
	Time     time.Time `json:"time"`
	Identity string    `json:"identity"`
	Method   string    `json:"method"`
	Host     string    `json:"host"`
	Port     uint16    `json:"port"`
	Decision string    `json:"decision"`
	Reason   string    `json:"reason"`
	HighRisk bool      `json:"high_risk"`
	// Evaluation: the identity is marked evaluation: true.
	Evaluation bool `json:"evaluation"`
	// Honeytoken is the kind of canary credential the request carried,
	// HoneytokenOf the identity it was issued to, Where where it was.
	Honeytoken   string `json:"honeytoken,omitempty"`
	HoneytokenOf string `json:"honeytoken_of,omitempty"`
	Where        string `json:"where,omitempty"`
	// Kind, when set, names an alert of another kind than high-risk or
	// evaluation (AlertProbeLabel, AlertProbeLeak).
	Kind string `json:"kind,omitempty"`
	// Via is event.ViaTool for a fetch by egressd's tool endpoint.
	Via string `json:"via,omitempty"`
}

// Alert kinds besides high-risk and evaluation.
const (
	// AlertProbeLabel: a request under a probe User-Agent that is not
	// probe traffic (a token not this identity's, expired, a target off
	// its plan or sent more often than the plan does).
	AlertProbeLabel = "probe-label"
	// AlertProbeLeak: an in-sandbox probe reported a leak.
	AlertProbeLeak = "probe-leak"
)

// Proxy is egressd's checkpoint: a goproxy server whose every decision
// comes from the current policy and whose every dial is checked.
type Proxy struct {
	pol atomic.Pointer[policy.Policy]
	// cand is the candidate a reload verifies (nil: none): it decides the
	// self-test's own connections (ReadyExempt) and nothing else.
	cand   atomic.Pointer[policy.Policy]
	gp     *goproxy.ProxyHttpServer
	tr     *http.Transport // the settings of trs (and the upgrade's TLS roots)
	trs    *ruleTransports // requests with a body, TLS upstreams: a pool per rule
	up     *upstream       // bodiless plain-HTTP requests
	dialer *checkedDialer
	ca     CertIssuer
	log    *slog.Logger
	m      *metrics
	ready  func() bool
	gate   func(*policy.Policy) (policy.Reason, string)
	exempt func(client, server netip.AddrPort) bool
	probe  ProbeHooks
	alert  func(Attempt)
	ids    *tracker
	// clients counts each identity's open client connections (all
	// listeners, DNS over TCP included): limits.client_conns_per_identity.
	clients *tracker
	fds     *fdGuard
	secret  *inject.Store
	honey   *honeytoken.Registry

	errorLog *log.Logger // net/http's own errors, into the proxy's log

	helloTimeout time.Duration

	acceptLog rateLog
	mem       memoryReleaser // gives memory back after a wave of tunnels closes

	book tunnelBook // tunnels whose close record is not written yet

	loops tunnelLoops // relay quiet spliced tunnels (nil: goroutines only)

	// beforeRelay, when tests set it, runs as splice starts: between a
	// tunnel's ClientHello checks and its relay.
	beforeRelay func()

	mu      sync.Mutex
	self    map[netip.AddrPort]bool // egressd's own listeners (proxy loop)
	servers []*http.Server
}

type ctxKey int

const (
	keyConn        ctxKey = iota
	keyDecision           // *request: the proxy state of this request
	keyTransparent        // request rewritten from a transparent listener
)

// New builds a Proxy enforcing p.
func New(p *policy.Policy, cfg Config) *Proxy {
	x := &Proxy{
		ca:      cfg.CA,
		log:     cfg.Logger,
		m:       newMetrics(cfg.Registry),
		ready:   cfg.Ready,
		gate:    cfg.Gate,
		exempt:  cfg.ReadyExempt,
		probe:   cfg.Probe,
		alert:   cfg.Alert,
		ids:     newTracker(),
		clients: newTracker(),
		secret:  cfg.Secrets,
		honey:   cfg.Honeytokens,
		self:    map[netip.AddrPort]bool{},
	}
	if x.log == nil {
		x.log = slog.New(slog.DiscardHandler)
	}
	x.errorLog = slog.NewLogLogger(x.log.With("source", "net/http").Handler(), slog.LevelDebug)
	x.helloTimeout = cmp.Or(cfg.HelloTimeout, policy.DefaultHelloTimeout)
	if x.secret == nil {
		x.secret = &inject.Store{}
	}
	x.fds = &fdGuard{limit: fdLimit, count: fdCount, reserve: cfg.FDReserve}
	switch {
	case cfg.FDReserve == 0:
		x.fds.reserve = defaultFDReserve
	case cfg.FDReserve < 0:
		x.fds.limit = func() int { return 0 }
	}
	if cfg.FDLimit != nil && cfg.FDReserve >= 0 {
		x.fds.limit = cfg.FDLimit
	}
	x.pol.Store(p)
	x.dialer = &checkedDialer{
		resolverDial: cfg.ResolverDial,
		self:         x.isSelf,
		control:      cfg.Control,
		log:          x.log,
		budget:       cfg.NameBudget,
		secrets:      x.secret,
	}
	if x.dialer.budget == nil {
		x.dialer.budget = new(policy.NameBudget)
	}
	x.dialer.setPolicy(p)
	x.tr = &http.Transport{
		Proxy:                  nil, // never chain through environment proxies
		DialContext:            x.dialUpstream,
		TLSClientConfig:        &tls.Config{RootCAs: cfg.UpstreamRoots, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:      false,
		MaxIdleConns:           1024,
		MaxIdleConnsPerHost:    64, // Go's default of 2 throttles a proxy
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		ResponseHeaderTimeout:  p.Limits.ResponseHeaderTimeout, // at start; request.go follows reloads
		MaxResponseHeaderBytes: int64(p.Limits.ResponseHeaderBytes),
		ExpectContinueTimeout:  time.Second,
	}
	x.trs = &ruleTransports{base: x.tr}
	x.up = &upstream{dial: x.dialDecided, limits: x.tr}
	gp := goproxy.NewProxyHttpServer()
	gp.Logger = log.New(io.Discard, "", 0)
	gp.Tr = x.tr
	gp.ConnectDial = nil // the default chains through HTTPS_PROXY
	gp.ConnectDialWithReq = nil
	gp.CertStore = nil
	gp.KeepAcceptEncoding = true
	gp.NonproxyHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rq, _ := r.Context().Value(keyDecision).(*request)
		if rq == nil {
			rq = &request{start: time.Now(), method: r.Method}
		}
		x.refuse(w, r, rq, policy.ReasonNotProxyRequest, policy.ReasonNotProxyRequest.Help())
	})
	gp.OnRequest().DoFunc(x.onRequest)
	// CONNECT is served by serveConnect and never reaches goproxy; if one
	// did, it is refused rather than tunnelled with goproxy's defaults.
	gp.OnRequest().HandleConnectFunc(func(host string, ctx *goproxy.ProxyCtx) (*goproxy.ConnectAction, string) {
		return goproxy.RejectConnect, host
	})
	x.gp = gp
	x.loops = processLoops(cfg.Logger)
	return x
}

// SetPolicy swaps the policy for new requests and connections at once.
func (x *Proxy) SetPolicy(p *policy.Policy) {
	x.pol.Store(p)
	x.cand.CompareAndSwap(p, nil) // the candidate is in force: no longer one
	x.dialer.setPolicy(p)
	x.trs.reset() // pooled upstreams were checked under the old policy
	x.up.closeIdle()
	x.redecideTunnels(p)
}

// Policy returns the policy in force.
func (x *Proxy) Policy() *policy.Policy { return x.pol.Load() }

// SetCandidate makes p decide the self-test's own connections (those
// Config.ReadyExempt names) while a reload verifies it; every other client
// stays with the policy in force. nil ends it (the candidate was dropped,
// or SetPolicy put it in force).
func (x *Proxy) SetCandidate(p *policy.Policy) {
	x.dialer.setCandidate(p) // before the candidate decides anything
	// Pools are per rule: the policy in force keeps its own; a dropped
	// candidate's go with it.
	if old := x.cand.Swap(p); old != nil && old != p && old != x.Policy() {
		x.trs.drop(old.Rules)
		x.up.closeRules(old.Rules)
	}
}

// policyFor is the policy that decides a connection from remote
// (host:port) to local: the candidate for the self-test's own connections
// (requests and tunnels alike) while one is verified, the policy in force
// for everyone else.
func (x *Proxy) policyFor(remote string, local net.Addr) *policy.Policy {
	if c := x.cand.Load(); c != nil && x.exempted(remote, local) {
		return c
	}
	return x.Policy()
}

// exempted reports whether the connection from remote (host:port) to
// local, egressd's own address it dialed, is the self-test's own
// (Config.ReadyExempt). Either address unknown: not exempt.
func (x *Proxy) exempted(remote string, local net.Addr) bool {
	if x.exempt == nil || local == nil {
		return false
	}
	ra, err := netip.ParseAddrPort(remote)
	if err != nil {
		return false
	}
	la, err := netip.ParseAddrPort(local.String())
	if err != nil {
		return false
	}
	return x.exempt(netip.AddrPortFrom(ra.Addr().Unmap(), ra.Port()), netip.AddrPortFrom(la.Addr().Unmap(), la.Port()))
}

// localAddr is the address of egressd's that r's connection was accepted
// on (net/http puts it in every request's context), nil if unknown.
func localAddr(r *http.Request) net.Addr {
	a, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	return a
}

// Serve answers proxy requests on l until Shutdown.
func (x *Proxy) Serve(l net.Listener) error {
	x.AddListener(l.Addr())
	return x.serveHTTP(l, x)
}

// AddListener registers one of egressd's own listening addresses (admin,
// DNS, transparent ports; the proxy's own are added by Serve): no rule
// lets a client reach it through the proxy (reason proxy-loop). An
// unspecified address (0.0.0.0, ::) stands for every local address.
func (x *Proxy) AddListener(a net.Addr) {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return
	}
	x.mu.Lock()
	x.self[netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())] = true
	x.mu.Unlock()
}

// ViaProxy reports whether remote is the local end of one of the proxy's
// open upstream connections: a client of an egressd server on this host
// that is really a sandbox speaking through the proxy.
func (x *Proxy) ViaProxy(remote netip.AddrPort) bool { return x.dialer.out.has(remote) }

// serveHTTP serves h on l with the proxy's timeouts and limits, each
// connection watched by a scanConn the handler finds in its context.
func (x *Proxy) serveHTTP(l net.Listener, h http.Handler) error {
	srv := x.newHTTPServer(h, func(ctx context.Context, c net.Conn) context.Context {
		return context.WithValue(ctx, keyConn, c)
	})
	x.track(srv)
	shed := &shedListener{Listener: l, g: x.fds, shed: x.m.shed.Inc}
	return srv.Serve(&scanListener{Listener: shed, x: x, name: l.Addr().String()})
}

// Sentinels net/http gets for its limits, so that the policy in force,
// not the one at start, sets them (a reload reaches servers already
// running): scanConn.SetReadDeadline puts limits.request_header_timeout and
// limits.idle_timeout in place of the sentinel deadlines, and the scanner
// refuses a head over limits.header_bytes long before net/http's ceiling.
const (
	sentinelHeaderTimeout = 100_000 * time.Hour
	sentinelIdleTimeout   = 200_000 * time.Hour
	netHTTPHeaderCeiling  = 1 << 30
)

// newHTTPServer is the net/http server of every listener and inspected
// tunnel: its connections must be scanConns (which apply the limits).
func (x *Proxy) newHTTPServer(h http.Handler, connCtx func(context.Context, net.Conn) context.Context) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: sentinelHeaderTimeout,
		IdleTimeout:       sentinelIdleTimeout,
		MaxHeaderBytes:    netHTTPHeaderCeiling,
		ErrorLog:          x.errorLog,
		ConnContext:       connCtx,
	}
}

// Shutdown stops accepting, closes open tunnels at once, and waits, until
// ctx ends, for their last records (Drain with no grace).
func (x *Proxy) Shutdown(ctx context.Context) error {
	_, err := x.Drain(ctx, 0)
	return err
}

// scanListener wraps each accepted connection in a scanConn, and logs and
// counts accept errors (net/http retries the temporary ones, such as
// running out of descriptors).
type scanListener struct {
	net.Listener
	x    *Proxy
	name string
}

func (l *scanListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			l.x.acceptError(l.name, err)
			return nil, err
		}
		release, ok := l.x.admitClient(c, true)
		if !ok {
			continue
		}
		sc := l.x.newScanConn(c, l.x.Policy().Limits.HeaderBytes, nil)
		sc.release = release
		return sc, nil
	}
}

// isSelf reports whether ap, an address about to be dialed, is one of
// egressd's own listeners (proxy loop): the exact address, or any local
// address (loopback, an interface's, or the unspecified address, which
// connects to this host) on the port of a listener bound to all addresses.
func (x *Proxy) isSelf(ap netip.AddrPort) bool {
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.self[ap] {
		return true
	}
	for s := range x.self {
		if s.Port() != ap.Port() {
			continue
		}
		a := ap.Addr()
		if a.IsUnspecified() || (s.Addr().IsUnspecified() && (a.IsLoopback() || isLocalAddr(a))) {
			return true
		}
	}
	return false
}

func isLocalAddr(a netip.Addr) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return true // cannot tell: treat as self, fail closed
	}
	for _, ia := range addrs {
		if pn, ok := ia.(*net.IPNet); ok {
			if b, ok := netip.AddrFromSlice(pn.IP); ok && b.Unmap() == a {
				return true
			}
		}
	}
	return false
}

// request is the per-request state carried through goproxy's context.
type request struct {
	start    time.Time
	identity string // the identity decided on: source, or refined by a token
	source   string // the source-address identity, when identity refines it
	// probe is the identity probe traffic is logged and counted under
	// (SelftestIdentity, ProbeIdentityPrefix+identity); "" for an agent.
	// Quarantine and limits still apply to identity.
	probe string
	// forged: the request claims to be probe traffic and is not (an
	// alert of its own kind, AlertProbeLabel).
	forged bool
	target policy.Target
	d      policy.Decision
	// pol is the policy that made d: its address checks apply at the dial.
	pol    *policy.Policy
	method string
	path   string
	// connect state for an inspected tunnel: inner requests must name the
	// same host and port, and the TLS SNI must match.
	tunnel *request
	// upAddr is the address a spliced tunnel reached (a reload checks it
	// again).
	upAddr netip.AddrPort
	// cutBy is set when egressd closes the open tunnel (reload,
	// quarantine): its last log line is then a denial.
	cutBy atomic.Pointer[cutInfo]
	// hello is a CONNECT tunnel's ClientHello deadline, if shorter than
	// the proxy's because the client asked (HelloDeadlineHeader); zero:
	// the proxy's.
	hello time.Duration
	// headBytes is the size of the request head the client sent (data
	// out, like the body).
	headBytes int
	// w answers a plain request (nil inside tunnels): a slow response's
	// head is flushed through it.
	w       http.ResponseWriter
	message string // the operator's text for a denial (policy.Message)
	// relayUpgrade is set by serveUpgrade, which relays an allowed
	// protocol switch itself; ws marks a request allowed to switch to
	// WebSocket (an open one is in the tunnel tracker).
	relayUpgrade bool
	ws           bool
	honey        *honeyHit // a honeytoken the request carried (the refusal's reason)
	// via is event.ViaTool for a request egressd's tool endpoint made
	// (tool.go), "" for a client's own.
	via string
	// release gives back the identity's connection slot ServeHTTP took;
	// a tunnel that outlives ServeHTTP takes it over (nil afterwards).
	release func()
}

// ServeHTTP runs the checks every request and CONNECT gets before goproxy
// sees it: readiness, request hygiene, identity, quarantine and limits.
func (x *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sc, _ := r.Context().Value(keyConn).(*scanConn)
	var head headInfo
	if sc != nil {
		head, _ = sc.next()
	}
	if sc != nil {
		if bd := x.limitBody(r, sc.Conn); bd != nil {
			defer bd.finish()
		}
	}
	rq := &request{start: start, method: r.Method, headBytes: head.size, w: w}
	rq.identity, rq.source = x.identify(r)
	rq.via, _ = r.Context().Value(keyVia).(string)
	if isProbeAPI(r) && rq.via == "" {
		x.serveProbeAPI(w, r, rq.identity)
		return
	}
	host := r.URL.Hostname()
	if r.Method == http.MethodConnect {
		host = r.Host
		if h, _, err := net.SplitHostPort(r.Host); err == nil {
			host = h
		}
	}
	rq.probe = x.probeLabel(r, rq.identity, host)
	rq.forged = forgedProbe(r, rq.probe)
	if head.bad != "" {
		x.refuse(w, r, rq, policy.ReasonBadRequest, head.bad)
		return
	}
	transparent, _ := r.Context().Value(keyTransparent).(bool)
	if !transparent && r.Method != http.MethodConnect && head.hostSeen && r.URL.IsAbs() && !sameHostHeader(head.host, r.URL.Host, r.URL.Scheme) {
		x.refuse(w, r, rq, policy.ReasonHostMismatch, fmt.Sprintf("Host header %q disagrees with the URL host %q", head.host, r.URL.Host))
		return
	}
	if id, ok := x.quarantined(rq); ok {
		x.refuse(w, r, rq, policy.ReasonQuarantine, "identity "+id+" is quarantined")
		return
	}
	if ok, detail := x.toolAllowed(rq); !ok {
		x.refuse(w, r, rq, policy.ReasonToolRefused, detail)
		return
	}
	// The budget is the source's: a token refines the name, never the
	// budget.
	release, ok := x.ids.acquire(rq.budget(), x.Policy().Limits.ConnsPerIdentity)
	if !ok {
		x.refuse(w, r, rq, policy.ReasonConnLimit, "too many concurrent connections for identity "+orNone(rq.budget()))
		return
	}
	rq.release = release
	defer func() {
		if rq.release != nil { // not taken over by a tunnel
			rq.release()
		}
	}()
	r = r.WithContext(context.WithValue(r.Context(), keyDecision, rq)) // the dial's name budget is per identity
	if r.Method == http.MethodConnect {
		x.serveConnect(w, r, rq)
		return
	}
	x.gp.ServeHTTP(w, r)
}

// sameHostHeader compares a Host header with the URL authority, treating
// the scheme's default port as implied.
func sameHostHeader(hdr, urlHost, scheme string) bool {
	if strings.EqualFold(hdr, urlHost) {
		return true
	}
	def := ":80"
	if scheme == "https" {
		def = ":443"
	}
	return strings.EqualFold(hdr+def, urlHost) || strings.EqualFold(hdr, urlHost+def)
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// identify names the client. The source address decides (the identity
// whose cidrs hold it, else the address itself); a Proxy-Authorization
// user:secret only refines that to an identity whose token_sha256 the
// secret matches and whose cidrs, if any, hold the source. An unknown or
// unproven label changes nothing. It returns the identity and, when a
// token refined it, the source identity it refines. The policy that
// decides the connection names it: the candidate's identities for the
// self-test's own while one is verified.
func (x *Proxy) identify(r *http.Request) (identity, source string) {
	src, _ := netip.ParseAddrPort(r.RemoteAddr)
	p := x.policyFor(r.RemoteAddr, localAddr(r))
	source = p.SourceIdentity(src.Addr())
	if h := r.Header.Get("Proxy-Authorization"); h != "" {
		if b, ok := strings.CutPrefix(h, "Basic "); ok {
			if raw, err := base64.StdEncoding.DecodeString(b); err == nil {
				user, secret, _ := strings.Cut(string(raw), ":")
				if id := p.Refine(src.Addr(), user, secret); id != "" && id != source {
					return id, source
				}
			}
		}
	}
	return source, ""
}

// sourceIdentity names a client by its address: the identity whose cidrs
// hold it, else the address itself.
func (x *Proxy) sourceIdentity(a netip.Addr) string {
	return x.Policy().SourceIdentity(a)
}

// logIdentity is the identity a decision is logged under.
func (rq *request) logIdentity() string {
	if rq.probe != "" {
		return rq.probe
	}
	return rq.identity
}

// names are the identities a request counts as: its own, and the source
// identity it refines.
func (rq *request) names() []string {
	if rq.source != "" && rq.source != rq.identity {
		return []string{rq.identity, rq.source}
	}
	return []string{rq.identity}
}

// budget is the identity whose connection budget a request spends: the
// source's.
func (rq *request) budget() string {
	if rq.source != "" {
		return rq.source
	}
	return rq.identity
}

// count counts a decision: probe traffic in its own metric, agents' in
// egressd_requests_total and egressd_high_risk_total.
func (x *Proxy) count(rq *request, decision, reason, pageType, rule string, highRisk bool) {
	if rq.probe != "" {
		x.m.probes.WithLabelValues(rq.probe, decision, reason).Inc()
		return
	}
	if rq.via == event.ViaTool {
		x.m.tools.WithLabelValues(decision, reason).Inc()
	}
	x.m.requests.WithLabelValues(decision, reason, pageType, rule).Inc()
	if highRisk {
		x.m.highRisk.Inc()
	}
	if x.alert == nil {
		return
	}
	if eval := x.Policy().Evaluation(rq.identity); highRisk || eval || rq.honey != nil || rq.forged {
		host := rq.target.Host()
		if host == "" {
			host = rq.d.Host
		}
		at := Attempt{Time: time.Now(), Identity: rq.identity, Method: rq.method, Host: host, Port: rq.target.Port,
			Decision: decision, Reason: reason, HighRisk: highRisk, Evaluation: eval, Via: rq.via}
		if h := rq.honey; h != nil {
			at.Honeytoken, at.HoneytokenOf, at.Where = string(h.token.Kind), h.token.Identity, h.where
		}
		if rq.forged {
			at.Kind = AlertProbeLabel
		}
		x.alert(at)
	}
}

// quarantined reports whether any identity the request counts as is
// quarantined, and which.
func (x *Proxy) quarantined(rq *request) (string, bool) {
	for _, id := range rq.names() {
		if x.ids.quarantined(id) {
			return id, true
		}
	}
	return "", false
}

// refuse answers a request that never reached a decision rule (hygiene,
// readiness, quarantine) and logs it as one decision line. A malformed
// request's raw target is scanned for a high-risk host in any spelling.
func (x *Proxy) refuse(w http.ResponseWriter, r *http.Request, rq *request, reason policy.Reason, detail string) {
	status := reason.Status()
	w.Header().Set("X-Egressd-Deny", reason.String())
	w.Header().Set("Connection", "close")
	http.Error(w, fmt.Sprintf("egressd: %d %s: %s", status, reason, clientDetail(reason, detail)), status)
	switch reason {
	case policy.ReasonBadRequest, policy.ReasonHostMismatch, policy.ReasonNotProxyRequest:
		x.scanHighRisk(rq, r.RequestURI, r.Host)
	}
	if !rq.d.HighRisk && rq.target.Host() == "" {
		if t, ok := refusedTarget(r); ok {
			rq.target = t // the host and port the request named, never decided
		} else {
			rq.d.Host = truncate(r.Host, maxLogPath)
			rq.target.Path = r.URL.Path
		}
	}
	rq.d.Allow = false
	x.logDecisionReason(r.Context(), rq, status, reason, detail, 0, 0)
}

const maxLogPath = 200

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// denyResponse is the 403 (or other) a client gets for a decision; the
// operator's message, if any, follows on a line of its own.
func denyResponse(r *http.Request, reason policy.Reason, rule, detail, message string) *http.Response {
	var b strings.Builder
	fmt.Fprintf(&b, "egressd: denied: %s", reason)
	if rule != "" {
		fmt.Fprintf(&b, " (rule %s)", rule)
	}
	if detail != "" {
		fmt.Fprintf(&b, ": %s", detail)
	}
	b.WriteByte('\n')
	if message != "" {
		fmt.Fprintf(&b, "%s\n", message)
	}
	resp := goproxy.NewResponse(r, goproxy.ContentTypeText, reason.Status(), b.String())
	resp.Header.Set("X-Egressd-Deny", reason.String())
	return resp
}

// refusal applies the Ready gate and the Gate to an allowed request or
// tunnel decided by p for a client at remote (host:port) connected to
// local: "" lets it through, else the reason and detail of its 503. The
// self-test's own connections are exempt.
func (x *Proxy) refusal(p *policy.Policy, remote string, local net.Addr) (reason policy.Reason, detail string) {
	switch {
	case x.ready != nil && !x.ready():
		reason, detail = policy.ReasonNotReady, policy.ReasonNotReady.Help()
	case x.gate != nil:
		reason, detail = x.gate(p)
	}
	if !reason.Denies() || x.exempt == nil {
		return reason, detail
	}
	if x.exempted(remote, local) {
		return policy.ReasonAllowed, ""
	}
	return reason, detail
}
