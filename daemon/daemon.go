// Package daemon runs `egressd serve` and the gateway of `egressd run`: the
// proxy, the DNS filter, the walls and the admin endpoint on one policy,
// with verified reload — a new config is verified (self-test) beside the
// policy in force and swapped in only once sealed, or dropped with the
// reason logged. cmd/egressd and runbox only fill a Gateway (NewGateway);
// New takes bare Options.
//
//	d, err := daemon.New(daemon.Options{Load: load, Logger: log})
//	err = d.Run(ctx) // until ctx ends; SIGHUP and file changes call Reload
package daemon

import (
	"cmp"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/dnsfilter"
	"github.com/egressd/egressd/honeytoken"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy"
	"github.com/egressd/egressd/selftest"
)

// Verdict is the outcome of a self-test run (selftest.Verdict, where the
// proof's own types live).
type Verdict = selftest.Verdict

// outageOnly reports whether a verdict that is not sealed failed only for
// want of answers from upstreams (positive controls failed, probes that
// could not tell) and holds no leak (Leaked, the self-test's definition:
// evidence that something got past the policy or the walls).
func outageOnly(v Verdict) bool {
	return !v.Leaked() && (len(v.ControlsFailed) > 0 || v.Incomplete)
}

// Options wires a Daemon. Load and Logger are required.
type Options struct {
	// Load reads the config (the file, or the embedded default).
	Load   func() (*policy.Policy, error)
	Logger *slog.Logger
	// CA terminates inspected tunnels; nil denies inspected rules.
	CA proxy.CertIssuer
	// Walls are the kernel walls kept in step with the policy (nil: no
	// walls managed here): in force at start, read back and repaired
	// every WallsInterval, and tried on the self-test's probe link before
	// a reload that changes them goes in force.
	Walls         Walls
	WallsInterval time.Duration // 0: 30s
	// Verify runs the self-test of p: the policy in force (boot,
	// schedule), or a reload's candidate, which decides only the
	// self-test's own connections. For a candidate whose walls differ, ctx
	// carries the function (selftest.WithProbeLink) the run calls with its
	// probe link before any probe: a run that does not call it proves
	// nothing about those walls, and the candidate is dropped. Nil with
	// NoSelftest false is refused by New: readiness needs a proof.
	Verify func(ctx context.Context, p *policy.Policy) Verdict
	// NoSelftest runs no self-test. The daemon is then not ready (/readyz
	// 503, the proxy refuses with 503) unless AllowUnverified is set too:
	// an unproven deployment must not look like a proven one.
	NoSelftest bool
	// AllowUnverified, with NoSelftest, serves unverified, loudly: a
	// warning at every start and in /readyz, and egressd_verified 0.
	AllowUnverified bool
	// Webhook, when set, replaces the policy's selftest.webhook (which is
	// read at each scheduled run, so a reload changes it).
	Webhook string
	// ProxyListener replaces listen.proxy's listener (tests); nil: config.
	ProxyListener net.Listener
	// ToolsListener replaces tools.listen's listener (tests); nil: config.
	ToolsListener net.Listener
	// ProxyConfig passes extra proxy wiring (upstream roots, dial hooks).
	ProxyConfig proxy.Config
	// Collectors are registered on /metrics too (the walls' counters).
	Collectors []prometheus.Collector
	// AlertWebhook, when set, replaces the policy's alerts.webhook.
	AlertWebhook string
	// ProbeResult records an in-sandbox probe's result (the history);
	// nil: kept in memory and metrics only.
	ProbeResult func(ProbeResult) error
	// CACheck reads egressd's CA back from the state directory (nil: no
	// check): a key deleted or corrupted at runtime is reported every
	// CAInterval (0: a minute), not at the next restart that refuses to
	// start.
	CACheck    func() error
	CAInterval time.Duration
	// notifyHook replaces the webhook POST (tests): it gets the event.
	notifyHook func(event string)
	// Controls runs only the self-test's positive controls for p: what a
	// degraded deployment retries until they pass (then one full self-test
	// confirms). Nil: each retry runs Verify.
	Controls func(ctx context.Context, p *policy.Policy) Verdict
	// OutageRetry is the first wait before a degraded deployment's
	// controls (or, without Controls, its self-test) run again (it doubles
	// up to maxOutageRetry). 0: 2s.
	OutageRetry time.Duration
	// Booted, when set, is called once the boot self-test has set the
	// readiness (`egressd run` starts its command only then).
	Booted func(Verdict)
	// DNSAnswered, when set, is told the addresses the DNS filter answers
	// for allowed names (dnsfilter.Config.Answered): transparent mode
	// redirects those, for their TTL.
	DNSAnswered func(client netip.Addr, addrs []netip.Addr, ttl time.Duration)
	// Audit is the audit log Logger writes decisions to (nil: none). While
	// it cannot be written, allowed traffic is refused with 503
	// audit-unavailable (unless the policy says audit.on_error: allow)
	// and /readyz is 503; Run's stop closes it and reports a seal it could
	// not write.
	Audit *audit.Sink
	// Honeytokens are the canary credentials refused on every path (nil:
	// the daemon's own registry); HoneytokenDir, when set, holds the
	// store of those issued for containers and pods, watched for changes.
	Honeytokens   *honeytoken.Registry
	HoneytokenDir string
}

