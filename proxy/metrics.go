package proxy

import "github.com/prometheus/client_golang/prometheus"

// metrics are the proxy's Prometheus collectors (names in README).
type metrics struct {
	requests        *prometheus.CounterVec // agent traffic only
	highRisk        prometheus.Counter
	bytes           *prometheus.CounterVec
	bytesIn         prometheus.Counter // bytes{direction="in"}, looked up once
	bytesOut        prometheus.Counter
	tunnels         prometheus.Gauge
	streamed        prometheus.Counter
	decisionLatency prometheus.Histogram
	probes          *prometheus.CounterVec // probe traffic, by its own identity
	tools           *prometheus.CounterVec // agent requests made by the tool endpoint (also in requests)
	acceptErrors    prometheus.Counter
	responsesCut    *prometheus.CounterVec
	shed            prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egressd_requests_total", Help: "Proxy decisions by outcome, reason, page type and rule.",
		}, []string{"decision", "reason", "page_type", "rule"}),
		highRisk: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "egressd_high_risk_total", Help: "Requests to high-risk destinations (metadata, consoles, upload hosts), all denied.",
		}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egressd_bytes_total", Help: "Bytes relayed: out = client to upstream, in = upstream to client.",
		}, []string{"direction"}),
		tunnels: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "egressd_open_tunnels", Help: "Tunnels open now (CONNECT and transparent TLS).",
		}),
		streamed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "egressd_tunnels_streamed_total", Help: "Spliced tunnels that streamed and went from the quiet-tunnel loop to a goroutine relay (Linux).",
		}),
		decisionLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "egressd_decision_seconds", Help: "Time from request to policy decision.",
			Buckets: []float64{1e-6, 5e-6, 2e-5, 1e-4, 5e-4, 2e-3, 1e-2, 0.1},
		}),
		acceptErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "egressd_accept_errors_total", Help: "Failed accepts on the proxy and transparent listeners (out of descriptors, above all).",
		}),
		responsesCut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egressd_responses_cut_total", Help: "Allowed responses cut short by egressd: a limits.response_* bound, or the client left.",
		}, []string{"why"}),
		tools: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egressd_tool_calls_total", Help: "Fetches by egressd's tool endpoint for sandboxes, by outcome and reason (also counted in egressd_requests_total).",
		}, []string{"decision", "reason"}),
		shed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "egressd_connections_shed_total", Help: "Client connections answered 503 fd-limit: too few file descriptors left above the reserve.",
		}),
	}
	m.probes = newProbeMetric()
	m.bytesIn, m.bytesOut = m.bytes.WithLabelValues("in"), m.bytes.WithLabelValues("out")
	if reg != nil {
		reg.MustRegister(m.requests, m.highRisk, m.bytes, m.tunnels, m.streamed, m.decisionLatency, m.responsesCut, m.shed, m.acceptErrors, m.probes, m.tools)
	}
	return m
}
