package policy

import (
	"strings"
	"testing"
)

// repoHostConfig is one Artifactory-like host serving four repositories,
// each its own mirror rule, plus a cidr-addressed Nexus.
const repoHostConfig = `version: 1
allow:
  - name: art-pypi
    hosts: [repo.example.com]
    mirror: pypi
    base_path: /artifactory/api/pypi/pypi-remote
  - name: art-npm
    hosts: [repo.example.com]
    mirror: npm
    base_path: /artifactory/api/npm/npm-remote
  - name: art-go
    hosts: [repo.example.com]
    mirror: goproxy
    base_path: /artifactory/api/go/go-remote
  - name: art-maven
    hosts: [repo.example.com]
    mirror: maven
    base_path: /artifactory/maven-remote
  - name: art-maven-snap
    hosts: [repo.example.com]
    mirror: generic
    base_path: /artifactory/maven-remote/snapshots
  - name: nexus-npm
    cidrs: [203.0.113.7/32]
    mirror: npm
    base_path: /repository/npm-proxy
  - name: verdaccio
    hosts: [npm.example.com]
    mirror: npm
`

func TestBasePathRouting(t *testing.T) {
	p := mustParse(t, repoHostConfig)
	for _, tc := range []struct {
		method, url string
		allow       bool
		rule        string
		reason      Reason
	}{
		{"GET", "https://repo.example.com/artifactory/api/pypi/pypi-remote/simple/requests/", true, "art-pypi", ReasonAllowed},
		{"GET", "https://repo.example.com/artifactory/api/npm/npm-remote/express", true, "art-npm", ReasonAllowed},
		{"GET", "https://repo.example.com/artifactory/api/go/go-remote/golang.org/x/mod/@v/list", true, "art-go", ReasonAllowed},
		{"GET", "https://repo.example.com/artifactory/maven-remote/org/a/b/1.0/b-1.0.jar", true, "art-maven", ReasonAllowed},
		// the longest base_path decides
		{"GET", "https://repo.example.com/artifactory/maven-remote/snapshots/notes.txt", true, "art-maven-snap", ReasonAllowed},
		// each grammar under its own prefix only
		{"GET", "https://repo.example.com/artifactory/api/npm/npm-remote/simple/requests/", false, "art-npm", ReasonMirror},
		{"PUT", "https://repo.example.com/artifactory/api/npm/npm-remote/express", false, "art-npm", ReasonMirror},
		{"POST", "https://repo.example.com/artifactory/api/pypi/pypi-remote", false, "art-pypi", ReasonMirror},
		// outside every base_path: UI, login, REST API, deploy paths
		{"GET", "https://repo.example.com/ui/login", false, "art-pypi", ReasonMirror},
		{"POST", "https://repo.example.com/artifactory/api/security/token", false, "art-pypi", ReasonMirror},
		{"PUT", "https://repo.example.com/artifactory/libs-release-local/a/b/1.0/b-1.0.jar", false, "art-pypi", ReasonMirror},
		{"GET", "https://repo.example.com/artifactory/api/npm/npm-remote2/express", false, "art-pypi", ReasonMirror},
		{"GET", "https://repo.example.com/artifactory/api/npm/npm-remote%2fexpress", false, "art-pypi", ReasonMirror},
		// by address
		{"GET", "https://203.0.113.7/repository/npm-proxy/express", true, "nexus-npm", ReasonAllowed},
		{"GET", "https://203.0.113.7/service/rest/v1/repositories", false, "nexus-npm", ReasonMirror},
		// at the root: no base_path
		{"GET", "https://npm.example.com/express", true, "verdaccio", ReasonAllowed},
		{"GET", "https://npm.example.com/-/ping", true, "verdaccio", ReasonAllowed},
	} {
		tg, err := ParseURL(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		d := p.DecideRequest(&tg, tc.method, "", 0)
		if d.Allow != tc.allow || d.RuleName() != tc.rule || d.Reason != tc.reason {
			t.Errorf("%s %s = allow %v rule %q reason %s (%s), want %v %q %s", tc.method, tc.url, d.Allow, d.RuleName(), d.Reason, d.Detail, tc.allow, tc.rule, tc.reason)
		}
	}
	tg, _ := ParseURL("https://repo.example.com/ui/")
	if d := p.DecideRequest(&tg, "GET", "", 0); !strings.Contains(d.Detail, "/artifactory/api/pypi/pypi-remote") {
		t.Errorf("detail %q should name the host's base paths", d.Detail)
	}
}

func TestBasePathConfigErrors(t *testing.T) {
	for _, tc := range []struct{ name, cfg, want string }{
		{"no mirror", "version: 1\nallow:\n  - hosts: [a.example]\n    base_path: /x\n", "test.yaml:4: allow[0].base_path: base_path needs a mirror"},
		{"trailing slash", "version: 1\nallow:\n  - hosts: [a.example]\n    mirror: npm\n    base_path: /repository/npm/\n", "test.yaml:5: allow[0].base_path: \"/repository/npm/\": must not end with /"},
		{"escape", "version: 1\nallow:\n  - hosts: [a.example]\n    mirror: npm\n    base_path: /repository/np%6d\n", "allow[0].base_path: \"/repository/np%6d\": may hold only"},
		{"dot segment", "version: 1\nallow:\n  - hosts: [a.example]\n    mirror: npm\n    base_path: /a/../b\n", "has a dot-segment"},
		{"mixed with a rule without base_path", "version: 1\nallow:\n  - hosts: [a.example]\n    pages: [read]\n  - hosts: [a.example]\n    mirror: npm\n    base_path: /repository/npm\n", "test.yaml:7: allow[1].base_path: a.example is also named by rule \"allow-0\""},
		{"same base twice", "version: 1\nallow:\n  - hosts: [a.example]\n    mirror: npm\n    base_path: /r/npm\n  - hosts: [a.example]\n    mirror: pypi\n    base_path: /r/npm\n", "rule \"allow-0\" already serves base_path \"/r/npm\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(tc.cfg), "test.yaml")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
	// Different ports or identities do not conflict.
	mustParse(t, "version: 1\nallow:\n  - hosts: [a.example]\n    ports: [8080]\n  - hosts: [a.example]\n    mirror: npm\n    base_path: /repository/npm\n")
}

// FuzzBasePathRouting: on a host served by base_path rules, an allowed
// request lies under the base_path of the rule that allowed it, byte for
// byte, and nothing outside every base_path is allowed.
func FuzzBasePathRouting(f *testing.F) {
	p := mustParse(f, repoHostConfig)
	for _, s := range []string{
		"/artifactory/api/pypi/pypi-remote/simple/requests/", "/artifactory/api/npm/npm-remote/@types%2fnode",
		"/artifactory/maven-remote/snapshots/x", "/artifactory/maven-remote/org/a/b/1.0/b-1.0.jar", "/ui/", "/artifactory/api/npm/npm-remote/../x",
	} {
		f.Add("GET", s)
	}
	f.Fuzz(func(t *testing.T, method, path string) {
		tg, err := ParseURL("https://repo.example.com" + path)
		if err != nil {
			return
		}
		d := p.DecideRequest(&tg, method, "", 0)
		if !d.Allow {
			return
		}
		base := d.Rule.MirrorOp.BasePath
		if base == "" || !strings.HasPrefix(tg.Path, base+"/") && tg.Path != base {
			t.Fatalf("%s %q allowed by %q outside its base_path %q", method, tg.Path, d.RuleName(), base)
		}
	})
}

// TestParentPortWarnings: with an upstream proxy, a port a rule lists
// (other than 80 and 443, whose controls the self-test derives) that no
// positive control uses is a validate warning.
func TestParentPortWarnings(t *testing.T) {
	cfg := "version: 1\nupstream_proxy:\n  address: 10.9.9.9:3128\nallow:\n  - name: nexus\n    hosts: [nexus.example]\n    ports: [8081, 443]\n    mirror: npm\n    base_path: /repository/npm\nselftest:\n  expect_reachable: [%s]\n"
	for _, tc := range []struct {
		controls string
		warn     bool
	}{{"https://nexus.example/repository/npm/-/ping", true}, {"http://nexus.example:8081/repository/npm/-/ping", false}} {
		p := mustParse(t, strings.Replace(cfg, "%s", tc.controls, 1))
		got := strings.Contains(strings.Join(p.Warnings(), "\n"), "reaches port 8081 through upstream_proxy")
		if got != tc.warn {
			t.Errorf("controls %s: warning %v, want %v: %v", tc.controls, got, tc.warn, p.Warnings())
		}
	}
	p := mustParse(t, strings.Replace(strings.Replace(cfg, "upstream_proxy:\n  address: 10.9.9.9:3128\n", "", 1), "%s", "", 1))
	if strings.Contains(strings.Join(p.Warnings(), "\n"), "upstream_proxy") {
		t.Errorf("a warning about upstream_proxy without one: %v", p.Warnings())
	}
}

// BenchmarkDecideBasePath: a request routed among a host's base_path rules,
// against one on a root mirror rule.
func BenchmarkDecideBasePath(b *testing.B) {
	p := mustParse(b, repoHostConfig)
	for _, u := range []string{
		"https://repo.example.com/artifactory/api/npm/npm-remote/express/-/express-4.21.2.tgz",
		"https://npm.example.com/express/-/express-4.21.2.tgz",
	} {
		tg, err := ParseURL(u)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(tg.Name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if !p.DecideRequest(&tg, "GET", "", 0).Allow {
					b.Fatal("refused")
				}
			}
		})
	}
}
