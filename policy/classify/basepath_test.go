package classify

import (
	"strings"
	"testing"
)

func TestBasePathOK(t *testing.T) {
	for _, tc := range []struct {
		base string
		ok   bool
	}{
		{"/", true},
		{"/artifactory/api/pypi/pypi-remote", true},
		{"/repository/npm-proxy", true},
		{"/root/pypi", true},
		{"/api/v4/groups/42/-/packages/npm", true},
		{"", false},
		{"repository/npm", false},
		{"/repository/npm/", false},
		{"/repository//npm", false},
		{"/repository/../admin", false},
		{"/repository/./npm", false},
		{"/repository/np%6d", false},
		{"/repository/npm;x", false},
		{"/repository/npm?x", false},
		{"/repository/n\\pm", false},
		{"/" + strings.Repeat("a", 300), false},
		{strings.Repeat("/a", 17), false},
	} {
		if got := BasePathOK(tc.base); (got == "") != tc.ok {
			t.Errorf("BasePathOK(%q) = %q, want ok=%v", tc.base, got, tc.ok)
		}
	}
}

func TestUnderBasePath(t *testing.T) {
	for _, tc := range []struct {
		base, path, rest string
		ok               bool
	}{
		{"/repository/npm", "/repository/npm/express", "/express", true},
		{"/repository/npm", "/repository/npm", "/", true},
		{"/repository/npm", "/repository/npm/", "/", true},
		{"/repository/npm", "/repository/npmx/express", "", false},
		{"/repository/npm", "/repository/np", "", false},
		{"/repository/npm", "/Repository/npm/express", "", false},
		{"/repository/npm", "/repository%2fnpm/express", "", false},
		{"/repository/npm", "/repository/np%6d/express", "", false},
		{"/repository/npm", "/service/rest/v1/script", "", false},
		{"/", "/simple/x/", "/simple/x/", true},
	} {
		rest, ok := UnderBasePath(tc.base, tc.path)
		if rest != tc.rest || ok != tc.ok {
			t.Errorf("UnderBasePath(%q, %q) = %q, %v; want %q, %v", tc.base, tc.path, rest, ok, tc.rest, tc.ok)
		}
	}
}

// layoutCase is one request to a repository manager's layout: the rule's
// ecosystem and base_path, and whether the grammar under it allows.
type layoutCase struct {
	product, name string
	m             Mirror
	base          string
	method, path  string
	query         string
	clen          int64
	allow         bool
	reason        string // checked when not allowed and not ""
}

const gitlabSHA = "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"

