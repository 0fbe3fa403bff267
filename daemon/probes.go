package daemon

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy"
	"github.com/egressd/egressd/selftest"
	"github.com/egressd/egressd/selftest/plan"
)

// In-sandbox probes (`egressd probe`) fetch their plan from the proxy's
// reserved host and post their result back the same way; the identity is
// the one the proxy gives the sandbox's source, never one the sandbox
// names. Each plan carries a run token: requests whose User-Agent holds a
// live token of that identity, to a host of its plan, are probe traffic
// (counted apart, never alerted on). An agent can fetch a plan too, but
// then gains only the plan's own targets, and its run shows as started
// and, unless it reports, overdue.

// Bounds on what a sandbox can make egressd hold.
const (
	maxProbeResult  = 1 << 20 // bytes of one posted report
	probeTokenTTL   = 15 * time.Minute
	maxProbeTokens  = 16 // live tokens per identity
	defaultEvery    = 5 * time.Minute
	maxEvery        = 24 * time.Hour // a schedule the sandbox claims: longer would never be overdue
	maxProbeClients = 4096           // identities tracked
)

// ProbeResult is one in-sandbox probe run as egressd received it.
type ProbeResult struct {
	Identity string
	Report   *selftest.Report
	Received time.Time
}

// planResponse is GET http://egressd.probe.invalid/v1/plan.
type planResponse struct {
	Identity string           `json:"identity"`
	Token    string           `json:"token"`
	Targets  selftest.Targets `json:"targets"`
}

// resultRequest is POST http://egressd.probe.invalid/v1/result.
type resultRequest struct {
	Token  string           `json:"token"`
	Every  time.Duration    `json:"every_ns,omitempty"` // the probe's schedule, for overdue
	Report *selftest.Report `json:"report"`
}

type probeState struct {
	tokens   map[string]time.Time // token → issued
	last     *selftest.Report
	lastAt   time.Time
	every    time.Duration
	started  time.Time // last plan fetch
	received int
}

// probes is the registry of in-sandbox probe runs, per identity.
type probes struct {
	mu    sync.Mutex
	now   func() time.Time
	ids   map[string]*probeState
	hosts map[string]bool // the current plan's targets
	plan  selftest.Targets
	// the canary name and URL with {token} unfilled: each identity gets
	// its own token
	canaryName, canaryURL string
	log                   *slog.Logger
	save                  func(ProbeResult) error

	lastTime *prometheus.Desc
	outcome  *prometheus.Desc
	overdue  *prometheus.Desc
	runs     *prometheus.CounterVec
}

func newProbes(log *slog.Logger, save func(ProbeResult) error) *probes {
	return &probes{
		now: time.Now, ids: map[string]*probeState{}, log: log, save: save,
		lastTime: prometheus.NewDesc("egressd_probe_last_run_timestamp_seconds", "When each identity's in-sandbox probe last reported.", []string{"identity"}, nil),
		outcome:  prometheus.NewDesc("egressd_probe_last_outcome", "1 for the outcome of each identity's last in-sandbox probe run (sealed, leak, control-failed, incomplete).", []string{"identity", "outcome"}, nil),
		overdue:  prometheus.NewDesc("egressd_probe_overdue", "1 when an identity's in-sandbox probe has not reported for twice its schedule.", []string{"identity"}, nil),
		runs:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "egressd_probe_runs_total", Help: "In-sandbox probe results received, by identity and outcome."}, []string{"identity", "outcome"}),
	}
}

// setPolicy derives the plan sandboxes get from p.
func (ps *probes) setPolicy(p *policy.Policy) {
	c := plan.Derive(p, nil)
	t := c.Targets()
	ps.mu.Lock()
	ps.plan, ps.hosts = t, t.Hosts()
	ps.canaryName, ps.canaryURL = p.Selftest.CanaryName, p.Selftest.CanaryURL
	ps.mu.Unlock()
}

func (ps *probes) state(id string) *probeState {
	s := ps.ids[id]
	if s == nil {
		if len(ps.ids) >= maxProbeClients {
			return nil
		}
		s = &probeState{tokens: map[string]time.Time{}}
		ps.ids[id] = s
	}
	return s
}

// targets is the plan for identity: its own canary token. Called with
// ps.mu held.
func (ps *probes) targets(identity string) selftest.Targets {
	c := ps.plan.Config()
	c.CanaryName, c.CanaryURL = ps.canaryName, ps.canaryURL
	c = plan.ForIdentity(c, identity)
	return c.Targets()
}

