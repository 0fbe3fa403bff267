package daemon

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

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
// live token of that identity, to a target of its plan, once each, are
// probe traffic (counted apart, not alerted on as high-risk). Anything
// else under a probe User-Agent is an alert of its own kind
// (probe-label). An agent can fetch a plan too, but then gains only the
// plan's own targets, once, and its run shows as started and, unless it
// reports, overdue.
//
// What a sandbox reports is its word. A leak is evidence: kept, alerted,
// an open incident for the identity (quarantined under
// selftest.quarantine_on_probe_leak). A pass is a claim: recorded as the
// sandbox's, it never closes an open incident; an operator does
// (POST /probes/{identity}/ack, `egressd probes ack`). Times are egressd's
// own (when the result arrived), and the schedule a sandbox claims is
// capped by selftest.probe_every_max.

// Bounds on what a sandbox can make egressd hold.
const (
	maxProbeResult  = 1 << 20 // bytes of one posted report
	probeTokenTTL   = 15 * time.Minute
	maxProbeTokens  = 16 // live tokens per identity
	defaultEvery    = 5 * time.Minute
	maxProbeClients = 4096 // identities tracked
	// A sandbox may fetch plans and post results at most this often
	// (a token bucket per identity): each is a history record.
	probeRateEvery = 30 * time.Second
	probeRateBurst = 8
	// metadataSpellingsPerAddr is how many spellings of each metadata
	// address the probe sends (selftest's metadataSpellings).
	metadataSpellingsPerAddr = 6
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
	tokens   map[string]*runToken
	last     *selftest.Report
	lastAt   time.Time
	every    time.Duration
	started  time.Time // last plan fetch
	received int
	incident *Incident // an in-sandbox leak no operator acknowledged yet
	limit    *rate.Limiter
}

// runToken is one plan handed out: when, and how many requests to each
// of its targets (canonical host) it may still label as probe traffic.
type runToken struct {
	issued time.Time
	left   map[string]int
}

// Incident is an open in-sandbox leak: evidence a later pass from the
// same sandbox does not close.
type Incident struct {
	Identity string    `json:"identity"`
	Opened   time.Time `json:"opened"`    // egressd's clock: the first leak received
	LastLeak time.Time `json:"last_leak"` // the latest leak received
	Leaks    []string  `json:"leaks"`     // probe ids that leaked (newest run's first)
	Runs     int       `json:"leak_runs"`
	// ClaimedSealed counts passes the sandbox reported since: claims,
	// shown, never closing the incident.
	ClaimedSealed int  `json:"claimed_sealed"`
	Quarantined   bool `json:"quarantined"`
}

// probes is the registry of in-sandbox probe runs, per identity.
type probes struct {
	mu    sync.Mutex
	now   func() time.Time
	ids   map[string]*probeState
	hosts map[string]bool // the current plan's targets
	plan  selftest.Targets
	// quarantineOnLeak is selftest.quarantine_on_probe_leak.
	quarantineOnLeak bool
	// the canary name and URL with {token} unfilled: each identity gets
	// its own token
	canaryName, canaryURL string
	log                   *slog.Logger
	save                  func(ProbeResult) error
	// everyMax caps the schedule a sandbox claims; quarantine, when set
	// (selftest.quarantine_on_probe_leak), quarantines an identity whose
	// probe reports a leak; alert raises an alert (nil: none).
	everyMax   time.Duration
	quarantine func(identity string) int
	alert      func(proxy.Attempt)
	incidents  *prometheus.Desc

	lastTime *prometheus.Desc
	outcome  *prometheus.Desc
	overdue  *prometheus.Desc
	runs     *prometheus.CounterVec
}

func newProbes(log *slog.Logger, save func(ProbeResult) error) *probes {
	return &probes{
		now: time.Now, ids: map[string]*probeState{}, log: log, save: save,
		lastTime:  prometheus.NewDesc("egressd_probe_last_run_timestamp_seconds", "When each identity's in-sandbox probe last reported.", []string{"identity"}, nil),
		outcome:   prometheus.NewDesc("egressd_probe_last_outcome", "1 for the outcome of each identity's last in-sandbox probe run (sealed, leak, control-failed, incomplete).", []string{"identity", "outcome"}, nil),
		overdue:   prometheus.NewDesc("egressd_probe_overdue", "1 when an identity's in-sandbox probe has not reported for twice its schedule.", []string{"identity"}, nil),
		incidents: prometheus.NewDesc("egressd_probe_incident_open", "1 while an identity's in-sandbox leak is an open incident (until an operator acknowledges it).", []string{"identity"}, nil),
		everyMax:  policy.DefaultProbeEveryMax,
		runs:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "egressd_probe_runs_total", Help: "In-sandbox probe results received, by identity and outcome."}, []string{"identity", "outcome"}),
	}
}

