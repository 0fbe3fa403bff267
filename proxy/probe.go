package proxy

import (
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/egressd/egressd/policy"
)

// Probe traffic is not agent traffic. egressd's own self-test (the
// connections Config.ReadyExempt names) and the in-sandbox `egressd probe`
// (requests whose User-Agent carries a run token egressd handed to that
// identity, to a target of its plan) are logged under their own identity
// (SelftestIdentity, ProbeIdentityPrefix+identity) and counted in
// egressd_probe_requests_total, never in egressd_requests_total or
// egressd_high_risk_total, so neither alerts nor the evidence pack
// mistake egressd talking to itself for an agent trying to get out.

// SelftestIdentity and ProbeIdentityPrefix label probe traffic (policy).
const (
	SelftestIdentity    = policy.SelftestIdentity
	ProbeIdentityPrefix = policy.ProbeIdentityPrefix
)

// ProbeUserAgentPrefix starts the User-Agent of an in-sandbox probe run:
// "egressd-probe/TOKEN", TOKEN from the plan egressd served.
const ProbeUserAgentPrefix = "egressd-probe/"

// ProbeHost is the reserved name the proxy answers itself: a sandbox
// fetches its probe plan from http://ProbeHost/v1/plan and posts its result
// to http://ProbeHost/v1/result, through the checkpoint (the only way out it
// has), attributed to the identity of its source. .invalid never resolves,
// so the name can reach nothing else.
const ProbeHost = "egressd.probe.invalid"

// ProbeHooks connects the proxy to the daemon's probe registry.
type ProbeHooks struct {
	// API serves http://ProbeHost/ for identity; nil: 404.
	API func(identity string, w http.ResponseWriter, r *http.Request)
	// Label reports whether a request by identity with this User-Agent to
	// host is part of a probe run egressd handed out (token valid for
	// that identity, host in its plan).
	Label func(identity, userAgent, host string) bool
}

// probeLabel is the identity a request is logged and counted under when
// it is probe traffic, "" when it is an agent's.
func (x *Proxy) probeLabel(r *http.Request, identity, host string) string {
	if x.exempted(r.RemoteAddr, localAddr(r)) {
		return SelftestIdentity
	}
	ua := r.Header.Get("User-Agent")
	if x.probe.Label != nil && strings.HasPrefix(ua, ProbeUserAgentPrefix) && x.probe.Label(identity, ua, host) {
		return ProbeIdentityPrefix + identity
	}
	return ""
}

// forgedProbe reports whether r claims to be probe traffic (a probe
// User-Agent) that probeLabel did not label: an alert of its own kind.
func forgedProbe(r *http.Request, label string) bool {
	return label == "" && strings.HasPrefix(r.Header.Get("User-Agent"), ProbeUserAgentPrefix)
}

// isProbeAPI reports whether r is addressed to the proxy's own probe API.
func isProbeAPI(r *http.Request) bool {
	if r.Method == http.MethodConnect || !r.URL.IsAbs() || r.URL.Scheme != "http" {
		return false
	}
	h := r.URL.Hostname()
	return strings.EqualFold(h, ProbeHost) && (r.URL.Port() == "" || r.URL.Port() == "80")
}

func (x *Proxy) serveProbeAPI(w http.ResponseWriter, r *http.Request, identity string) {
	w.Header().Set("Connection", "close")
	if x.probe.API == nil {
		http.Error(w, "egressd: no probe API here", http.StatusNotFound)
		return
	}
	x.probe.API(identity, w, r)
}

func newProbeMetric() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "egressd_probe_requests_total",
		Help: "Proxy decisions on probe traffic (egressd's self-test and in-sandbox probes), by probe identity, decision and reason; not in egressd_requests_total or egressd_high_risk_total.",
	}, []string{"identity", "decision", "reason"})
}