// layoutCases: reads each product's clients make are allowed under the
// product's base_path; every write form the product has (deploy PUT,
// twine POST, npm publish and login) and the product's own paths under the
// base are refused. Paths outside the base are the policy's to refuse
// (another rule or none); here they are the grammar's rOutsideBase.
var layoutCases = []layoutCase{
	// Artifactory: /artifactory/api/<eco>/<repo>.
	{"artifactory", "pypi simple", MirrorPyPI, "/artifactory/api/pypi/pypi-remote", "GET", "/artifactory/api/pypi/pypi-remote/simple/requests/", "", 0, true, ""},
	{"artifactory", "pypi root index", MirrorPyPI, "/artifactory/api/pypi/pypi-remote", "GET", "/artifactory/api/pypi/pypi-remote/simple/", "", 0, true, ""},
	{"artifactory", "pypi file", MirrorPyPI, "/artifactory/api/pypi/pypi-remote", "GET", "/artifactory/api/pypi/pypi-remote/packages/packages/d1/61/d71145abeec5ef15abcf0459cec60a27321e2f0ac0ef7ace5254f5944476/requests-2.32.3-py3-none-any.whl", "", 0, true, ""},
	{"artifactory", "pypi metadata", MirrorPyPI, "/artifactory/api/pypi/pypi-remote", "GET", "/artifactory/api/pypi/pypi-remote/packages/packages/d1/61/ab/requests-2.32.3-py3-none-any.whl.metadata", "", 0, true, ""},
	{"artifactory", "twine upload", MirrorPyPI, "/artifactory/api/pypi/pypi-local", "POST", "/artifactory/api/pypi/pypi-local", "", 900, false, "pypi upload: POST to the repository root"},
	{"artifactory", "pypi non-file", MirrorPyPI, "/artifactory/api/pypi/pypi-remote", "GET", "/artifactory/api/pypi/pypi-remote/packages/x/readme.txt", "", 0, false, "pypi: path outside download grammar"},
	{"artifactory", "npm packument", MirrorNPM, "/artifactory/api/npm/npm-remote", "GET", "/artifactory/api/npm/npm-remote/express", "", 0, true, ""},
	{"artifactory", "npm scoped", MirrorNPM, "/artifactory/api/npm/npm-remote", "GET", "/artifactory/api/npm/npm-remote/@types%2fnode", "", 0, true, ""},
	{"artifactory", "npm tarball", MirrorNPM, "/artifactory/api/npm/npm-remote", "GET", "/artifactory/api/npm/npm-remote/express/-/express-4.21.2.tgz", "", 0, true, ""},
	{"artifactory", "npm credentials", MirrorNPM, "/artifactory/api/npm/npm-remote", "GET", "/artifactory/api/npm/npm-remote/auth", "", 0, false, "artifactory npm credentials: /auth"},
	{"artifactory", "npm scoped credentials", MirrorNPM, "/artifactory/api/npm/npm-remote", "GET", "/artifactory/api/npm/npm-remote/auth/myco", "", 0, false, "artifactory npm credentials: /auth"},
	{"artifactory", "npm publish", MirrorNPM, "/artifactory/api/npm/npm-local", "PUT", "/artifactory/api/npm/npm-local/mypkg", "", 900, false, "npm publish: PUT /<pkg>"},
	{"artifactory", "npm login", MirrorNPM, "/artifactory/api/npm/npm-local", "PUT", "/artifactory/api/npm/npm-local/-/user/org.couchdb.user:bob", "", 90, false, "npm login/adduser: /-/user/"},
	{"artifactory", "go list", MirrorGoProxy, "/artifactory/api/go/go-remote", "GET", "/artifactory/api/go/go-remote/github.com/pkg/errors/@v/list", "", 0, true, ""},
	{"artifactory", "go zip", MirrorGoProxy, "/artifactory/api/go/go-remote", "GET", "/artifactory/api/go/go-remote/github.com/pkg/errors/@v/v0.9.1.zip", "", 0, true, ""},
	{"artifactory", "go sumdb", MirrorGoProxy, "/artifactory/api/go/go-remote", "GET", "/artifactory/api/go/go-remote/sumdb/sum.golang.org/lookup/github.com/pkg/errors@v0.9.1", "", 0, true, ""},
	{"artifactory", "go deploy", MirrorGoProxy, "/artifactory/api/go/go-local", "PUT", "/artifactory/api/go/go-local/example.com/m/@v/v1.0.0.zip", "", 900, false, "mirror: method PUT not allowed"},
	{"artifactory", "maven jar", MirrorMaven, "/artifactory/maven-remote", "GET", "/artifactory/maven-remote/org/slf4j/slf4j-api/2.0.9/slf4j-api-2.0.9.jar", "", 0, true, ""},
	{"artifactory", "maven deploy", MirrorMaven, "/artifactory/libs-release-local", "PUT", "/artifactory/libs-release-local/com/acme/app/1.0/app-1.0.jar", "", 900, false, "maven deploy: PUT to a repository path"},
	{"artifactory", "debian", MirrorApt, "/artifactory/debian-remote", "GET", "/artifactory/debian-remote/dists/bookworm/InRelease", "", 0, true, ""},
	{"artifactory", "debian deploy", MirrorApt, "/artifactory/debian-local", "PUT", "/artifactory/debian-local/pool/main/a/app/app_1.0_amd64.deb", "", 900, false, "mirror: method PUT not allowed"},
	{"artifactory", "UI outside the base", MirrorPyPI, "/artifactory/api/pypi/pypi-remote", "GET", "/ui/login", "", 0, false, rOutsideBase},
	{"artifactory", "deploy API outside the base", MirrorPyPI, "/artifactory/api/pypi/pypi-remote", "PUT", "/artifactory/pypi-local/x/x-1.0.tar.gz", "", 900, false, rOutsideBase},
	{"artifactory", "sibling repository", MirrorPyPI, "/artifactory/api/pypi/pypi-remote", "GET", "/artifactory/api/pypi/pypi-remote2/simple/x/", "", 0, false, rOutsideBase},

	// Nexus: /repository/<repo>.
	{"nexus", "npm packument", MirrorNPM, "/repository/npm-proxy", "GET", "/repository/npm-proxy/express", "", 0, true, ""},
	{"nexus", "npm tarball", MirrorNPM, "/repository/npm-proxy", "GET", "/repository/npm-proxy/express/-/express-4.21.2.tgz", "", 0, true, ""},
	{"nexus", "npm publish", MirrorNPM, "/repository/npm-hosted", "PUT", "/repository/npm-hosted/mypkg", "", 900, false, "npm publish: PUT /<pkg>"},
	{"nexus", "npm login", MirrorNPM, "/repository/npm-hosted", "PUT", "/repository/npm-hosted/-/user/org.couchdb.user:bob", "", 90, false, "npm login/adduser: /-/user/"},
	{"nexus", "pypi simple", MirrorPyPI, "/repository/pypi-proxy", "GET", "/repository/pypi-proxy/simple/requests/", "", 0, true, ""},
	{"nexus", "pypi file", MirrorPyPI, "/repository/pypi-proxy", "GET", "/repository/pypi-proxy/packages/requests/2.32.3/requests-2.32.3.tar.gz", "", 0, true, ""},
	{"nexus", "twine upload", MirrorPyPI, "/repository/pypi-hosted", "POST", "/repository/pypi-hosted/", "", 900, false, "pypi upload: POST to the repository root"},
	{"nexus", "maven pom", MirrorMaven, "/repository/maven-central", "GET", "/repository/maven-central/org/slf4j/slf4j-api/2.0.9/slf4j-api-2.0.9.pom", "", 0, true, ""},
	{"nexus", "maven deploy", MirrorMaven, "/repository/maven-releases", "PUT", "/repository/maven-releases/com/acme/app/1.0/app-1.0.jar", "", 900, false, "maven deploy: PUT to a repository path"},
	{"nexus", "go info", MirrorGoProxy, "/repository/go-proxy", "GET", "/repository/go-proxy/golang.org/x/mod/@v/v0.20.0.info", "", 0, true, ""},
	{"nexus", "apt", MirrorApt, "/repository/apt-proxy", "GET", "/repository/apt-proxy/pool/main/c/curl/curl_7.88.1-10_amd64.deb", "", 0, true, ""},
	{"nexus", "apt upload", MirrorApt, "/repository/apt-hosted", "POST", "/repository/apt-hosted/", "", 900, false, "mirror: method POST not allowed"},
	{"nexus", "REST API outside the base", MirrorNPM, "/repository/npm-proxy", "GET", "/service/rest/v1/repositories", "", 0, false, rOutsideBase},

	// devpi: /<user>/<index>, +simple and +f.
	{"devpi", "simple", MirrorPyPI, "/root/pypi", "GET", "/root/pypi/+simple/requests/", "", 0, true, ""},
	{"devpi", "simple root", MirrorPyPI, "/root/pypi", "GET", "/root/pypi/+simple/", "", 0, true, ""},
	{"devpi", "file", MirrorPyPI, "/root/pypi", "GET", "/root/pypi/+f/d16/1d71145abeec5/requests-2.32.3-py3-none-any.whl", "", 0, true, ""},
	{"devpi", "upload", MirrorPyPI, "/team/dev", "POST", "/team/dev/", "", 900, false, "pypi upload: POST to the repository root"},
	{"devpi", "login outside the base", MirrorPyPI, "/team/dev", "POST", "/+login", "", 90, false, rOutsideBase},
	{"devpi", "index config", MirrorPyPI, "/team/dev", "PATCH", "/team/dev", "", 90, false, "mirror: method PATCH not allowed"},
	{"devpi", "json page", MirrorPyPI, "/team/dev", "GET", "/team/dev/requests", "", 0, false, "pypi: path outside download grammar"},

	// GitLab: project and group level, /api/v4/.../packages/<eco>.
	{"gitlab", "pypi simple", MirrorPyPI, "/api/v4/projects/42/packages/pypi", "GET", "/api/v4/projects/42/packages/pypi/simple/requests", "", 0, true, ""},
	{"gitlab", "pypi file", MirrorPyPI, "/api/v4/projects/42/packages/pypi", "GET", "/api/v4/projects/42/packages/pypi/files/" + gitlabSHA + "/requests-2.32.3-py3-none-any.whl", "", 0, true, ""},
	{"gitlab", "pypi group simple", MirrorPyPI, "/api/v4/groups/7/-/packages/pypi", "GET", "/api/v4/groups/7/-/packages/pypi/simple/requests/", "", 0, true, ""},
	{"gitlab", "pypi group file", MirrorPyPI, "/api/v4/groups/7/-/packages/pypi", "GET", "/api/v4/groups/7/-/packages/pypi/files/" + gitlabSHA + "/requests-2.32.3.tar.gz", "", 0, true, ""},
	{"gitlab", "twine upload", MirrorPyPI, "/api/v4/projects/42/packages/pypi", "POST", "/api/v4/projects/42/packages/pypi", "", 900, false, "pypi upload: POST to the repository root"},
	{"gitlab", "npm project", MirrorNPM, "/api/v4/projects/42/packages/npm", "GET", "/api/v4/projects/42/packages/npm/@acme/lib/-/@acme/lib-1.0.0.tgz", "", 0, true, ""},
	{"gitlab", "npm tarball of another scope", MirrorNPM, "/api/v4/projects/42/packages/npm", "GET", "/api/v4/projects/42/packages/npm/@acme/lib/-/@evil/lib-1.0.0.tgz", "", 0, false, "npm: path outside download grammar"},
	{"gitlab", "npm project tarball", MirrorNPM, "/api/v4/projects/42/packages/npm", "GET", "/api/v4/projects/42/packages/npm/@acme/lib/-/lib-1.0.0.tgz", "", 0, true, ""},
	{"gitlab", "npm group packument", MirrorNPM, "/api/v4/groups/7/-/packages/npm", "GET", "/api/v4/groups/7/-/packages/npm/@acme%2flib", "", 0, true, ""},
	{"gitlab", "npm publish", MirrorNPM, "/api/v4/projects/42/packages/npm", "PUT", "/api/v4/projects/42/packages/npm/@acme%2flib", "", 900, false, "npm publish: PUT /<pkg>"},
	{"gitlab", "maven", MirrorMaven, "/api/v4/projects/42/packages/maven", "GET", "/api/v4/projects/42/packages/maven/com/acme/app/1.0/app-1.0.jar", "", 0, true, ""},
	{"gitlab", "maven deploy", MirrorMaven, "/api/v4/projects/42/packages/maven", "PUT", "/api/v4/projects/42/packages/maven/com/acme/app/1.0/app-1.0.jar", "", 900, false, "maven deploy: PUT to a repository path"},
	{"gitlab", "go", MirrorGoProxy, "/api/v4/projects/42/packages/go", "GET", "/api/v4/projects/42/packages/go/gitlab.example/acme/m/@v/list", "", 0, true, ""},
	{"gitlab", "project API outside the base", MirrorPyPI, "/api/v4/projects/42/packages/pypi", "GET", "/api/v4/projects/42/repository/files/secrets", "", 0, false, rOutsideBase},

	// Verdaccio and Athens: at the root, no base_path.
	{"verdaccio", "packument", MirrorNPM, "", "GET", "/express", "", 0, true, ""},
	{"verdaccio", "ping", MirrorNPM, "", "GET", "/-/ping", "", 0, true, ""},
	{"verdaccio", "publish", MirrorNPM, "", "PUT", "/mypkg", "", 900, false, "npm publish: PUT /<pkg>"},
	{"verdaccio", "login", MirrorNPM, "", "PUT", "/-/user/org.couchdb.user:bob", "", 90, false, "npm login/adduser: /-/user/"},
	{"verdaccio", "web UI", MirrorNPM, "", "GET", "/-/web/detail/express", "", 0, false, "npm: /-/ endpoint outside download grammar"},
	{"athens", "list", MirrorGoProxy, "", "GET", "/github.com/pkg/errors/@v/list", "", 0, true, ""},
	{"athens", "commit", MirrorGoProxy, "", "GET", "/github.com/pkg/errors/@v/614d223910a1.info", "", 0, true, ""},
	{"athens", "commit zip", MirrorGoProxy, "", "GET", "/github.com/pkg/errors/@v/614d223910a1.zip", "", 0, false, "goproxy: path outside download grammar"},
	{"athens", "catalog", MirrorGoProxy, "", "GET", "/catalog", "", 0, false, "goproxy: path outside download grammar"},
	{"athens", "upload", MirrorGoProxy, "", "PUT", "/example.com/m/@v/v1.0.0.zip", "", 900, false, "mirror: method PUT not allowed"},
	{"plain index", "file next to its page", MirrorPyPI, "", "GET", "/simple/egtest/egtest-0.1-py3-none-any.whl", "", 0, true, ""},
	{"plain index", "file elsewhere at the root", MirrorPyPI, "", "GET", "/dist/egtest-0.1-py3-none-any.whl", "", 0, false, "pypi: path outside download grammar"},
	{"plain index", "file elsewhere, base_path /", MirrorPyPI, "/", "GET", "/dist/egtest-0.1-py3-none-any.whl", "", 0, true, ""},
}

