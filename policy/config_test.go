package policy

import (
	"errors"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  string
		want string // substring of the error, with file:line
	}{
		{"missing version", "allow: []\n", "test.yaml:1: version: missing"},
		{"bad version", "version: 2\n", "test.yaml:1: version: unsupported version 2"},
		{"unknown top key", "version: 1\nalow: []\n", "test.yaml:2: top level: unknown key \"alow\""},
		{"unknown rule key", "version: 1\nallow:\n  - name: a\n    hosts: [a.com]\n    host: b.com\n", "test.yaml:5: allow[0]: unknown key \"host\": did you mean \"hosts\"?"},
		{"typo names the rule index", "version: 1\nallow:\n  - name: a\n    hosts: [a.com]\n  - name: b\n    hosts: [b.com]\n    mirorr: pypi\n", "test.yaml:7: allow[1]: unknown key \"mirorr\": did you mean \"mirror\"?"},
		{"typo in a section", "version: 1\nselftest:\n  canary-url: http://x.test/\n", "test.yaml:3: selftest: unknown key \"canary-url\": did you mean \"canary_url\"?"},
		{"typo at top level", "version: 1\nalow: []\n", "did you mean \"allow\"?"},
		{"no suggestion for a stranger", "version: 1\nallow:\n  - hosts: [a.com]\n    colour: red\n", "test.yaml:4: allow[0]: unknown key \"colour\"\n"},
		{"a string where a list goes", "version: 1\nallow:\n  - hosts: [a.com]\n  - hosts: pypi.org\n", "test.yaml:4: allow[1].hosts: want a list, e.g. [pypi.org]"},
		{"a number where a list goes", "version: 1\nallow:\n  - hosts: [a.com]\n    ports: 443\n", "test.yaml:4: allow[0].ports: want a list, e.g. [443]"},
		{"a list where a value goes", "version: 1\nallow:\n  - hosts: [a.com]\n    mirror: [pypi]\n", "test.yaml:4: allow[0].mirror: want a single value, not a list"},
		{"a word where a number goes", "version: 1\nlimits:\n  conns_per_identity: many\n", "test.yaml:3: limits.conns_per_identity: want a whole number, not a string"},
		{"a key set twice", "version: 1\nallow:\n  - hosts: [a.com]\n    ports: [443]\n    hosts: [b.com]\n", "test.yaml:5: allow[0]: key \"hosts\" is set twice (first at line 3)"},
		{"an unknown key in a flow section", "version: 1\nallow:\n  - hosts: [a.com]\n    inject: {valu_from: \"file:/s\"}\n", "test.yaml:4: allow[0].inject: unknown key \"valu_from\": did you mean \"value_from\"?"},
		{"a number too big", "version: 1\nlimits:\n  header_bytes: 99999999999999999999\n", "test.yaml:3: limits.header_bytes: \"99999999999999999999\": want a whole number of at most 64 bits"},
		{"a section where a host goes", "version: 1\nallow:\n  - hosts:\n      - a.com\n      - {host: b.com}\n", "test.yaml:5: allow[0].hosts[1]: want a single value, not a section"},
		{"a list where a section goes", "version: 1\nlimits: [1, 2]\n", "test.yaml:2: limits: want a section of keys (key: value), not a list"},
		{"a value where rules go", "version: 1\nallow: pypi.org\n", "test.yaml:2: allow: want a list of entries (lines starting with \"- \")"},
		{"a word where true or false goes", "version: 1\nlimits:\n  dns_exact_only: sometimes\n", "test.yaml:3: limits.dns_exact_only: want true or false, not a string"},
		{"an error under an alias", "version: 1\nx: &p [443]\n", "test.yaml:2: top level: unknown key \"x\""},
		{"a URL as a host", "version: 1\nallow:\n  - hosts: [\"https://pypi.org/simple\"]\n", "test.yaml:3: allow[0].hosts[0]: \"https://pypi.org/simple\": hosts take a host name, not a URL: write \"pypi.org\", and paths: [\"/simple/*\"] to limit the path"},
		{"a URL with a port as a host", "version: 1\nallow:\n  - hosts: [\"http://a.example:8080/\"]\n", "hosts take a host name, not a URL: write \"a.example\" with ports: [8080]"},
		{"host:port as a host", "version: 1\nallow:\n  - hosts: [\"pypi.org:443\"]\n", "test.yaml:3: allow[0].hosts[0]: \"pypi.org:443\": hosts take no port: write \"pypi.org\" and ports: [443]"},
		{"two listeners on one address", "version: 1\nlisten:\n  proxy: 127.0.0.1:3128\n  admin: 127.0.0.1:3128\n", "test.yaml:4: listen.admin: \"127.0.0.1:3128\": listen.proxy (\"127.0.0.1:3128\") listens there too"},
		{"a listener on the default proxy address", "version: 1\nlisten:\n  dns: 127.0.0.1:3128\n", "test.yaml:3: listen.dns: \"127.0.0.1:3128\": listen.proxy (\"127.0.0.1:3128\") listens there too"},
		{"a wildcard listener over another", "version: 1\nlisten:\n  proxy: 127.0.0.1:8000\n  transparent: 0.0.0.0:8000\n", "test.yaml:4: listen.transparent: \"0.0.0.0:8000\": listen.proxy"},
		{"wildcard tld", "version: 1\nallow:\n  - hosts: [example.org, \"*.com\"]\n", "test.yaml:3: allow[0].hosts[1]: \"*.com\": a wildcard must cover a whole label under a registrable domain"},
		{"wildcard public suffix", "version: 1\nallow:\n  - hosts: [\"*.co.uk\"]\n", "allow[0].hosts[0]: \"*.co.uk\": a wildcard must cover"},
		{"wildcard middle", "version: 1\nallow:\n  - hosts: [\"a.*.example.com\"]\n", "test.yaml:3: allow[0].hosts[0]: \"a.*.example.com\": a wildcard is allowed only as the whole first label"},
		{"address as host", "version: 1\nallow:\n  - hosts: [10.0.0.1]\n", "allow[0].hosts[0]: \"10.0.0.1\" is an address: put addresses in cidrs (e.g. 10.0.0.1/32)"},
		{"bad port", "version: 1\nallow:\n  - hosts: [a.com]\n    ports: [0]\n", "test.yaml:4: allow[0].ports[0]: \"0\": want a port"},
		{"bad range", "version: 1\nallow:\n  - hosts: [a.com]\n    ports: [\"9-1\"]\n", "allow[0].ports[0]: \"9-1\""},
		{"bad cidr", "version: 1\nallow:\n  - cidrs: [10.0.0.1/8]\n", "test.yaml:3: allow[0].cidrs[0]: \"10.0.0.1/8\" has host bits set: did you mean 10.0.0.0/8?"},
		{"bad page", "version: 1\nallow:\n  - hosts: [a.com]\n    pages: [reed]\n", "test.yaml:4: allow[0].pages[0]: unknown page type \"reed\""},
		{"bad mirror", "version: 1\nallow:\n  - hosts: [a.com]\n    mirror: pip\n", "test.yaml:4: allow[0].mirror: unknown mirror \"pip\""},
		{"mirror with pages", "version: 1\nallow:\n  - hosts: [a.com]\n    mirror: npm\n    pages: [read]\n", "a mirror rule takes no pages"},
		{"tls false needs host-only", "version: 1\nallow:\n  - hosts: [git.example.com]\n    ports: [22]\n    tls: false\n", "test.yaml:5: allow[0].tls: tls: false tunnels raw TCP"},
		{"empty rule", "version: 1\nallow:\n  - name: nothing\n", "test.yaml:3: allow[0]: rule \"nothing\" names no hosts and no cidrs"},
		{"duplicate name", "version: 1\nallow:\n  - name: a\n    hosts: [a.com]\n  - name: a\n    hosts: [b.com]\n", "test.yaml:5: allow[1].name: duplicate rule name \"a\""},
		{"type error", "version: 1\nallow:\n  - hosts: a.com\n", "test.yaml:3: allow[0].hosts: want a list, e.g. [a.com]"},
		{"selftest v6", "version: 1\nselftest:\n  ipv6: [93.184.215.14:443]\n", "test.yaml:3: selftest.ipv6[0]: \"93.184.215.14:443\": ipv6 probes need an IPv6 address"},
		{"selftest interval", "version: 1\nselftest:\n  interval: soon\n", "test.yaml:3: selftest.interval: \"soon\": want a positive duration"},
		{"listen name", "version: 1\nlisten:\n  proxy: proxy.local:3128\n", "test.yaml:3: listen.proxy: \"proxy.local:3128\": listen on an address"},
		{"upstream", "version: 1\nresolver:\n  upstreams: [dns.google]\n", "test.yaml:3: resolver.upstreams[0]"},
		{"deny star", "version: 1\ndeny:\n  hosts: [\"*\"]\n", "test.yaml:3: deny.hosts[0]: \"*\" is not allowed here"},
		{"two docs", "version: 1\n---\nversion: 1\n", "more than one YAML document"},
		{"empty", "", "version: 1 is required"},
		{"upgrade on a host-only rule", "version: 1\nallow:\n  - hosts: [a.com]\n    pages: [\"*\"]\n    upgrade: [websocket]\n", "test.yaml:5: allow[0].upgrade[0]: upgrade needs an inspected rule"},
		{"upgrade on a default rule is fine but h2c is not", "version: 1\nallow:\n  - hosts: [a.com]\n    upgrade: [h2c]\n", "test.yaml:4: allow[0].upgrade[0]: h2c is always refused"},
		{"upgrade unknown protocol", "version: 1\nallow:\n  - hosts: [a.com]\n    paths: [\"/ws\"]\n    upgrade: [irc]\n", "test.yaml:5: allow[0].upgrade[0]: unknown upgrade \"irc\": only websocket"},
		{"upgrade on tls false", "version: 1\nallow:\n  - hosts: [a.com]\n    pages: [\"*\"]\n    tls: false\n    upgrade: [websocket]\n", "allow[0].upgrade[0]: upgrade needs an inspected rule"},
		{"upgrade on a deny", "version: 1\ndeny:\n  hosts: [a.com]\n  upgrade: [websocket]\n", "test.yaml:4: deny: unknown key \"upgrade\""},
		{"module prefixes without goproxy", "version: 1\nallow:\n  - hosts: [a.com]\n    mirror: npm\n    module_prefixes: [github.com/x]\n", "module_prefixes needs mirror: goproxy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(tt.cfg), "test.yaml")
			if err == nil {
				t.Fatalf("Parse accepted the config; want error containing %q", tt.want)
			}
			var ce ConfigErrors
			if !errors.As(err, &ce) {
				t.Fatalf("error %T is not ConfigErrors: %v", err, err)
			}
			if !strings.Contains(err.Error()+"\n", tt.want) {
				t.Errorf("got error\n%v\nwant it to contain\n%s", err, tt.want)
			}
		})
	}
}

