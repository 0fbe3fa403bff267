package main

import (
	"errors"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/selftest"
)

const deriveConfig = `version: 1
allow:
  - name: web
    hosts: [example.org]
    pages: ["*"]
  - name: pypi
    hosts: [pypi.org, files.pythonhosted.org]
    ports: [443]
    mirror: pypi
  - name: npm
    hosts: ["*.npmjs.org"]
    mirror: npm
  - name: app
    hosts: [app.example.com]
    pages: [read, download, upload]
  - name: plain
    hosts: [plain.example.com]
    ports: [80]
    pages: [read]
  - name: anything
    cidrs: [203.0.113.0/24]
    pages: ["*"]
selftest:
  tcp: ["198.51.100.7:443", "198.51.100.7:22"]
  udp: ["198.51.100.8:53"]
  ipv6: ["[2001:db8::9]:443"]
  resolvers: ["198.51.100.8:53"]
  metadata: [169.254.169.254, "fd00:ec2::254"]
  canary_name: canary.example.net
  canary_url: http://canary.example.net/
  expect_reachable: [https://example.org/, https://pypi.org/simple/]
`

func mustPolicy(t *testing.T, cfg string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse(strings.NewReader(cfg), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSelftestConfig: the catalog derived from a policy has every selftest
// target, a publish probe per mirror rule, the write pages each page-type
// rule does not allow, and the fronting and Host-header probes on allowed
// hosts.
func TestSelftestConfig(t *testing.T) {
	p := mustPolicy(t, deriveConfig)
	c := selftestConfig(p, nil)
	type req struct{ id, method, url, reason string }
	var got []req
	for _, q := range c.Refused {
		got = append(got, req{q.ID, q.Method, q.URL, q.Reason})
	}
	want := []req{
		{"mirror-publish/pypi", "POST", "https://pypi.org/legacy/", "mirror"},
		{"mirror-publish/npm", "PUT", "https://egressd-selftest.npmjs.org/egressd-selftest", "mirror"},
		{"query-budget/app", "GET", "https://app.example.com/egressd-selftest?q=" + strings.Repeat("a", 2048), "query-budget"},
		{"header-budget/app", "GET", "https://app.example.com/egressd-selftest", "header-budget"},
		{"page-login/app", "POST", "https://app.example.com/login", "page-type"},
		{"page-posting/app", "POST", "https://app.example.com/comments", "page-type"},
		{"query-budget/plain", "GET", "http://plain.example.com/egressd-selftest?q=" + strings.Repeat("a", 2048), "query-budget"},
		{"header-budget/plain", "GET", "http://plain.example.com/egressd-selftest", "header-budget"},
		{"page-login/plain", "POST", "http://plain.example.com/login", "page-type"},
		{"page-upload/plain", "POST", "http://plain.example.com/upload", "page-type"},
		{"page-posting/plain", "POST", "http://plain.example.com/comments", "page-type"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("refused requests:\ngot  %q\nwant %q", got, want)
	}
	// every derived probe is one the policy itself refuses, for the reason given
	for _, q := range c.Refused {
		tg, err := policy.ParseURL(q.URL)
		if err != nil {
			t.Fatal(err)
		}
		d := p.DecideRequest(&tg, q.Method, q.ContentType, int64(len(q.Body)))
		if len(q.Header) > 0 && d.Allow {
			h := http.Header{}
			for k, v := range q.Header {
				h.Set(k, v)
			}
			if _, ok, _ := p.CheckHead(&d, h); !ok {
				d.Allow, d.Reason = false, policy.ReasonHeaderBudget
			}
		}
		if d.Allow || d.Reason.String() != q.Reason {
			t.Errorf("%s: the policy says allow=%v reason=%s, want a refusal as %s", q.ID, d.Allow, d.Reason, q.Reason)
		}
	}
	checks := []struct{ name, got, want string }{
		{"sni host", c.SNIHost, "example.org:443"},
		{"sni name", c.SNIName, unlistedName},
		{"unlisted", c.Unlisted, unlistedName + ":443"},
		{"host trick url", c.HostTrickURL, "http://example.org:443/"},
		{"host trick host", c.HostTrickHost, "169.254.169.254"},
		{"canary", c.CanaryURL, "http://canary.example.net/"},
	}
	for _, ck := range checks {
		if ck.got != ck.want {
			t.Errorf("%s: got %q, want %q", ck.name, ck.got, ck.want)
		}
	}
	wantICMP := []netip.Addr{netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("198.51.100.8"), netip.MustParseAddr("2001:db8::9")}
	if !slices.Equal(c.ICMP, wantICMP) {
		t.Errorf("icmp targets: got %v, want %v (each probed host once)", c.ICMP, wantICMP)
	}
	if len(c.TCP) != 2 || len(c.Metadata) != 2 || len(c.ExpectReachable) != 2 {
		t.Errorf("targets not carried over: %+v", c)
	}
}

// TestSelftestConfigNoSplicedHost: without a host-only rule there is no
// tunnel to front, so no SNI probe; and a "*" rule leaves no unlisted host.
func TestSelftestConfigNoSplicedHost(t *testing.T) {
	c := selftestConfig(mustPolicy(t, "version: 1\nallow:\n  - name: docs\n    hosts: [docs.example.com]\n    pages: [read]\n"), nil)
	if c.SNIHost != "" {
		t.Errorf("SNI host %q, want none", c.SNIHost)
	}
	c = selftestConfig(mustPolicy(t, "version: 1\nallow:\n  - name: all\n    hosts: [\"*\"]\n    pages: [\"*\"]\n"), nil)
	if c.Unlisted != "" || c.SNIHost != "" {
		t.Errorf("with a * rule: unlisted %q, SNI host %q; want none", c.Unlisted, c.SNIHost)
	}
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
		name    string
		rep     *selftest.Report
		err     error
		sealed  bool
		leaks   []string
		errText string
	}{
		{"sealed", rep(selftest.Pass, selftest.Pass), nil, true, nil, ""},
		{"leak", rep(selftest.Pass, selftest.Leak, selftest.NotRun), nil, false, []string{"pb: why LEAK"}, ""},
		{"failed control", rep(selftest.Failed), nil, false, []string{"pa: why FAILED"}, ""},
		{"not run", rep(selftest.Pass, selftest.NotRun, selftest.NotRun), nil, false, nil, "2 of 3 probes not-run: why not-run"},
		{"could not start", nil, errors.New("no namespace"), false, nil, "no namespace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := verdict(tt.rep, tt.err)
			if v.Sealed != tt.sealed || !slices.Equal(v.Leaks, tt.leaks) {
				t.Errorf("got sealed=%v leaks=%q, want %v %q", v.Sealed, v.Leaks, tt.sealed, tt.leaks)
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
			if got := probeSlots(mustPolicy(t, tt.cfg)); got != tt.want {
				t.Errorf("got %d, want %d", got, tt.want)
			}
		})
	}
}

// TestVerdictProxyOnly: serve without --walls proves the checkpoint and
// names what it did not prove; a leak or any other unfinished probe still
// keeps it from sealed.
func TestVerdictProxyOnly(t *testing.T) {
	skipped := selftest.Result{ID: "tcp/x", Status: selftest.NotRun, Detail: proxyOnly}
	pass := selftest.Result{ID: "http-canary", Status: selftest.Pass}
	v := verdict(&selftest.Report{Results: []selftest.Result{pass, skipped, skipped}}, nil)
	if !v.Sealed || v.Err != nil || !strings.Contains(v.Note, "2 direct-route probes not run") {
		t.Errorf("proxy-only pass: %+v, want sealed with a note", v)
	}
	leak := selftest.Result{ID: "http-canary", Status: selftest.Leak, Detail: "allowed"}
	if v := verdict(&selftest.Report{Results: []selftest.Result{leak, skipped}}, nil); v.Sealed || len(v.Leaks) != 1 {
		t.Errorf("proxy-only leak: %+v, want not sealed", v)
	}
	root := selftest.Result{ID: "tcp/y", Status: selftest.NotRun, Detail: needsRoot}
	if v := verdict(&selftest.Report{Results: []selftest.Result{pass, skipped, root}}, nil); v.Sealed || v.Err == nil {
		t.Errorf("needs root: %+v, want incomplete", v)
	}
}