// Daemon is a running egressd serve (or the gateway of an egressd run).
type Daemon struct {
	opt   Options
	log   *slog.Logger
	reg   *prometheus.Registry
	px    *proxy.Proxy
	dns   *dnsfilter.Server
	admin *http.Server
	tools *http.Server // tools.listen: the MCP endpoint (package tools)

	reloadMu sync.Mutex
	// next is the reload round that triggers arriving now join (nil: the
	// next trigger starts one): a burst of triggers while a candidate is
	// verified is one more reload, not one each.
	nextMu sync.Mutex
	next   *reloadRound
	pol    atomic.Pointer[policy.Policy]
	// cand is the candidate a reload is verifying beside the policy in
	// force: it decides only the self-test's own connections.
	cand atomic.Pointer[policy.Policy]
	// retired is the policy verified before the last swap: requests it
	// decided just before the swap still pass the gate (it was verified;
	// weak, so the gate keeps no old policy alive).
	retired atomic.Pointer[weak.Pointer[policy.Policy]]
	// verified is the policy whose self-test last passed (or, with
	// NoSelftest, the policy in force). The proxy's gate compares it with
	// the policy that decided each request: swap and gate are one step.
	verified atomic.Pointer[policy.Policy]
	ready    atomic.Bool            // the walls' last self-test (boot, scheduled) sealed
	stopping atomic.Bool            // a stop is draining: /readyz 503, the door still serves what is open
	status   atomic.Pointer[string] // why not ready, or the no-selftest warning
	interval chan struct{}          // a reload changed selftest.interval
	booted   chan struct{}          // closed once the boot self-test has set readiness
	draining chan struct{}          // closed when a stop begins
	watching chan struct{}          // closed once WatchReload handles SIGHUP and file changes
	watchUp  sync.Once
	audit    *audit.Sink

	reloads       *prometheus.CounterVec
	drift         prometheus.Counter
	selftests     *prometheus.CounterVec
	lastSealed    prometheus.Gauge
	verifiedGauge prometheus.Gauge // egressd_verified
	degradedGauge prometheus.Gauge // egressd_selftest_degraded
	// degraded is set while a scheduled self-test of the verified policy
	// could only fail for an outage: the policy keeps serving and the
	// controls run again after retryWait (doubling), then the self-test.
	degraded  atomic.Bool
	degradeCh chan struct{} // tells Run to arm the retry
	retryWait time.Duration // owned by Run's loop

	probes *probes
	alerts *alerter

	honey      *honeytoken.Registry
	honeyWatch *honeytoken.Watch // nil without a HoneytokenDir
	honeyErr   string            // the store's last error, logged once
	vis        visible
	notesMu    sync.Mutex
	notes      map[string]string // degradations /readyz names, by kind

	proxyAddr, dnsAddr, adminAddr, toolsAddr string
	closers                                  []io.Closer
}