// TestListenersMayShareAPortOnDifferentAddresses: distinct addresses, or
// port 0, are not a conflict.
func TestListenersMayShareAPortOnDifferentAddresses(t *testing.T) {
	cfg := "version: 1\nlisten:\n  proxy: 127.0.0.1:3128\n  transparent: 127.0.0.2:3128\n  dns: 127.0.0.1:0\n  admin: 127.0.0.1:0\n"
	if _, err := Parse(strings.NewReader(cfg), "test.yaml"); err != nil {
		t.Fatal(err)
	}
}

// TestWarnings: a config without a positive control or a canary is valid
// but warned about; the default config is not.
func TestWarnings(t *testing.T) {
	p, err := Parse(strings.NewReader("version: 1\nallow:\n  - hosts: [a.example]\n"), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if w := strings.Join(p.Warnings(), "\n"); !strings.Contains(w, "expect_reachable is empty") || !strings.Contains(w, "no canary_name or canary_url") {
		t.Errorf("warnings %q", w)
	}
	p, err = Parse(strings.NewReader("version: 1\nselftest:\n  canary_name: canary.example\n  expect_reachable: [https://a.example/]\n"), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if w := p.Warnings(); len(w) != 0 {
		t.Errorf("warnings %q for a config with both", w)
	}
}

func TestParseCollectsAllErrors(t *testing.T) {
	_, err := Parse(strings.NewReader("version: 1\nallow:\n  - hosts: [\"*.com\"]\n    ports: [0]\n"), "x.yaml")
	var ce ConfigErrors
	if !errors.As(err, &ce) || len(ce) != 2 {
		t.Fatalf("got %v, want 2 errors", err)
	}
}

func TestFirstMatchWins(t *testing.T) {
	p := mustParse(t, `
version: 1
allow:
  - name: api-only-443
    hosts: [api.example.com]
    ports: [443]
  - name: example-wild
    hosts: ["*.example.com"]
    ports: [80, 443, 8000-8100]
  - name: exact-later
    hosts: [www.example.com]
  - name: any
    hosts: ["*"]
    ports: [8443]
`)
	tests := []struct {
		target   string
		wantRule string
		reason   Reason
	}{
		{"api.example.com:443", "api-only-443", ReasonAllowed},
		{"api.example.com:80", "example-wild", ReasonAllowed},
		{"www.example.com:443", "example-wild", ReasonAllowed}, // rule 1 precedes rule 2
		{"a.b.example.com:8050", "example-wild", ReasonAllowed},
		{"example.com:443", "", ReasonNoRule}, // *.example.com does not cover the apex
		{"example.com:8443", "any", ReasonAllowed},
		{"other.org:443", "", ReasonNoRule},
		{"api.example.com:22", "", ReasonPort},
	}
	for _, tt := range tests {
		tgt, err := ParseAuthority(tt.target)
		if err != nil {
			t.Fatal(err)
		}
		d := p.DecideTarget(&tgt)
		if d.RuleName() != tt.wantRule || d.Reason != tt.reason {
			t.Errorf("%s: got rule %q reason %v, want %q %v", tt.target, d.RuleName(), d.Reason, tt.wantRule, tt.reason)
		}
	}
}

func TestHighRiskBeatsAllow(t *testing.T) {
	p := mustParse(t, `
version: 1
allow:
  - hosts: [metadata.google.internal, upload.pypi.org, "*.evil.example", ok.example]
    cidrs: [169.254.0.0/16, 203.0.113.0/24]
    ports: [1-65535]
deny:
  hosts: ["*.evil.example", bad.example]
  cidrs: [203.0.113.66/32]
`)
	for _, s := range []string{"metadata.google.internal:80", "upload.pypi.org:443", "x.evil.example:443", "evil.example:443", "169.254.169.254:80", "203.0.113.66:443", "[64:ff9b::203.0.113.66]:443"} {
		tgt, err := ParseAuthority(s)
		if err != nil {
			t.Fatal(err)
		}
		d := p.DecideTarget(&tgt)
		if d.Allow || !d.HighRisk {
			t.Errorf("%s: allow %v high_risk %v, want denied as high-risk", s, d.Allow, d.HighRisk)
		}
	}
	tgt, _ := ParseAuthority("203.0.113.67:443")
	if d := p.DecideTarget(&tgt); !d.Allow {
		t.Errorf("203.0.113.67 denied (%v): want allowed by the documentation cidr", d.Reason)
	}
}

// TestUpgradeParsed: upgrade: [websocket] on an inspected rule is kept
// (any case), and a rule without it allows no upgrade.
func TestUpgradeParsed(t *testing.T) {
	p, err := Parse(strings.NewReader("version: 1\nallow:\n  - name: ws\n    hosts: [a.com]\n    paths: [\"/ws\"]\n    upgrade: [WebSocket]\n  - name: plain\n    hosts: [b.com]\n"), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !p.Rules[0].WebSocket || p.Rules[1].WebSocket {
		t.Errorf("WebSocket: ws %v, plain %v; want true, false", p.Rules[0].WebSocket, p.Rules[1].WebSocket)
	}
}

// TestConfigErrorsAreFoundOnNodes: the errors of a config yaml.v3 refuses
// come from its nodes and the raw types, not from yaml.v3's wording: given
// a type error whose messages say nothing useful, the same errors come out.
func TestConfigErrorsAreFoundOnNodes(t *testing.T) {
	cfg := "version: 1\nallow:\n  - hosts: [a.com]\n    mirorr: pypi\n  - hosts: b.com\n"
	want := "test.yaml:4: allow[0]: unknown key \"mirorr\": did you mean \"mirror\"?\n" +
		"test.yaml:5: allow[1].hosts: want a list, e.g. [b.com]"
	reworded := &yaml.TypeError{Errors: []string{"something went wrong", "and something else"}}
	if got := yamlErrors("test.yaml", []byte(cfg), reworded).Error(); got != want {
		t.Errorf("from a reworded yaml.v3 error:\n%s\nwant\n%s", got, want)
	}
	_, err := Parse(strings.NewReader(cfg), "test.yaml")
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Parse:\n%v\nwant\n%s", err, want)
	}
}

// FuzzConfigErrors: whatever the text, a refused config's errors each name
// a line within the text (or none), and the walk never panics.
func FuzzConfigErrors(f *testing.F) {
	f.Add("version: 1\nallow:\n  - hosts: a.com\n    mirorr: pypi\n")
	f.Add("version: 1\nx: &a [*a]\n")
	f.Add("version: 1\nlimits: {header_bytes: [1], dns_exact_only: 3}\n")
	f.Add("version: 1\nallow:\n  - &r {hosts: [a.com]}\n  - *r\n  - {<<: *r, ports: x}\n")
	f.Fuzz(func(t *testing.T, cfg string) {
		_, err := Parse(strings.NewReader(cfg), "f.yaml")
		var ce ConfigErrors
		if err == nil || !errors.As(err, &ce) {
			return
		}
		// YAML breaks lines at "\r\n", "\n" and a lone "\r" (YAML 1.2
		// b-break), and yaml.v3 numbers lines so.
		lines := strings.Count(strings.ReplaceAll(cfg, "\r\n", "\n"), "\n") + strings.Count(strings.ReplaceAll(cfg, "\r\n", ""), "\r") + 1
		for _, e := range ce {
			if e.Line < 0 || e.Line > lines+1 {
				t.Fatalf("error at line %d of a %d-line config: %v", e.Line, lines, e)
			}
		}
	})
}