func TestMirrorLayouts(t *testing.T) {
	for _, tc := range layoutCases {
		t.Run(tc.product+"/"+tc.name, func(t *testing.T) {
			r := &Request{Method: tc.method, Host: "repo.example", Port: 443, Path: tc.path, Query: tc.query, ContentLength: tc.clen}
			got := CheckMirror(tc.m, r, &MirrorOptions{BasePath: tc.base})
			if got.Allow != tc.allow || !tc.allow && tc.reason != "" && got.Reason != tc.reason {
				t.Errorf("%s %s %s (base %q) = {%v %q}, want {%v %q}", tc.m, tc.method, tc.path, tc.base, got.Allow, got.Reason, tc.allow, tc.reason)
			}
		})
	}
}

// TestMirrorClientReads: what real clients asked the public registries
// for and were refused (issue 23 item 2).
func TestMirrorClientReads(t *testing.T) {
	for _, tc := range []struct {
		name        string
		m           Mirror
		method      string
		path, query string
		allow       bool
	}{
		{"npm ping", MirrorNPM, "GET", "/-/ping", "", true},
		{"npm ping POST", MirrorNPM, "POST", "/-/ping", "", false},
		{"npm keys", MirrorNPM, "GET", "/-/npm/v1/keys", "", true},
		{"npm keys with query", MirrorNPM, "GET", "/-/npm/v1/keys", "x=1", false},
		{"npm attestations", MirrorNPM, "GET", "/-/npm/v1/attestations/express@4.21.2", "", true},
		{"npm attestations scoped", MirrorNPM, "GET", "/-/npm/v1/attestations/@sigstore%2fcli@0.8.0", "", true},
		{"npm attestations scoped raw", MirrorNPM, "GET", "/-/npm/v1/attestations/@sigstore/cli@0.8.0", "", true},
		{"npm attestations no version", MirrorNPM, "GET", "/-/npm/v1/attestations/express", "", false},
		{"npm attestations free text", MirrorNPM, "GET", "/-/npm/v1/attestations/a/b/c@1.0.0", "", false},
		{"npm search", MirrorNPM, "GET", "/-/v1/search", "text=left-pad&size=20&from=0&quality=0.65&popularity=0.98&maintenance=0.5", true},
		{"npm search unknown key", MirrorNPM, "GET", "/-/v1/search", "text=x&exfil=1", false},
		{"npm search repeated key", MirrorNPM, "GET", "/-/v1/search", "text=x&text=y", false},
		{"npm search no text", MirrorNPM, "GET", "/-/v1/search", "size=20", false},
		{"npm search too long", MirrorNPM, "GET", "/-/v1/search", "text=" + strings.Repeat("a", 300), false},
		{"npm search POST", MirrorNPM, "POST", "/-/v1/search", "text=x", false},
		{"npm audit", MirrorNPM, "POST", "/-/npm/v1/security/advisories/bulk", "", false},
		{"go commit", MirrorGoProxy, "GET", "/github.com/pkg/errors/@v/614d223910a1.info", "", true},
		{"go full commit", MirrorGoProxy, "GET", "/github.com/pkg/errors/@v/614d223910a179a4fbb0e3e2a42b83b3ee8b3fc8.info", "", true},
		{"go short hash", MirrorGoProxy, "GET", "/github.com/pkg/errors/@v/614d22.info", "", false},
		{"go upper hash", MirrorGoProxy, "GET", "/github.com/pkg/errors/@v/614D223910A1.info", "", false},
		{"go commit mod", MirrorGoProxy, "GET", "/github.com/pkg/errors/@v/614d223910a1.mod", "", false},
		{"go branch", MirrorGoProxy, "GET", "/github.com/pkg/errors/@v/master.info", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Request{Method: tc.method, Host: "registry.example", Port: 443, Path: tc.path, Query: tc.query}
			if got := CheckMirror(tc.m, r, nil); got.Allow != tc.allow {
				t.Errorf("%s %s?%s = %+v, want allow %v", tc.method, tc.path, tc.query, got, tc.allow)
			}
		})
	}
}