// New loads the config and builds the components; Run starts them.
func New(opt Options) (*Daemon, error) {
	if opt.Load == nil || opt.Logger == nil {
		return nil, errors.New("daemon: Load and Logger are required")
	}
	if opt.Verify == nil && !opt.NoSelftest {
		return nil, errors.New("daemon: no self-test to verify the walls: pass --no-selftest to serve without one (it will be reported)")
	}
	p, err := load(opt.Load)
	if err != nil {
		return nil, err
	}
	d := &Daemon{opt: opt, log: opt.Logger, reg: prometheus.NewRegistry(), interval: make(chan struct{}, 1), degradeCh: make(chan struct{}, 1), draining: make(chan struct{}), booted: make(chan struct{}), watching: make(chan struct{})}
	d.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfoGauge(ReadBuildInfo()))
	d.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "egressd_reloads_total", Help: "Config reloads by result (applied, invalid, rolled-back, rollback-failed)."}, []string{"result"})
	d.selftests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "egressd_selftest_runs_total", Help: "Self-test runs by trigger and result."}, []string{"trigger", "result"})
	d.lastSealed = prometheus.NewGauge(prometheus.GaugeOpts{Name: "egressd_selftest_last_sealed_timestamp_seconds", Help: "When the self-test last found no leak."})
	d.drift = prometheus.NewCounter(prometheus.CounterOpts{Name: "egressd_walls_drift_total", Help: "Times the kernel walls differed from the spec (tampering or drift) and were re-applied."})
	d.verifiedGauge = prometheus.NewGauge(prometheus.GaugeOpts{Name: "egressd_verified", Help: "1 while the last self-test found the deployment sealed; 0 before the first, after a leak or an incomplete run, and always under --no-selftest."})
	d.degradedGauge = prometheus.NewGauge(prometheus.GaugeOpts{Name: "egressd_selftest_degraded", Help: "1 while the scheduled self-test cannot prove the walls for an outage (positive controls failed, probes could not tell; no leak): the verified policy keeps serving and the self-test is retried with backoff."})
	d.reg.MustRegister(d.reloads, d.selftests, d.lastSealed, d.drift, d.verifiedGauge, d.degradedGauge)
	d.notes = map[string]string{}
	d.registerVisible()
	d.pol.Store(p)
	d.setStatus("starting: waiting for the boot self-test")
	save := opt.ProbeResult
	if save != nil { // an in-sandbox probe's run that cannot be recorded is shown
		save = func(r ProbeResult) error { err := opt.ProbeResult(r); d.historyResult(err); return err }
	}
	d.probes = newProbes(d.log.With("component", "probe"), save)
	d.probes.setPolicy(p)
	d.reg.MustRegister(d.probes)
	d.reg.MustRegister(opt.Collectors...)
	d.alerts = newAlerter(d.log.With("component", "alerts"), func() (string, time.Duration) {
		a := d.Policy().Alerts
		if opt.AlertWebhook != "" {
			a.Webhook = opt.AlertWebhook
		}
		return a.Webhook, a.Batch
	})
	d.reg.MustRegister(d.alerts.total, d.alerts.dropped, d.alerts.posts)
	if opt.Audit != nil {
		d.watchAudit(opt.Audit, p)
	}
	if err := d.setupHoneytokens(opt); err != nil {
		return nil, err
	}

	pc := opt.ProxyConfig
	if pc.UpstreamRoots == nil && p.UpstreamCA != "" {
		if pc.UpstreamRoots, err = upstreamRoots(p.UpstreamCA); err != nil {
			return nil, err
		}
	}
	pc.Logger = d.log.With("component", "proxy")
	pc.Registry = d.reg
	pc.CA = opt.CA
	pc.Gate = d.gate
	pc.Probe = proxy.ProbeHooks{API: d.probes.api, Label: d.probes.label}
	pc.Alert = d.alerts.attempt
	pc.Honeytokens = d.honey
	// one name budget per identity, whichever path resolves the name
	names := new(policy.NameBudget)
	pc.NameBudget = names
	d.px = proxy.New(p, pc)
	d.probes.alert, d.probes.quarantine = d.alerts.attempt, d.px.Quarantine
	if p.Listen.DNS != "" {
		d.dns, err = dnsfilter.New(dnsfilter.Config{Policy: d.pol.Load, Logger: d.log.With("component", "dns"), Registerer: d.reg, NameBudget: names,
			// allowed names are answered only from the verified policy with
			// the walls sealed, as the proxy; the self-test's probes pass
			Gate: d.verifiedGate, Exempt: opt.ProxyConfig.ReadyExempt, Candidate: d.cand.Load, Honeytokens: d.honey, OnHoneytoken: d.dnsHoneytoken,
			Answered: opt.DNSAnswered})
		if err != nil {
			return nil, fmt.Errorf("dns filter: %w", err)
		}
	}
	return d, nil
}

func (d *Daemon) setStatus(s string) { d.status.Store(&s) }

// Policy returns the policy in force.
func (d *Daemon) Policy() *policy.Policy { return d.pol.Load() }

// Proxy returns the proxy (admin quarantine, tests).
func (d *Daemon) Proxy() *proxy.Proxy { return d.px }

// Ready reports readiness and the reason: the walls' last self-test
// sealed and the policy in force is the one it verified.
func (d *Daemon) Ready() (bool, string) {
	ok, why := d.ready.Load() && d.verified.Load() == d.pol.Load(), *d.status.Load()
	if refuse, note := d.auditState(d.Policy()); note != "" {
		ok = ok && !refuse
		why = note + "; " + why
	}
	if note := d.degradedNote(); note != "" {
		why = note + "; " + why
	}
	if d.stopping.Load() {
		ok, why = false, "stopping: draining open tunnels and requests, then sealing; "+why
	}
	return ok, why
}

// notVerified is the detail of a 503 for a request decided by a policy
// whose self-test has not passed: the gate's safety net (a reload's
// candidate decides only the self-test's own connections, which pass it).
const notVerified = "egressd is not ready: the policy that decided this request has not passed its self-test (see /readyz)"

