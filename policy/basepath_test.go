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

// nestedBaseConfig: a host whose root is a plain file server (generic,
// base_path /) with an npm repository under it; the npm rule's grammar
// refuses what the generic one would allow (Artifactory's /auth returns
// the caller's credentials).
const nestedBaseConfig = `version: 1
allow:
  - name: files
    hosts: [repo.example.com]
    mirror: generic
    base_path: /
  - name: art-npm
    hosts: [repo.example.com]
    mirror: npm
    base_path: /artifactory/api/npm/npm-remote
`

// TestBasePathSpelledOtherwise: a path that the server reads as under a
// longer base_path, spelled so the raw bytes are not (an escape, another
// case), must not be decided by the shorter, looser rule.
func TestBasePathSpelledOtherwise(t *testing.T) {
	p := mustParse(t, nestedBaseConfig)
	for _, tc := range []struct {
		url   string
		allow bool
	}{
		{"https://repo.example.com/artifactory/api/npm/npm-remote/auth", false},
		{"https://repo.example.com/artifactory/api/npm/npm-remot%65/auth", false},
		{"https://repo.example.com/artifactory/api/npm/npm%2Dremote/auth", false},
		{"https://repo.example.com/%61rtifactory/api/npm/npm-remote/auth", false},
		{"https://repo.example.com/artifactory/api/npm/NPM-REMOTE/auth", false},
		{"https://repo.example.com/Artifactory/api/npm/npm-remote/auth", false},
		// still allowed: the files the generic rule serves, the npm reads
		{"https://repo.example.com/artifactory/api/npm/npm-remote/express", true},
		{"https://repo.example.com/downloads/tool-1.0.tar.gz", true},
		{"https://repo.example.com/downloads/Tool%2B1.0.tar.gz", true},
		{"https://repo.example.com/artifactory/api/npm/npm-remote-2/x", true},
	} {
		tg, err := ParseURL(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		if d := p.DecideRequest(&tg, "GET", "", 0); d.Allow != tc.allow {
			t.Errorf("GET %s = allow %v by %q (%s), want %v", tc.url, d.Allow, d.RuleName(), d.Detail, tc.allow)
		}
	}
}

// redTeamConfig: the products of docs/MIRRORS.md on their hosts, each
// repository its own rule.
const redTeamConfig = `version: 1
allow:
  - name: art-pypi
    hosts: [art.example.com]
    mirror: pypi
    base_path: /artifactory/api/pypi/pypi-remote
  - name: art-npm
    hosts: [art.example.com]
    mirror: npm
    base_path: /artifactory/api/npm/npm-remote
  - name: nexus-npm
    hosts: [nexus.example.com]
    mirror: npm
    base_path: /repository/npm
  - name: nexus-go
    hosts: [nexus.example.com]
    mirror: goproxy
    base_path: /repository/go-proxy
  - name: devpi
    hosts: [devpi.example.com]
    mirror: pypi
    base_path: /root/pypi
  - name: gitlab-pypi
    hosts: [gitlab.example.com]
    mirror: pypi
    base_path: /api/v4/projects/42/packages/pypi
`

// TestBasePathAttacks: the prefix confusions, writes and admin calls an
// agent would try on a repository manager's host; every one is denied.
func TestBasePathAttacks(t *testing.T) {
	p := mustParse(t, redTeamConfig)
	const art = "https://art.example.com/artifactory/api/pypi/pypi-remote"
	for _, tc := range []struct{ method, url string }{
		// dot-segments, escaped or not, climbing out of the prefix
		{"GET", art + "/../../../ui/login"},
		{"GET", art + "/%2e%2e/%2e%2e/%2e%2e/ui/login"},
		{"GET", art + "/%2E%2E/%2E%2E/api/security/token"},
		{"GET", art + "/.%2e/.%2e/x"},
		{"GET", art + "/%252e%252e/x"},
		{"GET", art + "/./simple/requests/"},
		// escaped and doubled slashes, backslashes, ';' parameters
		{"GET", art + "%2f..%2f..%2fui/login"},
		{"GET", art + "/simple%2f..%2f..%2fx"},
		{"GET", art + "/simple%5c..%5cx"},
		{"GET", art + "//simple/requests/"},
		{"GET", art + "/simple//requests/"},
		{"GET", art + "/..;/..;/ui/login"},
		{"GET", art + ";x=1/simple/requests/"},
		{"GET", art + "/simple;/requests/"},
		{"GET", art + "/simple/requests/%00"},
		// a string prefix that is not a path prefix, case, trailing slash
		{"GET", "https://nexus.example.com/repository/npm-private/secret-pkg"},
		{"GET", "https://nexus.example.com/repository/npmx/express"},
		{"GET", "https://nexus.example.com/Repository/npm/express"},
		{"GET", "https://nexus.example.com/repository/NPM/express"},
		{"GET", "https://nexus.example.com/repository/npm/express/"},
		{"GET", "https://nexus.example.com/repository/"},
		{"GET", "https://nexus.example.com/repository/npm"},
		// writes by method, under the prefix
		{"PUT", "https://nexus.example.com/repository/npm/express"},
		{"POST", "https://nexus.example.com/repository/npm/express"},
		{"DELETE", "https://nexus.example.com/repository/npm/express/-rev/1-abc"},
		{"PATCH", "https://nexus.example.com/repository/npm/express"},
		{"MKCOL", "https://nexus.example.com/repository/npm/newdir"},
		{"PROPFIND", "https://nexus.example.com/repository/npm/"},
		{"get", "https://nexus.example.com/repository/npm/express"},
		{"PUT", "https://nexus.example.com/repository/go-proxy/example.com/m/@v/v1.0.0.zip"},
		{"POST", art},
		{"POST", art + "/"},
		// queries carrying writes or data
		{"GET", "https://nexus.example.com/repository/npm/express?write=true"},
		{"GET", "https://nexus.example.com/repository/npm/express?data=exfil"},
		{"GET", art + "/simple/requests/?x=1"},
		{"GET", "https://nexus.example.com/repository/npm/-/v1/search?text=a&secret=x"},
		{"GET", "https://nexus.example.com/repository/npm/-/v1/search?text=a&text=b"},
		{"GET", "https://nexus.example.com/repository/npm/-/ping?data=exfil"},
		{"GET", "https://nexus.example.com/repository/npm/-/npm/v1/attestations/express@free-text"},
		{"GET", "https://nexus.example.com/repository/npm/-/npm/v1/keys/extra"},
		// the products' own write and admin APIs
		{"GET", "https://art.example.com/artifactory/api/npm/npm-remote/auth"},
		{"GET", "https://art.example.com/artifactory/api/npm/npm-remote/auth/scope"},
		{"PUT", "https://art.example.com/artifactory/api/npm/npm-remote/-/user/org.couchdb.user:x"},
		{"POST", "https://art.example.com/artifactory/api/npm/npm-remote/-/npm/v1/security/audits/quick"},
		{"GET", "https://art.example.com/artifactory/api/security/apiKey"},
		{"PUT", "https://art.example.com/artifactory/libs-release-local/x.jar"},
		{"GET", "https://nexus.example.com/service/rest/v1/repositories"},
		{"GET", "https://nexus.example.com/repository/npm/-/whoami"},
		{"POST", "https://devpi.example.com/+login"},
		{"POST", "https://devpi.example.com/root/pypi/"},
		{"POST", "https://devpi.example.com/root/pypi"},
		{"PUT", "https://devpi.example.com/root/pypi"},
		{"PATCH", "https://devpi.example.com/root/pypi"},
		{"GET", "https://devpi.example.com/+api"},
		{"GET", "https://devpi.example.com/root/pypi/+api"},
		{"GET", "https://devpi.example.com/root/pypi/requests"},
		{"POST", "https://gitlab.example.com/api/v4/projects/42/packages/pypi"},
		{"PUT", "https://gitlab.example.com/api/v4/projects/42/packages/pypi/files/x.whl"},
		{"GET", "https://gitlab.example.com/api/v4/projects/42/packages/pypi/../../../../user"},
		{"GET", "https://gitlab.example.com/api/v4/projects/42/variables"},
		{"GET", "https://gitlab.example.com/api/v4/projects/43/packages/pypi/simple/requests"},
		// go @<hash>: hex only, 7 to 40 digits, .info only
		{"GET", "https://nexus.example.com/repository/go-proxy/example.com/m/@v/deadbee.mod"},
		{"GET", "https://nexus.example.com/repository/go-proxy/example.com/m/@v/deadbeeg.info"},
		{"GET", "https://nexus.example.com/repository/go-proxy/example.com/m/@v/DEADBEEF.info"},
		{"GET", "https://nexus.example.com/repository/go-proxy/example.com/m/@v/dead.info"},
		{"GET", "https://nexus.example.com/repository/go-proxy/example.com/m/@v/" + strings.Repeat("a", 41) + ".info"},
		{"GET", "https://nexus.example.com/repository/go-proxy/example.com/m/@v/master.info"},
	} {
		tg, err := ParseURL(tc.url)
		if err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		if d := p.DecideRequest(&tg, tc.method, "", 0); d.Allow {
			t.Errorf("%s %s allowed by %q", tc.method, tc.url, d.RuleName())
		}
	}
	// the controls: the same rules allow their downloads
	for _, u := range []string{
		art + "/simple/requests/",
		"https://nexus.example.com/repository/npm/express",
		"https://nexus.example.com/repository/npm/@types%2fnode",
		"https://nexus.example.com/repository/go-proxy/example.com/m/@v/deadbeef.info",
		"https://nexus.example.com/repository/go-proxy/example.com/m/@v/" + strings.Repeat("a", 40) + ".info",
		"https://devpi.example.com/root/pypi/+simple/requests/",
		"https://gitlab.example.com/api/v4/projects/42/packages/pypi/simple/requests",
	} {
		tg, err := ParseURL(u)
		if err != nil {
			t.Fatal(err)
		}
		if d := p.DecideRequest(&tg, "GET", "", 0); !d.Allow {
			t.Errorf("control GET %s denied: %s %s", u, d.Reason, d.Detail)
		}
	}
}

// TestBasePathCaseTwins: two base_paths that differ only in case are two
// repositories; each request spelled exactly as one is routed to it.
func TestBasePathCaseTwins(t *testing.T) {
	p := mustParse(t, "version: 1\nallow:\n  - name: lower\n    hosts: [r.example]\n    mirror: npm\n    base_path: /r/npm\n  - name: upper\n    hosts: [r.example]\n    mirror: npm\n    base_path: /r/NPM\n")
	for _, tc := range []struct{ url, rule string }{
		{"https://r.example/r/npm/express", "lower"},
		{"https://r.example/r/NPM/express", "upper"},
	} {
		tg, _ := ParseURL(tc.url)
		if d := p.DecideRequest(&tg, "GET", "", 0); !d.Allow || d.RuleName() != tc.rule {
			t.Errorf("GET %s = allow %v by %q (%s), want %s", tc.url, d.Allow, d.RuleName(), d.Detail, tc.rule)
		}
	}
}