// FuzzUnderBasePath: a path under a base by UnderBasePath starts with the
// base and a '/', or is the base; the rest is what follows; and nothing
// that CheckMirror allows under a base lies outside it.
func FuzzUnderBasePath(f *testing.F) {
	for _, s := range [][2]string{
		{"/repository/npm", "/repository/npm/x"}, {"/a", "/ab"}, {"/a", "/a"}, {"/", "/x"},
		{"/root/pypi", "/root/pypi/+simple/x/"}, {"/a/b", "/a%2fb/c"}, {"/a", "/a/../b"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, base, path string) {
		rest, ok := UnderBasePath(base, path)
		if BasePathOK(base) != "" {
			return
		}
		if ok {
			switch {
			case base == "/":
				if rest != path || !strings.HasPrefix(path, "/") {
					t.Fatalf("root base: %q -> %q", path, rest)
				}
			case path == base:
				if rest != "/" {
					t.Fatalf("base itself: %q -> %q", path, rest)
				}
			case !strings.HasPrefix(path, base+"/") || rest != path[len(base):]:
				t.Fatalf("UnderBasePath(%q, %q) = %q outside the base", base, path, rest)
			}
		} else if base != "/" && (path == base || strings.HasPrefix(path, base+"/")) {
			t.Fatalf("UnderBasePath(%q, %q) missed a path under the base", base, path)
		}
		for _, m := range []Mirror{MirrorPyPI, MirrorNPM, MirrorGeneric} {
			v := CheckMirror(m, &Request{Method: "GET", Path: path}, &MirrorOptions{BasePath: base})
			if v.Allow && !ok {
				t.Fatalf("%s allowed %q outside base %q", m, path, base)
			}
		}
	})
}

// TestCheckMirrorBasePathAllocs: a base_path costs no allocation beyond
// what the same check at the root costs.
func TestCheckMirrorBasePathAllocs(t *testing.T) {
	o := &MirrorOptions{BasePath: "/repository/npm-proxy"}
	r := &Request{Method: "GET", Path: "/repository/npm-proxy/express/-/express-4.21.2.tgz"}
	root := &Request{Method: "GET", Path: "/express/-/express-4.21.2.tgz"}
	based := testing.AllocsPerRun(100, func() { CheckMirror(MirrorNPM, r, o) })
	if at := testing.AllocsPerRun(100, func() { CheckMirror(MirrorNPM, root, nil) }); based > at {
		t.Errorf("%v allocations per check under a base_path, %v at the root", based, at)
	}
	if !CheckMirror(MirrorNPM, r, o).Allow {
		t.Error("the tarball is refused")
	}
}