// gate is the proxy's Gate: it lets an allowed request through only if the
// policy that decided it is the verified one and the walls are sealed.
func (d *Daemon) gate(p *policy.Policy) (reason policy.Reason, detail string) {
	if reason, detail = d.verifiedGate(p); reason.Denies() {
		return reason, detail
	}
	if refuse, note := d.auditState(p); refuse {
		return policy.ReasonAuditUnavailable, "egressd cannot write its audit log, and what it cannot record it does not let through: " + note
	}
	return policy.ReasonAllowed, ""
}

// verifiedGate is the part of gate the DNS filter shares (it writes no
// audit records, so the audit log's state does not gate it): p must be
// the verified policy and the walls sealed.
func (d *Daemon) verifiedGate(p *policy.Policy) (reason policy.Reason, detail string) {
	if !d.ready.Load() {
		return policy.ReasonNotReady, "egressd is not ready: " + *d.status.Load()
	}
	if v := d.verified.Load(); v != p && !d.wasVerified(p) {
		return policy.ReasonNotReady, notVerified
	}
	return policy.ReasonAllowed, ""
}

// wasVerified reports whether p is the policy the last swap retired: it
// was verified, and a request it decided an instant before the swap is
// let through rather than refused.
func (d *Daemon) wasVerified(p *policy.Policy) bool {
	r := d.retired.Load()
	return r != nil && p != nil && r.Value() == p
}

// watchAudit registers the audit metrics and logs each change of the
// audit log's state once.
func (d *Daemon) watchAudit(a *audit.Sink, p *policy.Policy) {
	d.audit = a
	d.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "egressd_audit_ok", Help: "1 while the audit log's last write succeeded, 0 while it cannot be written."}, func() float64 {
			if ok, _ := a.OK(); ok {
				return 1
			}
			return 0
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "egressd_audit_write_errors_total", Help: "Audit log writes that failed (each one a decision or session record not written)."}, func() float64 {
			return float64(a.WriteErrors())
		}),
	)
	report := func(ok bool, err error) {
		switch {
		case ok:
			d.log.Warn("audit log writable again: the chain goes on (a \"lost\" record counts the lines it misses)")
		case d.Policy().Audit.OnErrorAllow:
			d.log.Error("audit log cannot be written: audit.on_error is allow, so allowed traffic flows UNAUDITED until it can", "err", err)
		default:
			d.log.Error("audit log cannot be written: refusing what the policy allows (503 audit-unavailable) until it can", "err", err)
		}
	}
	a.OnChange(report)
	if ok, err := a.OK(); !ok {
		report(ok, err) // opened on a full disk
	}
	if p.Audit.OnErrorAllow {
		d.log.Warn("audit.on_error is allow: if the audit log cannot be written, allowed traffic flows unaudited")
	}
}

// auditState says whether the audit log's state refuses what p allows,
// and describes a failing log ("" when it works or there is none).
func (d *Daemon) auditState(p *policy.Policy) (refuse bool, note string) {
	if d.audit == nil {
		return false, ""
	}
	ok, err := d.audit.OK()
	if ok {
		return false, ""
	}
	if p.Audit.OnErrorAllow {
		return false, fmt.Sprintf("WARNING: audit log cannot be written (%v); audit.on_error is allow: traffic flows unaudited", err)
	}
	return true, fmt.Sprintf("not ready: audit log cannot be written (%v)", err)
}

// Addrs returns the bound proxy, DNS and admin addresses once Run started them.
func (d *Daemon) Addrs() (proxyAddr, dnsAddr, adminAddr string) {
	return d.proxyAddr, d.dnsAddr, d.adminAddr
}

