package policy

import (
	"strings"
	"testing"
)

const identityConfig = `version: 1
identities:
  - name: research
    cidrs: [198.51.100.10/32]
  - name: build
    cidrs: [198.51.100.20/32]
deny:
  message: "ask #platform for access; the internal mirror is at https://mirror.example.net"
allow:
  - name: docs
    hosts: [docs.example.com]
    identities: [research]
    message: "research may read docs only"
  - name: registry
    hosts: [registry.example.com]
    mirror: npm
    identities: [build]
    message: "publish through CI, not from a sandbox"
    inject: {prefix: "Bearer ", value_from: "file:/run/secrets/registry"}
  - name: shared
    hosts: [status.example.com]
  - name: addr
    cidrs: [203.0.113.0/24]
    identities: [build]
`

func TestIdentityRules(t *testing.T) {
	p := mustParse(t, identityConfig)
	tests := []struct {
		target, id string
		allow      bool
		rule, view string
		reason     Reason
	}{
		{"docs.example.com:443", "research", true, "docs", "research", ReasonAllowed},
		{"docs.example.com:443", "build", false, "", "build", ReasonNoRule},
		{"docs.example.com:443", "", false, "", "", ReasonNoRule},
		{"docs.example.com:443", "198.51.100.99", false, "", "", ReasonNoRule}, // undeclared: no identity rules
		{"registry.example.com:443", "build", true, "registry", "build", ReasonAllowed},
		{"registry.example.com:443", "research", false, "", "research", ReasonNoRule},
		{"status.example.com:443", "research", true, "shared", "research", ReasonAllowed},
		{"status.example.com:443", "build", true, "shared", "build", ReasonAllowed},
		{"status.example.com:443", "", true, "shared", "", ReasonAllowed},
		{"203.0.113.5:443", "build", true, "addr", "build", ReasonAllowed},
		{"203.0.113.5:443", "research", false, "", "research", ReasonSpecialAddr},
	}
	for _, tt := range tests {
		t.Run(tt.target+"/"+tt.id, func(t *testing.T) {
			tg, err := ParseAuthority(tt.target)
			if err != nil {
				t.Fatal(err)
			}
			d := p.DecideTargetAs(&tg, tt.id)
			if d.Allow != tt.allow || d.RuleName() != tt.rule || d.Reason != tt.reason || d.View != tt.view {
				t.Errorf("got allow=%v rule=%q reason=%s view=%q; want %v %q %s %q", d.Allow, d.RuleName(), d.Reason, d.View, tt.allow, tt.rule, tt.reason, tt.view)
			}
		})
	}
	// The DNS filter cannot tell identities apart: any rule's name resolves.
	if p.RuleForName("docs.example.com") == nil || p.RuleForName("registry.example.com") == nil {
		t.Error("RuleForName must see every identity's rules")
	}
	// The request path applies the view too.
	tg, _ := ParseURL("https://docs.example.com/guide")
	if d := p.DecideRequestAs(&tg, "build", "GET", "", 0); d.Allow {
		t.Error("DecideRequestAs let build read research's docs")
	}
	if d := p.DecideRequestAs(&tg, "research", "GET", "", 0); !d.Allow {
		t.Errorf("research denied its docs: %s", d.Reason)
	}
}

func TestDenyMessages(t *testing.T) {
	p := mustParse(t, identityConfig)
	tests := []struct {
		url, id, method, want string
	}{
		{"https://unlisted.example.org/", "build", "GET", "ask #platform for access; the internal mirror is at https://mirror.example.net"},
		{"https://registry.example.com/pkg", "build", "PUT", "publish through CI, not from a sandbox"},
		{"https://registry.example.com/pkg", "build", "GET", ""},       // allowed: no message
		{"http://169.254.169.254/latest/", "build", "GET", ""},         // high-risk: never allowed, nothing to ask
		{"https://docs.example.com/", "build", "GET", "ask #platform"}, // another identity's rule: the default deny
	}
	for _, tt := range tests {
		tg, err := ParseURL(tt.url)
		if err != nil {
			t.Fatal(err)
		}
		d := p.DecideRequestAs(&tg, tt.id, tt.method, "", 0)
		got := p.Message(&d)
		if tt.want == "" && got != "" || !strings.HasPrefix(got, tt.want) {
			t.Errorf("%s %s as %s: message %q, want %q", tt.method, tt.url, tt.id, got, tt.want)
		}
	}
}