// label is proxy.ProbeHooks.Label.
func (ps *probes) label(identity, ua, host string) bool {
	tok, ok := strings.CutPrefix(ua, proxy.ProbeUserAgentPrefix)
	if !ok {
		return false
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	s := ps.ids[identity]
	if s == nil {
		return false
	}
	issued, ok := s.tokens[tok]
	if !ok || ps.now().Sub(issued) > probeTokenTTL {
		return false
	}
	h := strings.ToLower(strings.Trim(host, "[]"))
	if ps.hosts[h] || ps.targets(identity).Hosts()[h] {
		return true
	}
	// the metadata probes spell an address many ways: compare its
	// canonical form
	if a, err := netip.ParseAddr(h); err == nil {
		return ps.hosts[a.Unmap().String()]
	}
	if t, err := policy.ParseAuthority(net.JoinHostPort(h, "80")); err == nil && t.Addr.IsValid() {
		return ps.hosts[t.Addr.Unmap().String()]
	}
	return false
}

// api is proxy.ProbeHooks.API.
func (ps *probes) api(identity string, w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v1/plan":
		tok := make([]byte, 16)
		rand.Read(tok)
		ps.mu.Lock()
		s := ps.state(identity)
		if s == nil {
			ps.mu.Unlock()
			http.Error(w, "egressd: too many probing identities", http.StatusServiceUnavailable)
			return
		}
		now := ps.now()
		for t, at := range s.tokens {
			if now.Sub(at) > probeTokenTTL || len(s.tokens) >= maxProbeTokens {
				delete(s.tokens, t)
			}
		}
		token := hex.EncodeToString(tok)
		s.tokens[token] = now
		s.started = now
		resp := planResponse{Identity: identity, Token: token, Targets: ps.targets(identity)}
		ps.mu.Unlock()
		ps.log.Info("probe run started", "identity", identity)
		writeJSON(w, resp)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/result":
		var req resultRequest
		if err := json.NewDecoder(io.LimitReader(r.Body, maxProbeResult)).Decode(&req); err != nil || req.Report == nil {
			http.Error(w, "egressd: want {\"token\":..., \"report\":{...}}", http.StatusBadRequest)
			return
		}
		res, err := ps.record(identity, req)
		if err != nil {
			http.Error(w, "egressd: "+err.Error(), http.StatusForbidden)
			return
		}
		writeJSON(w, map[string]any{"identity": identity, "outcome": res.Report.Outcome(), "recorded": res.Received})
	default:
		http.Error(w, "egressd: probe API: GET /v1/plan or POST /v1/result", http.StatusNotFound)
	}
}

type probeError string

func (e probeError) Error() string { return string(e) }

// record keeps a result: the token must be one this identity was given.
func (ps *probes) record(identity string, req resultRequest) (ProbeResult, error) {
	ps.mu.Lock()
	s := ps.ids[identity]
	if s == nil {
		ps.mu.Unlock()
		return ProbeResult{}, probeError("no plan was fetched by identity " + identity)
	}
	if _, ok := s.tokens[req.Token]; !ok {
		ps.mu.Unlock()
		return ProbeResult{}, probeError("unknown or expired run token for identity " + identity)
	}
	delete(s.tokens, req.Token)
	req.Report.Clean() // the sandbox's own text, bound for logs, history and report
	now := ps.now()
	s.last, s.lastAt, s.received = req.Report, now, s.received+1
	s.every = defaultEvery
	if req.Every > 0 {
		s.every = min(req.Every, maxEvery)
	}
	ps.mu.Unlock()
	out := req.Report.Outcome()
	ps.runs.WithLabelValues(identity, out).Inc()
	res := ProbeResult{Identity: identity, Report: req.Report, Received: now}
	switch out {
	case selftest.OutcomeSealed:
		ps.log.Info("in-sandbox probe sealed", "identity", identity, "probes", len(req.Report.Results))
	case selftest.OutcomeLeak:
		var ids []string
		for _, r := range req.Report.Leaks() {
			ids = append(ids, r.ID)
		}
		ps.log.Error("in-sandbox probe found a leak", "identity", identity, "leaks", ids)
	default:
		ps.log.Warn("in-sandbox probe not sealed", "identity", identity, "outcome", out)
	}
	if ps.save != nil {
		if err := ps.save(res); err != nil {
			ps.log.Error("recording an in-sandbox probe result", "identity", identity, "err", err)
		}
	}
	return res, nil
}

// Describe and Collect export the per-identity probe state.
func (ps *probes) Describe(ch chan<- *prometheus.Desc) {
	ch <- ps.lastTime
	ch <- ps.outcome
	ch <- ps.overdue
	ps.runs.Describe(ch)
}

func (ps *probes) Collect(ch chan<- prometheus.Metric) {
	ps.runs.Collect(ch)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	now := ps.now()
	for id, s := range ps.ids {
		if s.last == nil {
			// overdue counts from a first result: a plan fetched by
			// `egressd selftest` beside serve reports nothing here
			continue
		}
		due := s.every
		if due == 0 {
			due = defaultEvery
		}
		ref := s.lastAt
		if ref.IsZero() {
			ref = s.started
		}
		over := 0.0
		if now.Sub(ref) > 2*due {
			over = 1
		}
		ch <- prometheus.MustNewConstMetric(ps.overdue, prometheus.GaugeValue, over, id)
		if s.last == nil {
			continue
		}
		ch <- prometheus.MustNewConstMetric(ps.lastTime, prometheus.GaugeValue, float64(s.lastAt.UnixNano())/1e9, id)
		cur := s.last.Outcome()
		for _, o := range []string{selftest.OutcomeSealed, selftest.OutcomeLeak, selftest.OutcomeControlFailed, selftest.OutcomeIncomplete} {
			v := 0.0
			if o == cur {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(ps.outcome, prometheus.GaugeValue, v, id, o)
		}
	}
}

// Probes returns the last in-sandbox probe result of every identity.
func (d *Daemon) Probes() []ProbeResult {
	d.probes.mu.Lock()
	defer d.probes.mu.Unlock()
	var out []ProbeResult
	for id, s := range d.probes.ids {
		if s.last != nil {
			out = append(out, ProbeResult{Identity: id, Report: s.last, Received: s.lastAt})
		}
	}
	return out
}
