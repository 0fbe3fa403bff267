package plan

import (
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/egressd/egressd/policy"
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

// TestDerive: the catalog derived from a policy has every selftest
// target, a publish probe per mirror rule, the write pages each page-type
// rule does not allow, and the fronting and Host-header probes on allowed
// hosts.
func TestDerive(t *testing.T) {
	p := mustPolicy(t, deriveConfig)
	c := Derive(p, nil)
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
		{"sni name", c.SNIName, Unlisted},
		{"unlisted", c.Unlisted, Unlisted + ":443"},
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

// TestDeriveNoSplicedHost: without a host-only rule there is no
// tunnel to front, so no SNI probe; and a "*" rule leaves no unlisted host.
func TestDeriveNoSplicedHost(t *testing.T) {
	c := Derive(mustPolicy(t, "version: 1\nallow:\n  - name: docs\n    hosts: [docs.example.com]\n    pages: [read]\n"), nil)
	if c.SNIHost != "" {
		t.Errorf("SNI host %q, want none", c.SNIHost)
	}
	c = Derive(mustPolicy(t, "version: 1\nallow:\n  - name: all\n    hosts: [\"*\"]\n    pages: [\"*\"]\n"), nil)
	if c.Unlisted != "" || c.SNIHost != "" {
		t.Errorf("with a * rule: unlisted %q, SNI host %q; want none", c.Unlisted, c.SNIHost)
	}
}

// TestCanaryTokens: {token} in the canary name and URL becomes each
// identity's own token: the self-test's in its own config, every
// identity's in CanaryTokens for the canary-log probe, all distinct.
func TestCanaryTokens(t *testing.T) {
	p := mustPolicy(t, `version: 1
identities:
  - name: agent-a
    cidrs: [198.51.100.2/32]
  - name: agent-b
    cidrs: [198.51.100.3/32]
selftest:
  canary_name: "{token}.canary.example.net"
  canary_url: "http://{token}.canary.example.net/c"
`)
	c := Derive(p, nil)
	self := CanaryToken(policy.SelftestIdentity)
	if c.CanaryName != self+".canary.example.net" || c.CanaryURL != "http://"+self+".canary.example.net/c" {
		t.Errorf("self-test canary: %q %q", c.CanaryName, c.CanaryURL)
	}
	a, b := CanaryToken("agent-a"), CanaryToken("agent-b")
	if a == b || a == self || c.CanaryTokens["agent-a"] != a || c.CanaryTokens["agent-b"] != b || len(a) != 12 {
		t.Errorf("tokens: self %s a %s b %s, map %v", self, a, b, c.CanaryTokens)
	}
	raw := c
	raw.CanaryName, raw.CanaryURL = p.Selftest.CanaryName, p.Selftest.CanaryURL
	if got := ForIdentity(raw, "agent-b"); got.CanaryName != b+".canary.example.net" {
		t.Errorf("agent-b's canary: %q", got.CanaryName)
	}
	// without {token}: no per-identity tokens, the name as written
	c = Derive(mustPolicy(t, "version: 1\nselftest:\n  canary_name: canary.example.net\n"), nil)
	if c.CanaryName != "canary.example.net" || c.CanaryTokens != nil {
		t.Errorf("plain canary: %q %v", c.CanaryName, c.CanaryTokens)
	}
}

// TestRefusedInTunnel: every write probe sent inside a tunnel the policy
// allows says so (InTunnel), so an upstream outage that keeps the tunnel
// closed reads as untestable, not as a leak; plain http probes and
// probes whose tunnel the policy refuses do not.
func TestRefusedInTunnel(t *testing.T) {
	p := mustPolicy(t, deriveConfig)
	c := Derive(p, nil)
	if len(c.Refused) == 0 {
		t.Fatal("no refused requests derived")
	}
	for _, q := range c.Refused {
		want := strings.HasPrefix(q.URL, "https://")
		if q.InTunnel != want {
			t.Errorf("%s (%s): InTunnel %v, want %v", q.ID, q.URL, q.InTunnel, want)
		}
	}
	if inTunnel(p, "https://unlisted.example.net/") || inTunnel(p, "http://example.org/") {
		t.Error("inTunnel: true for a refused tunnel or a plain http URL")
	}
}