func TestInjectConfig(t *testing.T) {
	ok := `version: 1
allow:
  - name: registry
    hosts: [registry.example.com]
    mirror: npm
    inject: {header: authorization, prefix: "Bearer ", value_from: "file:/run/secrets/registry-token"}
  - name: api
    hosts: [api.example.com]
    inject: {basic: {user: ci, password_from: "file:/run/secrets/api"}}
`
	p := mustParse(t, ok)
	in := p.Rules[0].Inject
	if in == nil || in.Header != "Authorization" || in.Prefix != "Bearer " || in.File != "/run/secrets/registry-token" {
		t.Fatalf("inject = %+v", in)
	}
	if p.Rules[1].HostOnly() {
		t.Error("a rule with inject must be inspected, not spliced")
	}
	if b := p.Rules[1].Inject; b.BasicUser != "ci" || b.File != "/run/secrets/api" || b.Header != "Authorization" {
		t.Errorf("basic inject = %+v", b)
	}
	if h := p.InjectHeaders("registry.example.com"); len(h) != 1 || h[0] != "Authorization" {
		t.Errorf("InjectHeaders = %v", h)
	}
	tg, _ := ParseURL("https://api.example.com/x")
	if d := p.DecideRequest(&tg, "TRACE", "", 0); d.Allow || d.Reason != ReasonMethod {
		t.Errorf("TRACE under an inject rule: allow=%v reason=%s; it would echo the credential", d.Allow, d.Reason)
	}

	bad := []struct{ name, rule, want string }{
		{"star host", "hosts: [\"*\"]\n    pages: [\"*\"]\n    inject: {value_from: \"file:/s\"}", "never to a wildcard"},
		{"wildcard host", "hosts: [\"*.example.com\"]\n    inject: {value_from: \"file:/s\"}", "never to a wildcard"},
		{"cidrs only", "cidrs: [203.0.113.0/24]\n    inject: {value_from: \"file:/s\"}", "never to addresses"},
		{"raw tcp", "hosts: [a.example.com]\n    pages: [\"*\"]\n    tls: false\n    inject: {value_from: \"file:/s\"}", "tls: false"},
		{"literal secret", "hosts: [a.example.com]\n    inject: {value_from: \"hunter2\"}", "want file:/absolute/path"},
		{"relative file", "hosts: [a.example.com]\n    inject: {value_from: \"file:secret\"}", "want file:/absolute/path"},
		{"host header", "hosts: [a.example.com]\n    inject: {header: Host, value_from: \"file:/s\"}", "hop-by-hop, framing or proxy header"},
		{"proxy header", "hosts: [a.example.com]\n    inject: {header: Proxy-Authorization, value_from: \"file:/s\"}", "hop-by-hop"},
		{"bad header", "hosts: [a.example.com]\n    inject: {header: \"X Token\", value_from: \"file:/s\"}", "not a header name"},
		{"both", "hosts: [a.example.com]\n    inject: {value_from: \"file:/s\", basic: {user: u, password_from: \"file:/p\"}}", "exclude each other"},
		{"basic colon", "hosts: [a.example.com]\n    inject: {basic: {user: \"a:b\", password_from: \"file:/p\"}}", "without ':'"},
		{"unknown key", "hosts: [a.example.com]\n    inject: {value: \"file:/s\"}", "allow[0].inject: unknown key \"value\""},
		{"unknown identity", "hosts: [a.example.com]\n    identities: [nobody]", "unknown identity \"nobody\""},
		{"upstream proxy", "hosts: [a.example.com]\nupstream_proxy: {address: proxy.corp.example}", "want host:port of the parent proxy"},
		{"upstream proxy auth", "hosts: [a.example.com]\nupstream_proxy: {address: \"10.0.0.1:8080\", auth_from: \"user:pw\"}", "want file:/absolute/path"},
		{"audit typo", "hosts: [a.example.com]\naudit: {on_eror: deny}", "did you mean \"on_error\""},
		{"inject typo", "hosts: [a.example.com]\n    inject: {value_frm: \"file:/s\"}", "did you mean \"value_from\""},
		{"message newline", "hosts: [a.example.com]\n    message: \"a\\nb\"", "one line of text"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader("version: 1\nallow:\n  - "+tt.rule+"\n"), "t.yaml")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v; want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestDeniedPageType: a request denied for its host still carries its page
// type, so the log (and `egressd suggest`) shows what it would have done.
func TestDeniedPageType(t *testing.T) {
	p := mustParse(t, identityConfig)
	tg, _ := ParseURL("https://paste.example.net/upload")
	d := p.DecideRequestAs(&tg, "build", "POST", "multipart/form-data; boundary=x", 10)
	if d.Allow || d.Reason != ReasonNoRule || d.PageType != PageUpload {
		t.Errorf("got allow=%v reason=%s page=%s; want a no-rule deny of an upload page", d.Allow, d.Reason, d.PageType)
	}
}