// listen binds the proxy, transparent, DNS and admin listeners of p and
// serves each in a goroutine that reports its end on errc.
func (d *Daemon) listen(p *policy.Policy, errc chan<- error) error {
	pl := d.opt.ProxyListener
	if pl == nil {
		var err error
		if pl, err = proxy.Listen(p.Listen.Proxy); err != nil {
			return fmt.Errorf("listen proxy %s: %w", p.Listen.Proxy, err)
		}
	}
	d.proxyAddr = pl.Addr().String()
	go func() { errc <- d.px.Serve(pl) }()
	for _, tr := range []struct {
		addr  string
		port  uint16
		serve func(net.Listener, uint16) error
	}{{p.Listen.Transparent, 443, d.px.ServeTransparentTLS}, {p.Listen.TransparentHTTP, 80, d.px.ServeTransparentHTTP}} {
		if tr.addr == "" {
			continue
		}
		l, err := proxy.Listen(tr.addr)
		if err != nil {
			return fmt.Errorf("listen transparent %s: %w", tr.addr, err)
		}
		d.closers = append(d.closers, l)
		go func() { errc <- tr.serve(l, tr.port) }()
	}
	if d.dns != nil {
		udp, tcp, err := listenDNS(p.Listen.DNS, net.ListenPacket, net.Listen)
		if err != nil {
			return err
		}
		d.dnsAddr = udp.LocalAddr().String()
		d.px.AddListener(udp.LocalAddr())
		d.px.AddListener(tcp.Addr())
		// TCP connections to the DNS port hold a descriptor each: they
		// come out of the proxy's descriptor reserve, so a sandbox holding
		// many cannot take the last ones from the admin endpoint.
		go func() { errc <- d.dns.Serve(udp, d.px.GuardListener(tcp)) }()
	}
	if err := d.listenTools(p, errc); err != nil {
		return err
	}
	if p.Listen.Admin != "" {
		al, err := net.Listen("tcp", p.Listen.Admin)
		if err != nil {
			return fmt.Errorf("listen admin %s: %w", p.Listen.Admin, err)
		}
		d.adminAddr = al.Addr().String()
		d.px.AddListener(al.Addr()) // no rule reaches it through the proxy (proxy-loop)
		d.admin = &http.Server{Handler: d.adminHandler(), ReadHeaderTimeout: 5 * time.Second}
		go func() { errc <- d.admin.Serve(al) }()
	}
	return nil
}

// Run serves until ctx ends. It binds the listeners, applies the walls,
// runs the boot self-test (not ready until it passes), and runs the
// scheduled self-test.
func (d *Daemon) Run(ctx context.Context, started chan<- struct{}) error {
	p := d.Policy()
	errc := make(chan error, 5)
	go d.alerts.run(ctx)
	if err := d.listen(p, errc); err != nil {
		return err
	}
	if d.opt.Walls != nil {
		if err := d.opt.Walls.Apply(ctx, p); err != nil {
			return fmt.Errorf("apply walls: %w", err)
		}
		d.reportLeftTrial()
	}
	// "serving" is a readiness signal (tests and supervisors wait for it):
	// every listener is bound and the walls, if managed, are in place.
	d.log.Info("serving", "proxy", d.proxyAddr, "dns", d.dnsAddr, "admin", d.adminAddr, "config", p.Source, "rules", len(p.Rules))
	if started != nil {
		close(started)
	}
	d.boot(ctx)
	tick := time.NewTicker(p.Selftest.Interval)
	defer tick.Stop()
	every := p.Selftest.Interval
	var wallsTick <-chan time.Time
	if d.opt.Walls != nil {
		iv := d.opt.WallsInterval
		if iv <= 0 {
			iv = 30 * time.Second
		}
		wt := time.NewTicker(iv)
		defer wt.Stop()
		wallsTick = wt.C
	}
	var honeyTick <-chan time.Time
	if d.honeyWatch != nil {
		ht := time.NewTicker(honeyRefresh)
		defer ht.Stop()
		honeyTick = ht.C
	}
	caTick, caStop := d.caTicker()
	defer caStop()
	var retry <-chan time.Time // the next self-test of a degraded deployment
	var auditTick <-chan time.Time
	if d.audit != nil {
		at := time.NewTicker(time.Second)
		defer at.Stop()
		auditTick = at.C
	}
	for {
		select {
		case <-ctx.Done():
			return d.shutdown()
		case <-wallsTick:
			d.checkWalls(ctx)
		case <-honeyTick:
			d.refreshHoneytokens()
		case <-caTick:
			d.checkCA()
		case <-auditTick:
			// refused traffic may be all there is: try again on our own
			if ok, _ := d.audit.OK(); !ok {
				d.audit.Retry()
			}
		case err := <-errc:
			if err != nil && !errors.Is(err, http.ErrServerClosed) {
				d.shutdown()
				return err
			}
		case <-tick.C:
			d.scheduled(ctx)
		case <-d.degradeCh:
			retry = d.nextRetry(retry)
		case <-retry:
			retry = nil
			if d.degraded.Load() { // not sealed (or leaked) meanwhile
				d.retryOutage(ctx)
			}
			retry = d.nextRetry(retry)
		case <-d.interval:
			if iv := d.Policy().Selftest.Interval; iv != every {
				every = iv
				tick.Reset(iv)
				d.log.Info("self-test interval changed", "interval", iv)
			}
		}
	}
}

// recordWait bounds how long a stop waits, after the grace, for closed
// tunnels to write their last records before it seals without them (the
// seal then counts them, and `audit verify` reports the log incomplete).
const recordWait = 10 * time.Second