// setPolicy derives the plan sandboxes get from p.
func (ps *probes) setPolicy(p *policy.Policy) {
	c := plan.Derive(p, nil)
	t := c.Targets()
	ps.mu.Lock()
	ps.plan, ps.hosts = t, t.Hosts()
	ps.canaryName, ps.canaryURL = p.Selftest.CanaryName, p.Selftest.CanaryURL
	ps.everyMax, ps.quarantineOnLeak = p.Selftest.ProbeEveryMax, p.Selftest.QuarantineOnProbeLeak
	ps.mu.Unlock()
}

func (ps *probes) state(id string) *probeState {
	s := ps.ids[id]
	if s == nil {
		if len(ps.ids) >= maxProbeClients {
			return nil
		}
		s = &probeState{tokens: map[string]*runToken{}, limit: rate.NewLimiter(rate.Every(probeRateEvery), probeRateBurst)}
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

// label is proxy.ProbeHooks.Label: a live token of this identity, to a
// target of its plan, within that target's budget (each target once).
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
	rt, ok := s.tokens[tok]
	if !ok || ps.now().Sub(rt.issued) > probeTokenTTL {
		return false
	}
	h := canonHost(host)
	if rt.left[h] <= 0 {
		return false
	}
	rt.left[h]--
	return true
}

// canonHost is the key of a host in a label budget: an address in any
// spelling as its canonical form, a name in lower case.
func canonHost(h string) string {
	h = strings.ToLower(strings.Trim(h, "[]"))
	if a, err := netip.ParseAddr(h); err == nil {
		return a.Unmap().String()
	}
	if t, err := policy.ParseAuthority(net.JoinHostPort(h, "80")); err == nil && t.Addr.IsValid() {
		return t.Addr.Unmap().String()
	}
	return h
}

// labelBudget is how many requests a run of plan t sends to each host
// through the proxy: one per target, each metadata address in all its
// spellings.
func labelBudget(t selftest.Targets) map[string]int {
	out := map[string]int{}
	add := func(h string, n int) {
		if h != "" {
			out[canonHost(h)] += n
		}
	}
	hostOf := func(raw string) {
		if u, err := url.Parse(raw); err == nil {
			add(u.Hostname(), 1)
		}
	}
	hostPort := func(hp string) {
		if h, _, err := net.SplitHostPort(hp); err == nil {
			add(h, 1)
		} else {
			add(hp, 1)
		}
	}
	for _, a := range t.Metadata {
		add(a.String(), metadataSpellingsPerAddr)
	}
	for _, n := range t.MetadataNames {
		add(n, 1)
	}
	add(t.CanaryName, 1)
	hostOf(t.CanaryURL)
	hostPort(t.Unlisted)
	hostPort(t.SNIHost)
	hostOf(t.HostTrickURL)
	add(t.HostTrickHost, 1)
	for _, r := range t.Refused {
		hostOf(r.URL)
	}
	for _, u := range t.ExpectReachable {
		hostOf(u)
	}
	return out
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
		if !s.limit.AllowN(now, 1) {
			ps.mu.Unlock()
			ps.log.Warn("probe plans over the rate refused", "identity", identity)
			http.Error(w, "egressd: probe runs over the rate: retry later", http.StatusTooManyRequests)
			return
		}
		for t, rt := range s.tokens {
			if now.Sub(rt.issued) > probeTokenTTL || len(s.tokens) >= maxProbeTokens {
				delete(s.tokens, t)
			}
		}
		token := hex.EncodeToString(tok)
		targets := ps.targets(identity)
		s.tokens[token] = &runToken{issued: now, left: labelBudget(targets)}
		s.started = now
		resp := planResponse{Identity: identity, Token: token, Targets: targets}
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
// The report is the sandbox's word: its time becomes egressd's, its
// schedule is capped, a leak opens (or extends) an incident and a pass
// never closes one.
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
	delete(s.tokens, req.Token) // the run's window ends: its labels too
	req.Report.Clean()          // the sandbox's own text, bound for logs, history and report
	now := ps.now()
	// egressd's clock, not the sandbox's: when the run's result arrived
	// (its claimed start and duration would make ages and "last run").
	req.Report.Start = now.Add(-min(max(req.Report.Duration, 0), probeTokenTTL))
	req.Report.Duration = min(max(req.Report.Duration, 0), probeTokenTTL)
	s.last, s.lastAt, s.received = req.Report, now, s.received+1
	s.every = defaultEvery
	if req.Every > 0 {
		s.every = min(req.Every, cmp.Or(ps.everyMax, policy.DefaultProbeEveryMax))
	}
	out := req.Report.Outcome()
	var inc *Incident
	quarantine := false
	switch {
	case out == selftest.OutcomeLeak:
		if s.incident == nil {
			s.incident = &Incident{Identity: identity, Opened: now}
		}
		s.incident.LastLeak, s.incident.Runs = now, s.incident.Runs+1
		var ids []string
		for _, r := range req.Report.Leaks() {
			ids = append(ids, r.ID)
		}
		ids = append(ids, s.incident.Leaks...)
		slices.Sort(ids)
		ids = slices.Compact(ids)
		s.incident.Leaks = ids[:min(len(ids), 64)]
		quarantine = ps.quarantineOnLeak && !s.incident.Quarantined
		s.incident.Quarantined = s.incident.Quarantined || quarantine
		c := *s.incident
		inc = &c
	case s.incident != nil && out == selftest.OutcomeSealed:
		s.incident.ClaimedSealed++
		c := *s.incident
		inc = &c
	}
	ps.mu.Unlock()
	ps.runs.WithLabelValues(identity, out).Inc()
	res := ProbeResult{Identity: identity, Report: req.Report, Received: now}
	switch {
	case out == selftest.OutcomeLeak:
		// the message is the one operators and tests grep for; the
		// incident stays open until acknowledged
		ps.log.Error("in-sandbox probe found a leak", "identity", identity, "leaks", inc.Leaks, "incident_opened", inc.Opened)
		if quarantine && ps.quarantine != nil {
			ps.quarantine(identity)
			ps.log.Error("identity quarantined: its in-sandbox probe found a leak (selftest.quarantine_on_probe_leak)", "identity", identity)
		}
		if ps.alert != nil {
			ps.alert(proxy.Attempt{Time: now, Identity: identity, Decision: "leak", Reason: "in-sandbox probe: " + strings.Join(inc.Leaks, ", "), Kind: proxy.AlertProbeLeak})
		}
	case inc != nil:
		ps.log.Warn("in-sandbox probe claims sealed while its leak incident is open: the claim does not close it", "identity", identity, "opened", inc.Opened, "claims", inc.ClaimedSealed)
	case out == selftest.OutcomeSealed:
		ps.log.Info("in-sandbox probe claims sealed", "identity", identity, "probes", len(req.Report.Results))
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

// Incidents returns the open in-sandbox leak incidents.
func (ps *probes) Incidents() []Incident {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var out []Incident
	for _, s := range ps.ids {
		if s.incident != nil {
			out = append(out, *s.incident)
		}
	}
	slices.SortFunc(out, func(a, b Incident) int { return strings.Compare(a.Identity, b.Identity) })
	return out
}

// Acknowledge closes identity's open incident (an operator looked at
// it); it reports whether one was open. A quarantine it imposed stays
// until lifted.
func (ps *probes) Acknowledge(identity, by string) bool {
	ps.mu.Lock()
	s := ps.ids[identity]
	var inc *Incident
	if s != nil {
		inc, s.incident = s.incident, nil
	}
	ps.mu.Unlock()
	if inc == nil {
		return false
	}
	ps.log.Warn("in-sandbox leak incident acknowledged", "identity", identity, "by", by, "opened", inc.Opened, "leaks", inc.Leaks)
	return true
}

// Describe and Collect export the per-identity probe state.
func (ps *probes) Describe(ch chan<- *prometheus.Desc) {
	ch <- ps.lastTime
	ch <- ps.outcome
	ch <- ps.overdue
	ch <- ps.incidents
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
		if s.incident != nil {
			cur = selftest.OutcomeLeak // a claimed pass does not close it
		}
		open := 0.0
		if s.incident != nil {
			open = 1
		}
		ch <- prometheus.MustNewConstMetric(ps.incidents, prometheus.GaugeValue, open, id)
		for _, o := range []string{selftest.OutcomeSealed, selftest.OutcomeLeak, selftest.OutcomeControlFailed, selftest.OutcomeIncomplete} {
			v := 0.0
			if o == cur {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(ps.outcome, prometheus.GaugeValue, v, id, o)
		}
	}
}
