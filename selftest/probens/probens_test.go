package probens

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/selftest"
)

func mustPolicy(t *testing.T, cfg string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse(strings.NewReader(cfg), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestVerdict(t *testing.T) {
	rep := func(ss ...selftest.Status) *selftest.Report {
		r := &selftest.Report{}
		for i, s := range ss {
			r.Results = append(r.Results, selftest.Result{ID: "p" + string(rune('a'+i)), Status: s, Detail: "why " + string(s)})
		}
		return r
	}
	tests := []struct {
		name     string
		rep      *selftest.Report
		err      error
		sealed   bool
		leaks    []string
		errText  string
		controls []string
	}{
		{"sealed", rep(selftest.Pass, selftest.Pass), nil, true, nil, "", nil},
		{"leak", rep(selftest.Pass, selftest.Leak, selftest.NotRun), nil, false, []string{"pb: why LEAK"}, "", nil},
		{"failed control", rep(selftest.Failed), nil, false, nil, "", []string{"pa: why FAILED"}},
		{"not run", rep(selftest.Pass, selftest.NotRun, selftest.NotRun), nil, false, nil, "2 of 3 probes not-run: why not-run", nil},
		{"could not start", nil, errors.New("no namespace"), false, nil, "no namespace", nil},
		// an upstream outage: sealed, named in the note, never a leak
		{"untestable", rep(selftest.Pass, selftest.Untestable), nil, true, nil, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Verdict(tt.rep, tt.err)
			if !slices.Equal(v.ControlsFailed, tt.controls) {
				t.Errorf("got controls failed %q, want %q", v.ControlsFailed, tt.controls)
			}
			if v.Sealed != tt.sealed || !slices.Equal(v.Leaks, tt.leaks) {
				t.Errorf("got sealed=%v leaks=%q, want %v %q", v.Sealed, v.Leaks, tt.sealed, tt.leaks)
			}
			if v.Leaked() != (len(tt.leaks) > 0) {
				t.Errorf("Leaked() = %v with leaks %q", v.Leaked(), tt.leaks)
			}
			if tt.rep != nil {
				if n := len(tt.rep.Untestables()); len(v.Untestable) != n || n > 0 && !strings.Contains(v.Note, "untestable live") {
					t.Errorf("untestable: %q, note %q", v.Untestable, v.Note)
				}
			}
			if tt.errText == "" && v.Err != nil || tt.errText != "" && (v.Err == nil || !strings.Contains(v.Err.Error(), tt.errText)) {
				t.Errorf("got err %v, want %q", v.Err, tt.errText)
			}
		})
	}
}

func TestProbeSlots(t *testing.T) {
	tests := []struct {
		name string
		cfg  string
		want int
	}{
		{"defaults", "version: 1\n", 16384},
		{"small v4 pool", "version: 1\nsandbox:\n  pool4: 198.51.100.128/25\n", 32},
		{"long prefix", "version: 1\nsandbox:\n  interface_prefix: abcdefghij\n  pool4: 10.0.0.0/8\n", 100000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Slots(mustPolicy(t, tt.cfg)); got != tt.want {
				t.Errorf("got %d, want %d", got, tt.want)
			}
		})
	}
}

// TestVerdictProxyOnly: serve without --walls proves the checkpoint and
// names what it did not prove; a leak or any other unfinished probe still
// keeps it from sealed.
func TestVerdictProxyOnly(t *testing.T) {
	skipped := selftest.Result{ID: "tcp/x", Status: selftest.NotRun, Detail: ProxyOnly}
	pass := selftest.Result{ID: "http-canary", Status: selftest.Pass}
	v := Verdict(&selftest.Report{Results: []selftest.Result{pass, skipped, skipped}}, nil)
	if !v.Sealed || v.Err != nil || !strings.Contains(v.Note, "2 direct-route probes not run") {
		t.Errorf("proxy-only pass: %+v, want sealed with a note", v)
	}
	leak := selftest.Result{ID: "http-canary", Status: selftest.Leak, Detail: "allowed"}
	if v := Verdict(&selftest.Report{Results: []selftest.Result{leak, skipped}}, nil); v.Sealed || len(v.Leaks) != 1 {
		t.Errorf("proxy-only leak: %+v, want not sealed", v)
	}
	root := selftest.Result{ID: "tcp/y", Status: selftest.NotRun, Detail: NeedsRoot}
	if v := Verdict(&selftest.Report{Results: []selftest.Result{pass, skipped, root}}, nil); v.Sealed || v.Err == nil {
		t.Errorf("needs root: %+v, want incomplete", v)
	}
}

// TestConnSetLingers: a probe that gave up and closed its connection is
// still the self-test's while egressd may be deciding what it sent (else
// that request counts as an agent's: a metadata probe became a high-risk
// attempt and an alert on a loaded machine), and no longer once
// connLinger has passed; a fresh connection from the same address counts
// again while open.
func TestConnSetLingers(t *testing.T) {
	now := time.Unix(1000, 0)
	s := &ConnSet{m: map[connKey]int{}, closed: map[connKey]time.Time{}, now: func() time.Time { return now }}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	dial := s.track(func(ctx context.Context, network, addr string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	})
	c, err := dial(t.Context(), "tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	ap := netip.MustParseAddrPort(c.LocalAddr().String())
	srv := netip.MustParseAddrPort(l.Addr().String())
	if !s.Has(ap, srv) {
		t.Fatal("an open probe connection is not in the set")
	}
	c.Close()
	if !s.Has(ap, srv) {
		t.Error("a probe connection closed just now left the set: what it sent would be decided as an agent's")
	}
	now = now.Add(connLinger)
	if s.Has(ap, srv) {
		t.Error("a probe connection closed connLinger ago is still in the set")
	}
	c2, err := dial(t.Context(), "tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if len(s.closed) != 0 {
		t.Errorf("expired entries kept: %v", s.closed)
	}
	if !s.Has(netip.MustParseAddrPort(c2.LocalAddr().String()), srv) {
		t.Error("a second open connection is not in the set")
	}
}