// shutdown drains, then seals: no new clients from now on (listeners
// closed, /readyz 503 "stopping"); open tunnels and requests get
// limits.shutdown_grace to end; the rest are closed; every tunnel's last
// records are written; only then is the audit log sealed.
func (d *Daemon) shutdown() error {
	close(d.draining)
	start := time.Now()
	grace := d.Policy().Limits.ShutdownGrace
	d.stopping.Store(true)
	for _, c := range d.closers {
		c.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), grace+recordWait)
	defer cancel()
	var errs []error
	if d.dns != nil {
		errs = append(errs, d.dns.Shutdown(ctx))
	}
	d.log.Info("stopping: accepting no new clients; open tunnels and requests may finish", "tunnels", d.px.OpenTunnels(), "grace", grace.String())
	cut, err := d.px.Drain(ctx, grace)
	errs = append(errs, err)
	d.log.Info("drained", "closed_at_grace", cut, "tunnels_unrecorded", d.px.OpenTunnels(), "duration", time.Since(start).Round(time.Millisecond).String())
	if d.admin != nil {
		actx, acancel := context.WithTimeout(context.Background(), 2*time.Second)
		errs = append(errs, d.admin.Shutdown(actx))
		acancel()
	}
	if d.tools != nil {
		errs = append(errs, d.tools.Shutdown(ctx))
	}
	d.log.Info("stopped: the nftables walls, if any, stay in place (egressd nft down removes them)")
	if d.audit != nil {
		if err := d.audit.Close(); err != nil {
			d.log.Error("stop: the audit log was not sealed: `egressd audit verify` will report its end as truncated", "err", err)
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

const noSelftestWarning = "WARNING: serving with --no-selftest --allow-unverified: the walls are not verified; nothing proves this sandbox has no other way out"

// unverified is the status of --no-selftest without --allow-unverified.
const unverified = "not ready: --no-selftest: nothing verifies the walls, so egressd serves nothing; run the self-test, or pass --allow-unverified as well to serve unverified"

// boot runs the first self-test; the proxy answers 503 until it passes.
func (d *Daemon) boot(ctx context.Context) {
	defer close(d.booted) // on every path: ready or not, boot is over
	if d.opt.NoSelftest {
		if !d.opt.AllowUnverified {
			d.log.Error(unverified)
			d.setStatus(unverified)
			if d.opt.Booted != nil {
				d.opt.Booted(Verdict{Err: errors.New(unverified)})
			}
			return
		}
		d.log.Warn(noSelftestWarning)
		d.setStatus(noSelftestWarning)
		d.verified.Store(d.Policy())
		d.ready.Store(true)
		if d.opt.Booted != nil {
			d.opt.Booted(Verdict{Sealed: true, Note: noSelftestWarning})
		}
	} else {
		// A reload (SIGHUP, an edit: WatchReload runs from the start)
		// waits for the boot run: its candidate would decide the boot
		// run's own probes, and its verdict would be overwritten by the
		// boot's.
		d.reloadMu.Lock()
		p := d.Policy()
		v := d.verify(ctx, "boot", p)
		d.setReadiness(p, v)
		d.reloadMu.Unlock()
		if d.opt.Booted != nil {
			d.opt.Booted(v)
		}
	}
	// "ready" is the readiness signal tests and supervisors wait for: from
	// here the proxy lets allowed traffic through. "not ready" ends a boot
	// that did not get there, after /readyz says why (the self-test's own
	// error line comes before its verdict is recorded).
	if ok, why := d.Ready(); ok {
		d.log.Info("ready", "status", why)
	} else {
		d.log.Warn("not ready", "status", why)
	}
}

// Draining is closed once a stop has begun: no new clients are
// accepted, and open tunnels and requests have limits.shutdown_grace to
// end before they are closed and the audit log is sealed.
func (d *Daemon) Draining() <-chan struct{} { return d.draining }

// Booted is closed once the boot self-test has run and set readiness,
// ready or not (Ready says which): the signal to wait for instead of the
// "ready" line when readiness may not come (a leak, a full audit disk).
func (d *Daemon) Booted() <-chan struct{} { return d.booted }

// Watching is closed once WatchReload has registered for SIGHUP and set up
// the config file watch (or logged why it could not): from then on a
// signal or an edit reloads.
func (d *Daemon) Watching() <-chan struct{} { return d.watching }

func (d *Daemon) verify(ctx context.Context, trigger string, p *policy.Policy) Verdict {
	start := time.Now()
	v := d.opt.Verify(ctx, p)
	d.historyResult(v.HistoryErr)
	result := "sealed"
	switch {
	case len(v.Leaks) > 0:
		result = "leak"
		d.log.Error("self-test found a leak", "trigger", trigger, "leaks", v.Leaks)
	case len(v.ControlsFailed) > 0:
		result = "control-failed"
		d.log.Error("self-test positive control failed: nothing is proven (the network or an upstream may be down; not a leak)", "trigger", trigger, "controls", v.ControlsFailed)
	case v.Err != nil:
		result = "error"
		d.log.Error("self-test could not run", "trigger", trigger, "err", v.Err)
	case !v.Sealed:
		result = "leak"
		d.log.Error("self-test found a leak", "trigger", trigger, "leaks", v.Leaks)
	default:
		d.lastSealed.SetToCurrentTime()
		d.log.Info("self-test sealed", "trigger", trigger, "duration", time.Since(start))
	}
	d.selftests.WithLabelValues(trigger, result).Inc()
	return v
}

// setReadiness records the verdict of a self-test of p (boot, scheduled,
// or the reload whose candidate swap puts in force): a sealed run also
// marks p verified.
func (d *Daemon) setReadiness(p *policy.Policy, v Verdict) {
	d.verifiedGauge.Set(0)
	if !v.Sealed || v.Err != nil {
		d.retired.Store(nil) // only the policy this run verifies may pass again
	}
	switch {
	case len(v.Leaks) > 0:
		d.ready.Store(false)
		d.setStatus(fmt.Sprintf("not ready: self-test found a leak: %v", v.Leaks))
	case len(v.ControlsFailed) > 0:
		d.ready.Store(false)
		d.setStatus(fmt.Sprintf("not ready: control-failed: a positive control could not reach its target, so nothing is proven (not a leak; is the network or the upstream down?): %v", v.ControlsFailed))
	case v.Err != nil:
		d.ready.Store(false)
		d.setStatus("not ready: self-test could not run: " + v.Err.Error())
	case !v.Sealed:
		d.ready.Store(false)
		d.setStatus(fmt.Sprintf("not ready: self-test found a leak: %v", v.Leaks))
	default:
		d.verified.Store(p)
		d.ready.Store(true)
		d.verifiedGauge.Set(1)
		st := "ready: last self-test sealed at " + time.Now().UTC().Format(time.RFC3339)
		if v.Note != "" {
			st += "; " + v.Note
		}
		d.setStatus(st)
	}
}

// maxOutageRetry caps the backoff between the retries of a degraded
// deployment.
const maxOutageRetry = time.Minute

// nextRetry arms the next retry (retryOutage) of a degraded deployment: after
// OutageRetry, then twice as long each time up to maxOutageRetry. pending
// is kept when one is armed already; nil once the deployment is sealed or
// down for a leak.
func (d *Daemon) nextRetry(pending <-chan time.Time) <-chan time.Time {
	if !d.degraded.Load() {
		d.retryWait = 0
		return nil
	}
	if pending != nil {
		return pending
	}
	if d.retryWait == 0 {
		d.retryWait = cmp.Or(d.opt.OutageRetry, 2*time.Second)
	} else {
		d.retryWait = min(2*d.retryWait, maxOutageRetry)
	}
	return time.After(d.retryWait)
}

// retryOutage is one retry of a degraded deployment: the positive
// controls alone (Options.Controls) until they pass, then one full
// self-test (scheduledAs) that confirms the walls, or finds a leak. Without
// Controls each retry is a full self-test.
func (d *Daemon) retryOutage(ctx context.Context) {
	if d.opt.Controls == nil {
		d.scheduledAs(ctx, "outage-retry")
		return
	}
	d.reloadMu.Lock()
	v := d.opt.Controls(ctx, d.Policy())
	d.reloadMu.Unlock()
	// counted apart from the self-tests: a controls-only run proves no
	// wall, so it never sets the last-sealed time
	if !v.Leaked() && (len(v.ControlsFailed) > 0 || v.Err != nil) {
		d.selftests.WithLabelValues("outage-controls", "control-failed").Inc()
		d.log.Warn("outage: the positive controls still fail; retried with backoff", "controls", v.ControlsFailed, "err", v.Err)
		d.degrade(v) // Run arms the next retry
		return
	}
	d.selftests.WithLabelValues("outage-controls", "passed").Inc()
	d.log.Info("outage: the positive controls pass again; a full self-test confirms")
	d.scheduledAs(ctx, "outage-retry")
}

// scheduled is the drift check: a leak takes readiness away and calls the
// webhook; an outage (outageOnly) keeps the verified policy serving,
// degraded, and is retried by Run.
func (d *Daemon) scheduled(ctx context.Context) { d.scheduledAs(ctx, "schedule") }

func (d *Daemon) scheduledAs(ctx context.Context, trigger string) {
	if d.opt.NoSelftest {
		if d.opt.AllowUnverified {
			d.log.Warn(noSelftestWarning)
		} else {
			d.log.Error(unverified)
		}
		return
	}
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	p := d.Policy()
	v := d.verify(ctx, trigger, p)
	if outageOnly(v) && d.verified.Load() == p && d.ready.Load() {
		d.degrade(v)
		return
	}
	if d.degraded.Swap(false) {
		d.degradedGauge.Set(0)
		if v.Sealed && v.Err == nil {
			d.log.Warn("self-test sealed again: no longer degraded")
		}
	}
	d.setReadiness(p, v)
	if url := d.webhook(); (!v.Sealed || v.Err != nil) && url != "" {
		go notify(d.log, url, v)
	}
}

// degrade records a scheduled self-test of the verified policy that failed
// only for an outage: nothing is proven, nothing leaked. The verified
// policy keeps serving (only a leak takes the door down); /readyz stays
// 200 and says degraded, the gauge is 1, and the first such run logs an
// error and calls the webhook (control-failed, never a leak).
func (d *Daemon) degrade(v Verdict) {
	why := strings.Join(v.ControlsFailed, "; ")
	if why == "" && v.Err != nil {
		why = v.Err.Error()
	}
	d.setStatus(fmt.Sprintf("degraded: the last self-test could not prove the walls for an outage (not a leak): %s; the verified policy keeps serving, self-test retried with backoff", why))
	d.degradedGauge.Set(1)
	select {
	case d.degradeCh <- struct{}{}: // Run arms the next try
	default:
	}
	if d.degraded.Swap(true) {
		return
	}
	d.log.Error("self-test degraded: an upstream does not answer, so the walls are not proven now; the verified policy keeps serving (only a leak closes the door) and the self-test is retried with backoff", "controls", v.ControlsFailed, "err", v.Err)
	if url := d.webhook(); url != "" {
		go notify(d.log, url, v)
	}
}

// webhook is where a scheduled leak is reported: Options.Webhook, else the
// current policy's selftest.webhook.
func (d *Daemon) webhook() string {
	if d.opt.Webhook != "" {
		return d.opt.Webhook
	}
	return d.Policy().Selftest.Webhook
}

// upstreamRoots is the system roots plus the PEM file of upstream_ca.
func upstreamRoots(path string) (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("upstream_ca: %w", err)
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("upstream_ca %s: no PEM certificates", path)
	}
	return pool, nil
}

// reportLeftTrial counts and logs, as drift, a reload's trial that the
// start's Apply found left beside the walls (egressd stopped during a
// reload) and removed: the drift check never sees it, and it says that a
// reload was cut short.
func (d *Daemon) reportLeftTrial() {
	lt, ok := d.opt.Walls.(interface{ LeftTrial() []string })
	if !ok {
		return
	}
	if left := lt.LeftTrial(); len(left) > 0 {
		d.drift.Inc()
		d.log.Error("walls at start: a reload's trial was left beside the walls in force (egressd stopped during a reload) and was removed", "drift", left)
	}
}

// checkWalls compares the kernel walls with the spec and repairs drift.
// It holds reloadMu, so it never runs while a reload tries a candidate's
// walls on the probe link: a trial is drift only when one is left behind.
func (d *Daemon) checkWalls(ctx context.Context) {
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	drift, err := d.opt.Walls.Check(ctx, d.Policy())
	if len(drift) > 0 {
		d.drift.Inc()
		d.log.Error("walls drifted from the spec and were re-applied", "drift", drift, "repair_err", err)
		return
	}
	if err != nil {
		d.log.Error("checking the walls", "err", err)
	}
}

// dnsPortTries bounds listenDNS's tries for a port the system picks.
const dnsPortTries = 16

// listenDNS binds the DNS filter's UDP socket and a TCP listener on the
// same address. Where the config names port 0 the system picks the UDP
// port, and the same TCP port may be another program's: then another
// port is tried (up to dnsPortTries), rather than failing a start that
// any free port would do. A configured port is tried once.
func listenDNS(addr string, listenPacket func(network, address string) (net.PacketConn, error),
	listen func(network, address string) (net.Listener, error)) (net.PacketConn, net.Listener, error) {
	_, port, _ := net.SplitHostPort(addr)
	tries := 1
	if port == "0" {
		tries = dnsPortTries
	}
	var last error
	for range tries {
		udp, err := listenPacket("udp", addr)
		if err != nil {
			return nil, nil, fmt.Errorf("listen dns udp %s: %w", addr, err)
		}
		tcp, err := listen("tcp", udp.LocalAddr().String())
		if err == nil {
			return udp, tcp, nil
		}
		udp.Close()
		last = err
	}
	return nil, nil, fmt.Errorf("listen dns tcp %s: %w", addr, last)
}
