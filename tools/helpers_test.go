package tools_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/egressd/egressd/event"
	"github.com/egressd/egressd/internal/testutil"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy"
	"github.com/egressd/egressd/tools"
)

// page is the HTML the loopback origin serves.
const page = `<!doctype html><html><head><title>Docs</title><script>var secret = 1;</script></head>
<body><h1>Hello tools</h1><p>Some <b>bold</b> text and <a href="/next">a link</a>.</p></body></html>`

// env is a checkpoint on loopback with the tool endpoint in front: an
// origin on 127.0.0.1, the proxy (its every upstream dial guarded to
// 127.0.0.1), and the MCP endpoint on 127.0.0.1.
type env struct {
	origin   string // host:port
	endpoint string // http://127.0.0.1:port/mcp
	px       *proxy.Proxy
	reg      *prometheus.Registry
	logs     *testutil.LogWatch
	mu       sync.Mutex
	alerts   []proxy.Attempt
	refused  []string // upstream dials the guard refused
	done     chan struct{}
}

// token is the secret of identity ci in testPolicy.
const token = "s3cret"

// newEnv builds the environment; extra is appended to the policy.
func newEnv(t testing.TB, extra string) *env { t.Helper(); return newEnvTimeout(t, extra, 0) }

// newEnvTimeout is newEnv with the endpoint's per-call timeout.
func newEnvTimeout(t testing.TB, extra string, timeout time.Duration) *env {
	t.Helper()
	e := &env{reg: prometheus.NewRegistry(), logs: testutil.NewLogWatch(), done: make(chan struct{})}
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/page":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			io.WriteString(w, page)
		case "/slow": // head, then nothing until the test ends
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(200)
			io.WriteString(w, "first bytes")
			w.(http.Flusher).Flush()
			<-e.done
		case "/big":
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, strings.Repeat("0123456789", 1000))
		default:
			http.NotFound(w, r)
		}
	}))
	o.Config.ErrorLog = log.New(io.Discard, "", 0)
	t.Cleanup(o.Close)
	t.Cleanup(func() { close(e.done) }) // runs before o.Close: /slow returns
	e.origin = strings.TrimPrefix(o.URL, "http://")
	_, port, _ := net.SplitHostPort(e.origin)
	sum := sha256.Sum256([]byte(token))
	cfg := fmt.Sprintf(`version: 1
allow:
  - name: origin
    cidrs: [127.0.0.1/32]
    ports: [%s]
identities:
  - name: agent
    cidrs: [127.0.0.1/32]
  - name: ci
    user: ci
    token_sha256: %s
`, port, hex.EncodeToString(sum[:])) + extra
	pol, err := policy.Parse(strings.NewReader(cfg), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	e.px = proxy.New(pol, proxy.Config{
		Logger:   slog.New(slog.NewJSONHandler(e.logs, nil)),
		Registry: e.reg,
		// no test sends a packet anywhere but 127.0.0.1, whatever the code does
		Control: func(_, address string, _ syscall.RawConn) error {
			if ap, err := netip.ParseAddrPort(address); err != nil || ap.Addr() != netip.MustParseAddr("127.0.0.1") {
				e.mu.Lock()
				e.refused = append(e.refused, address)
				e.mu.Unlock()
				return fmt.Errorf("test guard: dial to %s refused", address)
			}
			return nil
		},
		Alert: func(a proxy.Attempt) {
			e.mu.Lock()
			e.alerts = append(e.alerts, a)
			e.mu.Unlock()
		},
	})
	ts := httptest.NewServer(tools.Handler(tools.Config{Checkpoint: e.px, Version: "test", Timeout: timeout}))
	t.Cleanup(ts.Close)
	e.endpoint = ts.URL + tools.Path
	t.Cleanup(func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if len(e.refused) > 0 {
			t.Errorf("the proxy tried to dial forbidden addresses: %v", e.refused)
		}
	})
	return e
}

// headerRT adds headers to every request.
type headerRT struct {
	h  http.Header
	rt http.RoundTripper
}

func (h headerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.h {
		r.Header[k] = v
	}
	return h.rt.RoundTrip(r)
}

// connect opens a Go SDK client session to the endpoint, with hdr on
// every request.
func (e *env) connect(ctx context.Context, hdr http.Header) (*mcp.ClientSession, error) {
	hc := &http.Client{Timeout: 10 * time.Second, Transport: headerRT{h: hdr, rt: &http.Transport{Proxy: nil}}}
	c := mcp.NewClient(&mcp.Implementation{Name: "egressd-test", Version: "1"}, nil)
	return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: e.endpoint, HTTPClient: hc, DisableStandaloneSSE: true, MaxRetries: -1}, nil)
}

// decisions are the decision lines logged so far.
func (e *env) decisions(t *testing.T) []event.Record {
	t.Helper()
	var out []event.Record
	for l := range strings.SplitSeq(e.logs.String(), "\n") {
		var r event.Record
		if l == "" || json.Unmarshal([]byte(l), &r) != nil || !r.IsDecision() {
			continue
		}
		out = append(out, r)
	}
	return out
}

// metric sums the samples of a metric family whose labels include want.
func (e *env) metric(t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue next
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// text joins a tool result's text content.
func text(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// checkCounted checks that calls tool calls were logged as decisions of
// agent via tool, highRisk of them counted high-risk and denied of them
// counted denials, in egressd_requests_total and egressd_tool_calls_total.
func (e *env) checkCounted(t *testing.T, calls, highRisk, denied int) {
	t.Helper()
	ds := e.decisions(t)
	if len(ds) != calls {
		t.Fatalf("%d decision lines, want %d:\n%s", len(ds), calls, e.logs.String())
	}
	for _, d := range ds {
		if d.Via != event.ViaTool || d.Identity != "agent" {
			t.Errorf("decision %+v: want via tool, identity agent", d)
		}
	}
	if got := e.metric(t, "egressd_high_risk_total", nil); got != float64(highRisk) {
		t.Errorf("egressd_high_risk_total = %v, want %d", got, highRisk)
	}
	if got := e.metric(t, "egressd_requests_total", map[string]string{"decision": "deny"}); got != float64(denied) {
		t.Errorf("egressd_requests_total{decision=deny} = %v, want %d", got, denied)
	}
	if got := e.metric(t, "egressd_tool_calls_total", map[string]string{"decision": "deny"}); got != float64(denied) {
		t.Errorf("egressd_tool_calls_total{decision=deny} = %v, want %d", got, denied)
	}
	if got := e.metric(t, "egressd_tool_calls_total", map[string]string{"decision": "allow"}); got != float64(calls-denied) {
		t.Errorf("egressd_tool_calls_total{decision=allow} = %v, want %d", got, calls-denied)
	}
}
