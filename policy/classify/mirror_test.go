package classify

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"net/url"
	"strings"
	"testing"
)

const (
	sha256Hex = "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"
	sha1Hex   = "11f6ad8ec52a2984abaafd7c3b516503785c2072"
	// blake2b-256 digest split 2/2/60 as on files.pythonhosted.org.
	pyDirs = "/packages/d1/61/d71145abeec5ef15abcf0459cec60a27321e2f0ac0ef7ace5254f5944476"
)

// mirrorCase is one request against one ecosystem's grammar. reason is the
// exact deny reason ("" for allowed); method defaults to GET.
type mirrorCase struct {
	name    string
	method  string
	path    string
	query   string
	ctype   string
	clen    int64
	opts    *MirrorOptions
	allow   bool
	reason  string
	bodyCap int64
}

func (tc *mirrorCase) request() *Request {
	m := tc.method
	if m == "" {
		m = "GET"
	}
	return &Request{Method: m, Host: "registry.example", Port: 443, Path: tc.path, Query: tc.query, ContentType: tc.ctype, ContentLength: tc.clen}
}

func runMirror(t *testing.T, m Mirror, cases []mirrorCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := CheckMirror(m, tc.request(), tc.opts)
			if got.Allow != tc.allow || got.Reason != tc.reason || got.BodyCap != tc.bodyCap {
				t.Errorf("CheckMirror(%s, %s %s?%s) = {%v %q %d}, want {%v %q %d}",
					m, tc.request().Method, tc.path, tc.query, got.Allow, got.Reason, got.BodyCap, tc.allow, tc.reason, tc.bodyCap)
			}
		})
	}
}

var pypiCases = []mirrorCase{
	{name: "pip index root", path: "/simple/", allow: true},
	{name: "pip project page", path: "/simple/requests/", allow: true},
	{name: "pip project page dashed", path: "/simple/typing-extensions/", allow: true},
	{name: "json api", path: "/pypi/requests/json", allow: true},
	{name: "json api version", path: "/pypi/requests/2.32.3/json", allow: true},
	{name: "wheel", path: pyDirs + "/requests-2.32.3-py3-none-any.whl", allow: true},
	{name: "wheel head", method: "HEAD", path: pyDirs + "/requests-2.32.3-py3-none-any.whl", allow: true},
	{name: "PEP 658 metadata", path: pyDirs + "/requests-2.32.3-py3-none-any.whl.metadata", allow: true},
	{name: "pip-quoted local version", path: pyDirs + "/torch-2.3.0%2Bcpu-cp311-cp311-linux_x86_64.whl", allow: true},
	{name: "legacy sdist redirect", path: "/packages/source/r/requests/requests-2.0.0.tar.gz", allow: true},
	{name: "twine upload", method: "POST", path: "/legacy/", ctype: "multipart/form-data; boundary=x", clen: 9000, reason: "pypi upload: POST /legacy/"},
	{name: "trusted publishing mint", method: "POST", path: "/_/oidc/mint-token", clen: 100, reason: "pypi trusted-publishing token: /_/oidc/"},
	{name: "login page", path: "/account/login/", reason: "pypi account: /account/ and /manage/ pages"},
	{name: "token page", path: "/manage/account/token/", reason: "pypi account: /account/ and /manage/ pages"},
	{name: "xml-rpc", method: "POST", path: "/pypi", ctype: "text/xml", clen: 200, reason: "pypi xml-rpc: POST /pypi"},
	{name: "delete", method: "DELETE", path: "/simple/requests/", reason: "mirror: method DELETE not allowed"},
	{name: "lower-case method", method: "get", path: "/simple/requests/", reason: "mirror: method not allowed"},
	{name: "unnormalized name", path: "/simple/Requests/", reason: "pypi: path outside download grammar"},
	{name: "query", path: "/simple/requests/", query: "x=1", reason: "mirror: query string not allowed"},
	{name: "short hash dir", path: "/packages/d1/61/d711/requests-2.32.3.tar.gz", reason: "pypi: path outside download grammar"},
	{name: "legacy letter mismatch", path: "/packages/source/x/requests/requests-2.0.0.tar.gz", reason: "pypi: path outside download grammar"},
	{name: "body on GET", path: "/simple/requests/", clen: 16, reason: "mirror: body on GET/HEAD"},
	{name: "chunked GET", path: "/simple/requests/", clen: -1, reason: "mirror: body on GET/HEAD"},
	{name: "escaped dot-segment", path: "/simple/%2e%2e/", reason: "mirror: dot-segment in path"},
	{name: "escaped slash in file", path: pyDirs + "/..%2fx.whl", reason: "mirror: escaped slash in path"},
}

func TestCheckMirrorPyPI(t *testing.T) { runMirror(t, MirrorPyPI, pypiCases) }

var npmCases = []mirrorCase{
	{name: "packument", path: "/react", allow: true},
	{name: "legacy capitals", path: "/JSONStream", allow: true},
	{name: "version manifest", path: "/react/18.2.0", allow: true},
	{name: "tag manifest", path: "/react/latest", allow: true},
	{name: "tarball", path: "/react/-/react-18.2.0.tgz", allow: true},
	{name: "dashed name tarball", path: "/is-number/-/is-number-7.0.0.tgz", allow: true},
	{name: "prerelease tarball", path: "/next/-/next-14.2.0-canary.1.tgz", allow: true},
	{name: "scoped packument escaped", path: "/@types%2fnode", allow: true},
	{name: "scoped packument upper escape", path: "/@types%2Fnode", allow: true},
	{name: "scoped packument slash", path: "/@types/node", allow: true},
	{name: "scoped tarball", path: "/@types/node/-/node-20.11.0.tgz", allow: true},
	{name: "scoped version", path: "/@babel%2fcore/7.24.0", allow: true},
	{name: "dist-tags read", path: "/-/package/react/dist-tags", allow: true},
	{name: "scoped dist-tags read", path: "/-/package/@types%2fnode/dist-tags", allow: true},
	{name: "tarball head", method: "HEAD", path: "/react/-/react-18.2.0.tgz", allow: true},
	{name: "publish", method: "PUT", path: "/react", ctype: "application/json", clen: 4000, reason: "npm publish: PUT /<pkg>"},
	{name: "scoped publish", method: "PUT", path: "/@scope%2fpkg", ctype: "application/json", clen: 4000, reason: "npm publish: PUT /<pkg>"},
	{name: "unpublish all", method: "DELETE", path: "/react", reason: "npm unpublish: DELETE /<pkg>"},
	{name: "write fetch", path: "/react", query: "write=true", reason: "npm write fetch: ?write=true"},
	{name: "write fetch later param", path: "/@types%2fnode", query: "x=1&write=true", reason: "npm write fetch: ?write=true"},
	{name: "owner change", method: "PUT", path: "/react/-rev/3-abc", clen: 100, reason: "npm unpublish/owner change: /<pkg>/-rev/<rev>"},
	{name: "unpublish version", method: "DELETE", path: "/react/-/react-1.0.0.tgz/-rev/3-abc", reason: "npm unpublish/owner change: /<pkg>/-rev/<rev>"},
	{name: "dist-tag add", method: "PUT", path: "/-/package/react/dist-tags/beta", clen: 8, reason: "npm dist-tag: /-/package/<pkg>/dist-tags/<tag>"},
	{name: "dist-tag rm", method: "DELETE", path: "/-/package/react/dist-tags/beta", reason: "npm dist-tag: /-/package/<pkg>/dist-tags/<tag>"},
	{name: "deprecate", method: "PUT", path: "/left-pad", clen: 900, reason: "npm publish: PUT /<pkg>"},
	{name: "adduser", method: "PUT", path: "/-/user/org.couchdb.user:alice", clen: 80, reason: "npm login/adduser: /-/user/"},
	{name: "web login", method: "POST", path: "/-/v1/login", clen: 2, reason: "npm login: /-/v1/login"},
	{name: "token list", path: "/-/npm/v1/tokens", reason: "npm token: /-/npm/v1/tokens"},
	{name: "token create", method: "POST", path: "/-/npm/v1/tokens", clen: 50, reason: "npm token: /-/npm/v1/tokens"},
	{name: "token delete", method: "DELETE", path: "/-/user/token/abc", reason: "npm login/adduser: /-/user/"},
	{name: "audit bulk", method: "POST", path: "/-/npm/v1/security/advisories/bulk", clen: 300, reason: "npm audit: /-/npm/v1/security/"},
	{name: "oidc exchange", method: "POST", path: "/-/npm/v1/oidc/token/exchange/package/x", clen: 10, reason: "npm trusted-publishing token: /-/npm/v1/oidc/"},
	{name: "whoami", path: "/-/whoami", reason: "npm whoami: /-/whoami"},
	{name: "search", path: "/-/v1/search", query: "text=x&size=20", allow: true},
	{name: "access change", method: "POST", path: "/-/package/react/access", clen: 10, reason: "npm access/trust change: /-/package/<pkg>/..."},
	{name: "tarball of other package", path: "/react/-/evil-1.0.0.tgz", reason: "npm: path outside download grammar"},
	{name: "tarball without version", path: "/react/-/react-latest.tgz", reason: "npm: path outside download grammar"},
	{name: "extra segment", path: "/react/18.2.0/extra", reason: "npm: path outside download grammar"},
	{name: "second escaped slash", path: "/@types%2fnode%2fx", reason: "mirror: escaped slash in path"},
	{name: "escaped slash unscoped", path: "/react%2f..%2f-", reason: "mirror: escaped slash in path"},
	{name: "escaped slash past scope", path: "/react/@x%2fy", reason: "mirror: escaped slash in path"},
	{name: "dist-tags second escaped slash", path: "/-/package/@types%2fnode%2fx/dist-tags", reason: "mirror: escaped slash in path"},
	{name: "scope without name", path: "/@types", reason: "npm: path outside download grammar"},
	{name: "other query", path: "/react", query: "foo=1", reason: "mirror: query string not allowed"},
}

func TestCheckMirrorNPM(t *testing.T) { runMirror(t, MirrorNPM, npmCases) }

var cratesCases = []mirrorCase{
	{name: "sparse config", path: "/config.json", allow: true},
	{name: "one-letter crate", path: "/1/a", allow: true},
	{name: "two-letter crate", path: "/2/cc", allow: true},
	{name: "three-letter crate", path: "/3/s/syn", allow: true},
	{name: "index entry", path: "/se/rd/serde", allow: true},
	{name: "index entry dashed", path: "/ca/rg/cargo-util", allow: true},
	{name: "cargo static download", path: "/crates/serde/1.0.197/download", allow: true},
	{name: "static file", path: "/crates/serde/serde-1.0.197.crate", allow: true},
	{name: "api download", path: "/api/v1/crates/serde/1.0.197/download", allow: true},
	{name: "publish", method: "PUT", path: "/api/v1/crates/new", clen: 5000, reason: "crates publish: PUT /api/v1/crates/new"},
	{name: "yank", method: "DELETE", path: "/api/v1/crates/serde/1.0.197/yank", reason: "crates yank: DELETE /api/v1/crates/<name>/<version>/yank"},
	{name: "unyank", method: "PUT", path: "/api/v1/crates/serde/1.0.197/unyank", reason: "crates unyank: PUT /api/v1/crates/<name>/<version>/unyank"},
	{name: "owner add", method: "PUT", path: "/api/v1/crates/serde/owners", clen: 20, reason: "crates owner change: /api/v1/crates/<name>/owners"},
	{name: "owner remove", method: "DELETE", path: "/api/v1/crates/serde/owners", clen: 20, reason: "crates owner change: /api/v1/crates/<name>/owners"},
	{name: "owner list read", path: "/api/v1/crates/serde/owners", reason: "crates: path outside download grammar"},
	{name: "token create", method: "PUT", path: "/api/v1/me/tokens", clen: 20, reason: "crates token/account: /api/v1/me/"},
	{name: "trusted publishing", method: "POST", path: "/api/v1/trusted_publishing/tokens", clen: 20, reason: "crates trusted-publishing token: /api/v1/trusted_publishing/"},
	{name: "index prefix mismatch", path: "/se/xx/serde", reason: "crates: path outside download grammar"},
	{name: "three-letter prefix mismatch", path: "/3/a/syn", reason: "crates: path outside download grammar"},
	{name: "upper-case index", path: "/Se/rd/Serde", reason: "crates: path outside download grammar"},
	{name: "static other crate", path: "/crates/serde/serde_json-1.0.0.crate", reason: "crates: path outside download grammar"},
	{name: "static download free text", path: "/crates/serde/secret/download", reason: "crates: path outside download grammar"},
	{name: "query", path: "/config.json", query: "a=b", reason: "mirror: query string not allowed"},
	{name: "post index", method: "POST", path: "/se/rd/serde", clen: 1, reason: "mirror: method POST not allowed"},
}

func TestCheckMirrorCrates(t *testing.T) { runMirror(t, MirrorCrates, cratesCases) }

var rubygemsCases = []mirrorCase{
	{name: "compact versions", path: "/versions", allow: true},
	{name: "compact info", path: "/info/rails", allow: true},
	{name: "compact names", path: "/names", allow: true},
	{name: "gem file", path: "/gems/rails-7.1.3.gem", allow: true},
	{name: "platform gem", path: "/gems/nokogiri-1.16.2-x86_64-linux.gem", allow: true},
	{name: "specs", path: "/specs.4.8.gz", allow: true},
	{name: "latest specs", path: "/latest_specs.4.8.gz", allow: true},
	{name: "gemspec", path: "/quick/Marshal.4.8/rails-7.1.3.gemspec.rz", allow: true},
	{name: "dependency api", path: "/api/v1/dependencies", query: "gems=rails,rack", allow: true},
	{name: "dependency api escaped commas", path: "/api/v1/dependencies", query: "gems=rails%2Crack", allow: true},
	{name: "dependency probe", path: "/api/v1/dependencies", allow: true},
	{name: "push", method: "POST", path: "/api/v1/gems", ctype: "application/octet-stream", clen: 9000, reason: "rubygems push: POST /api/v1/gems"},
	{name: "api key fetch", path: "/api/v1/api_key.json", reason: "rubygems api_key fetch: GET /api/v1/api_key"},
	{name: "api key fetch yaml", path: "/api/v1/api_key.yaml", reason: "rubygems api_key fetch: GET /api/v1/api_key"},
	{name: "yank", method: "DELETE", path: "/api/v1/gems/yank", reason: "rubygems yank: DELETE /api/v1/gems/yank"},
	{name: "owner add", method: "POST", path: "/api/v1/gems/rails/owners", clen: 10, reason: "rubygems owner change: /api/v1/gems/<name>/owners"},
	{name: "webhook", method: "POST", path: "/api/v1/web_hooks", clen: 10, reason: "rubygems webhook: /api/v1/web_hooks"},
	{name: "oidc exchange", method: "POST", path: "/api/v1/oidc/trusted_publisher/exchange_token", clen: 10, reason: "rubygems trusted-publishing token: /api/v1/oidc/"},
	{name: "dependency extra param", path: "/api/v1/dependencies", query: "gems=rails&x=1", reason: "rubygems dependencies: query must be gems=<name>,..."},
	{name: "dependency bad name", path: "/api/v1/dependencies", query: "gems=a%2Fb", reason: "rubygems dependencies: query must be gems=<name>,..."},
	{name: "dependency query over cap", path: "/api/v1/dependencies", query: "gems=" + strings.Repeat("a,", 60) + "a", opts: &MirrorOptions{MaxQuery: 100}, reason: "mirror: query too long"},
	{name: "gems json read api", path: "/api/v1/gems/rails.json", reason: "rubygems: path outside download grammar"},
	{name: "query on gem", path: "/gems/rails-7.1.3.gem", query: "x=1", reason: "mirror: query string not allowed"},
}

func TestCheckMirrorRubyGems(t *testing.T) { runMirror(t, MirrorRubyGems, rubygemsCases) }

const commonsLang = "/maven2/org/apache/commons/commons-lang3/3.14.0/commons-lang3-3.14.0"

var mavenCases = []mirrorCase{
	{name: "jar", path: commonsLang + ".jar", allow: true},
	{name: "pom", path: commonsLang + ".pom", allow: true},
	{name: "checksum", path: commonsLang + ".jar.sha1", allow: true},
	{name: "signature checksum", path: commonsLang + ".jar.asc.sha256", allow: true},
	{name: "classifier", path: commonsLang + "-sources.jar", allow: true},
	{name: "gradle module", path: "/com/google/guava/guava/33.0.0-jre/guava-33.0.0-jre.module", allow: true},
	{name: "artifact metadata", path: "/maven2/org/apache/commons/commons-lang3/maven-metadata.xml", allow: true},
	{name: "metadata checksum", path: "/maven2/org/apache/commons/commons-lang3/maven-metadata.xml.sha1", allow: true},
	{name: "timestamped snapshot", path: "/repository/snapshots/com/example/lib/1.0-SNAPSHOT/lib-1.0-20240101.123456-7.jar", allow: true},
	{name: "snapshot metadata", path: "/repository/snapshots/com/example/lib/1.0-SNAPSHOT/maven-metadata.xml", allow: true},
	{name: "deploy", method: "PUT", path: commonsLang + ".jar", clen: 9000, reason: "maven deploy: PUT to a repository path"},
	{name: "deploy metadata", method: "PUT", path: "/maven2/org/apache/commons/commons-lang3/maven-metadata.xml", clen: 900, reason: "maven deploy: PUT to a repository path"},
	{name: "webdav mkcol", method: "MKCOL", path: "/maven2/org/apache/commons/commons-lang3/3.15.0/", reason: "maven deploy: MKCOL"},
	{name: "central portal upload", method: "POST", path: "/api/v1/publisher/upload", query: "name=x&publishingType=AUTOMATIC", clen: 9000, reason: "maven central publish: /api/v1/publisher/"},
	{name: "ossrh staging", method: "PUT", path: "/service/local/staging/deploy/maven2/org/x/lib/1.0/lib-1.0.jar", clen: 9000, reason: "maven staging deploy: /service/local/"},
	{name: "file of other artifact", path: "/maven2/org/x/lib/1.0/evil-1.0.jar", reason: "maven: path outside download grammar"},
	{name: "file of other version", path: "/maven2/org/x/lib/1.0/lib-2.0.jar", reason: "maven: path outside download grammar"},
	{name: "free text after version", path: "/maven2/org/x/lib/1.0/lib-1.0secret.jar", reason: "maven: path outside download grammar"},
	{name: "directory listing", path: "/maven2/org/apache/", reason: "maven: path outside download grammar"},
	{name: "query", path: commonsLang + ".jar", query: "q=1", reason: "mirror: query string not allowed"},
}

func TestCheckMirrorMaven(t *testing.T) { runMirror(t, MirrorMaven, mavenCases) }

var goproxyCases = []mirrorCase{
	{name: "list", path: "/github.com/!burnt!sushi/toml/@v/list", allow: true},
	{name: "info", path: "/github.com/!burnt!sushi/toml/@v/v1.3.2.info", allow: true},
	{name: "mod", path: "/github.com/!burnt!sushi/toml/@v/v1.3.2.mod", allow: true},
	{name: "zip", path: "/github.com/pkg/errors/@v/v0.9.1.zip", allow: true},
	{name: "latest", path: "/golang.org/x/mod/@latest", allow: true},
	{name: "gopkg.in", path: "/gopkg.in/yaml.v3/@v/v3.0.1.mod", allow: true},
	{name: "pseudo-version", path: "/golang.org/x/net/@v/v0.0.0-20191109021931-daa7c04131f5.zip", allow: true},
	{name: "incompatible", path: "/github.com/docker/docker/@v/v20.10.0+incompatible.info", allow: true},
	{name: "sumdb supported", path: "/sumdb/sum.golang.org/supported", allow: true},
	{name: "sumdb lookup proxied", path: "/sumdb/sum.golang.org/lookup/github.com/pkg/errors@v0.9.1", allow: true},
	{name: "sumdb tile", path: "/sumdb/sum.golang.org/tile/8/0/x123/456", allow: true},
	{name: "sumdb partial data tile", path: "/sumdb/sum.golang.org/tile/8/data/x001/234.p/5", allow: true},
	{name: "sumdb latest direct", path: "/latest", allow: true},
	{name: "sumdb lookup direct", path: "/lookup/golang.org/x/mod@v0.17.0", allow: true},
	{name: "sumdb tile direct", path: "/tile/8/1/000", allow: true},
	{name: "prefix allows module", path: "/github.com/!burnt!sushi/toml/@v/list", opts: &MirrorOptions{ModulePrefixes: []string{"github.com/BurntSushi"}}, allow: true},
	{name: "prefix allows lookup", path: "/sumdb/sum.golang.org/lookup/golang.org/x/mod@v0.17.0", opts: &MirrorOptions{ModulePrefixes: []string{"github.com/x", "golang.org/x"}}, allow: true},
	{name: "prefix denies module", path: "/evil.example/c2vjcmv0/@v/list", opts: &MirrorOptions{ModulePrefixes: []string{"golang.org/x"}}, reason: "goproxy: module outside module-prefixes"},
	{name: "prefix is whole elements", path: "/github.com/!burnt!sushix/toml/@v/list", opts: &MirrorOptions{ModulePrefixes: []string{"github.com/BurntSushi"}}, reason: "goproxy: module outside module-prefixes"},
	{name: "prefix case-encoded", path: "/github.com/burntsushi/toml/@v/list", opts: &MirrorOptions{ModulePrefixes: []string{"github.com/BurntSushi"}}, reason: "goproxy: module outside module-prefixes"},
	{name: "prefix denies lookup", path: "/lookup/evil.example/x@v1.0.0", opts: &MirrorOptions{ModulePrefixes: []string{"golang.org/x"}}, reason: "goproxy: module outside module-prefixes"},
	{name: "upper case not encoded", path: "/github.com/BurntSushi/toml/@v/list", reason: "goproxy: path outside download grammar"},
	{name: "branch query", path: "/github.com/x/y/@v/master.info", reason: "goproxy: path outside download grammar"},
	{name: "no dot in host", path: "/evil/x/@v/list", reason: "goproxy: path outside download grammar"},
	{name: "bad bang", path: "/github.com/x!/y/@v/list", reason: "goproxy: path outside download grammar"},
	{name: "go-get query", path: "/github.com/x/y/@v/list", query: "go-get=1", reason: "mirror: query string not allowed"},
	{name: "post", method: "POST", path: "/github.com/x/y/@v/list", clen: 1, reason: "mirror: method POST not allowed"},
	{name: "other sumdb", path: "/sumdb/evil.example/lookup/x.com/y@v1.0.0", reason: "goproxy: sumdb host must be sum.golang.org"},
	{name: "bad tile", path: "/tile/8/0/x12/456", reason: "goproxy: sumdb path outside download grammar"},
	{name: "lookup without version", path: "/lookup/golang.org/x/mod", reason: "goproxy: sumdb path outside download grammar"},
}

func TestCheckMirrorGoProxy(t *testing.T) { runMirror(t, MirrorGoProxy, goproxyCases) }

var aptCases = []mirrorCase{
	{name: "InRelease", path: "/debian/dists/bookworm/InRelease", allow: true},
	{name: "Release.gpg", path: "/ubuntu/dists/jammy-updates/Release.gpg", allow: true},
	{name: "Packages", path: "/debian/dists/bookworm/main/binary-amd64/Packages.xz", allow: true},
	{name: "Translation", path: "/debian/dists/bookworm/main/i18n/Translation-en.bz2", allow: true},
	{name: "by-hash", path: "/debian/dists/bookworm/main/binary-amd64/by-hash/SHA256/" + sha256Hex, allow: true},
	{name: "deb", path: "/debian/pool/main/o/openssl/libssl3_3.0.11-1~deb12u2_amd64.deb", allow: true},
	{name: "lib prefix", path: "/debian/pool/main/libx/libxml2/libxml2_2.9.14%2Bdfsg-1.3_amd64.deb", allow: true},
	{name: "epoch", path: "/debian/pool/main/s/sudo/sudo_1%3a1.9.13p3-1_amd64.deb", allow: true},
	{name: "security pool", path: "/debian-security/pool/updates/main/o/openssl/openssl_3.0.11-1~deb12u2.dsc", allow: true},
	{name: "source tarball", path: "/debian/pool/main/o/openssl/openssl_3.0.11.orig.tar.gz", allow: true},
	{name: "no root", path: "/dists/stable/Release", allow: true},
	{name: "dput http", method: "PUT", path: "/debian/pool/main/o/openssl/openssl_3.0.11.dsc", clen: 100, reason: "mirror: method PUT not allowed"},
	{name: "prefix mismatch", path: "/debian/pool/main/x/openssl/openssl_3.0.11.dsc", reason: "apt: path outside download grammar"},
	{name: "bad by-hash", path: "/debian/dists/bookworm/main/by-hash/SHA256/zz", reason: "apt: path outside download grammar"},
	{name: "script in pool", path: "/debian/pool/main/o/openssl/openssl.sh", reason: "apt: path outside download grammar"},
	{name: "deep root", path: "/a/b/c/d/dists/x/Release", reason: "apt: path outside download grammar"},
	{name: "query", path: "/debian/dists/bookworm/InRelease", query: "x=1", reason: "mirror: query string not allowed"},
}

func TestCheckMirrorApt(t *testing.T) { runMirror(t, MirrorApt, aptCases) }

var ociCases = []mirrorCase{
	{name: "ping", path: "/v2/", allow: true},
	{name: "manifest by tag", path: "/v2/library/ubuntu/manifests/22.04", allow: true},
	{name: "manifest head", method: "HEAD", path: "/v2/library/ubuntu/manifests/latest", allow: true},
	{name: "manifest by digest", path: "/v2/library/ubuntu/manifests/sha256:" + sha256Hex, allow: true},
	{name: "blob", path: "/v2/library/ubuntu/blobs/sha256:" + sha256Hex, allow: true},
	{name: "nested name", path: "/v2/org/team/app-server/manifests/v1.2.3", allow: true},
	{name: "tags list", path: "/v2/library/ubuntu/tags/list", query: "n=10&last=20.04", allow: true},
	{name: "referrers", path: "/v2/x/y/referrers/sha256:" + sha256Hex, query: "artifactType=application%2Fvnd.example%2Bjson", allow: true},
	{name: "pull token encoded", path: "/token", query: "scope=repository%3Alibrary%2Fubuntu%3Apull&service=registry.docker.io", allow: true},
	{name: "pull token raw", path: "/token", query: "scope=repository:library/ubuntu:pull&service=registry.docker.io", allow: true},
	{name: "pull token logged in", path: "/token", query: "account=alice&scope=repository%3Alibrary%2Fubuntu%3Apull&service=registry.docker.io", allow: true},
	{name: "v2 token path", path: "/v2/token", query: "scope=repository:x/y:pull", allow: true},
	{name: "blob upload start", method: "POST", path: "/v2/library/ubuntu/blobs/uploads/", reason: "oci blob upload: POST /v2/<name>/blobs/uploads/"},
	{name: "blob mount", method: "POST", path: "/v2/library/ubuntu/blobs/uploads/", query: "mount=sha256:" + sha256Hex + "&from=x/y", reason: "oci blob upload: POST /v2/<name>/blobs/uploads/"},
	{name: "blob upload chunk", method: "PATCH", path: "/v2/library/ubuntu/blobs/uploads/6f7c0a1e-1b2c", clen: 9000, reason: "oci blob upload: PATCH/PUT /v2/<name>/blobs/uploads/<ref>"},
	{name: "blob upload finish", method: "PUT", path: "/v2/library/ubuntu/blobs/uploads/6f7c0a1e-1b2c", query: "digest=sha256%3A" + sha256Hex, reason: "oci blob upload: PATCH/PUT /v2/<name>/blobs/uploads/<ref>"},
	{name: "blob upload status", path: "/v2/library/ubuntu/blobs/uploads/6f7c0a1e-1b2c", reason: "oci blob upload status: GET /v2/<name>/blobs/uploads/<ref>"},
	{name: "manifest push", method: "PUT", path: "/v2/library/ubuntu/manifests/latest", clen: 500, reason: "oci manifest push: PUT /v2/<name>/manifests/<ref>"},
	{name: "manifest delete", method: "DELETE", path: "/v2/library/ubuntu/manifests/sha256:" + sha256Hex, reason: "oci delete: DELETE /v2/<name>/..."},
	{name: "push-scoped token", path: "/token", query: "scope=repository%3Alibrary%2Fubuntu%3Apull%2Cpush&service=registry.docker.io", reason: "oci token: push-scoped token (scope must be :pull)"},
	{name: "push-only token", path: "/token", query: "scope=repository:library/ubuntu:push", reason: "oci token: push-scoped token (scope must be :pull)"},
	{name: "push scope hidden in second", path: "/token", query: "scope=repository%3Ax%2Fy%3Apull+repository%3Ax%2Fz%3Apush", reason: "oci token: push-scoped token (scope must be :pull)"},
	{name: "wildcard scope", path: "/token", query: "scope=repository:x/y:*", reason: "oci token: push-scoped token (scope must be :pull)"},
	{name: "catalog scope", path: "/token", query: "scope=registry:catalog:*", reason: "oci token: scope must be repository:<name>:pull"},
	{name: "docker login", path: "/token", query: "account=alice&client_id=docker&offline_token=true&service=registry.docker.io", reason: "oci token: offline_token asks for a refresh token"},
	{name: "token without scope", path: "/token", query: "service=registry.docker.io", reason: "oci token: scope must be repository:<name>:pull"},
	{name: "oauth token post", method: "POST", path: "/token", ctype: "application/x-www-form-urlencoded", clen: 100, reason: "oci token: POST /token (credential grant)"},
	{name: "token unknown param", path: "/token", query: "scope=repository:x/y:pull&data=c2VjcmV0", reason: "oci token: unexpected query parameter"},
	{name: "token scope query over cap", path: "/token", query: strings.Repeat("scope=repository:library/ubuntu:pull&", 14) + "service=x", reason: "mirror: query too long"},
	{name: "catalog", path: "/v2/_catalog", reason: "oci: path outside download grammar"},
	{name: "upper-case name", path: "/v2/library/Ubuntu/manifests/latest", reason: "oci: path outside download grammar"},
	{name: "bad separator", path: "/v2/library/a-.b/manifests/latest", reason: "oci: path outside download grammar"},
	{name: "blob by tag", path: "/v2/library/ubuntu/blobs/latest", reason: "oci: path outside download grammar"},
	{name: "ping query", path: "/v2/", query: "x=1", reason: "mirror: query string not allowed"},
	{name: "manifest query", path: "/v2/library/ubuntu/manifests/latest", query: "x=1", reason: "mirror: query string not allowed"},
}

func TestCheckMirrorOCI(t *testing.T) { runMirror(t, MirrorOCI, ociCases) }

var gitCases = []mirrorCase{
	{name: "clone discovery", path: "/owner/repo.git/info/refs", query: "service=git-upload-pack", allow: true},
	{name: "clone discovery no .git", path: "/owner/repo/info/refs", query: "service=git-upload-pack", allow: true},
	{name: "upload-pack", method: "POST", path: "/owner/repo.git/git-upload-pack", ctype: "application/x-git-upload-pack-request", clen: 300, allow: true, bodyCap: 1 << 20},
	{name: "upload-pack chunked", method: "POST", path: "/group/sub/repo.git/git-upload-pack", ctype: "application/x-git-upload-pack-request", clen: -1, allow: true, bodyCap: 1 << 20},
	{name: "lfs batch", method: "POST", path: "/owner/repo.git/info/lfs/objects/batch", ctype: "application/vnd.git-lfs+json; charset=utf-8", clen: 200, allow: true, bodyCap: 64 << 10},
	{name: "lfs object", path: "/owner/repo.git/info/lfs/objects/" + sha256Hex, allow: true},
	{name: "gitlab lfs object", path: "/group/sub/repo.git/gitlab-lfs/objects/" + sha256Hex, allow: true},
	{name: "push discovery", path: "/owner/repo.git/info/refs", query: "service=git-receive-pack", reason: "git push discovery: service=git-receive-pack"},
	{name: "push discovery escaped", path: "/owner/repo.git/info/refs", query: "service=git%2Dreceive-pack", reason: "git push discovery: service=git-receive-pack"},
	{name: "push", method: "POST", path: "/owner/repo.git/git-receive-pack", ctype: "application/x-git-receive-pack-request", clen: 900, reason: "git push: git-receive-pack"},
	{name: "push get", path: "/owner/repo.git/git-receive-pack", reason: "git push: git-receive-pack"},
	{name: "upload-pack wrong type", method: "POST", path: "/owner/repo.git/git-upload-pack", ctype: "application/x-git-receive-pack-request", clen: 300, reason: "git: content type must be application/x-git-upload-pack-request"},
	{name: "upload-pack over cap", method: "POST", path: "/owner/repo.git/git-upload-pack", ctype: "application/x-git-upload-pack-request", clen: 2 << 20, reason: "git: request body over cap"},
	{name: "upload-pack get", path: "/owner/repo.git/git-upload-pack", reason: "git: application/x-git-upload-pack-request endpoint takes POST"},
	{name: "upload-pack bad length", method: "POST", path: "/owner/repo.git/git-upload-pack", ctype: "application/x-git-upload-pack-request", clen: -7, reason: "git: bad content length"},
	{name: "upload-pack query", method: "POST", path: "/owner/repo.git/git-upload-pack", query: "x=1", ctype: "application/x-git-upload-pack-request", clen: 3, reason: "mirror: query string not allowed"},
	{name: "lfs lock", method: "POST", path: "/owner/repo.git/info/lfs/locks", ctype: "application/vnd.git-lfs+json", clen: 40, reason: "git lfs locks: info/lfs/locks"},
	{name: "lfs lock verify", method: "POST", path: "/owner/repo.git/info/lfs/locks/verify", ctype: "application/vnd.git-lfs+json", clen: 40, reason: "git lfs locks: info/lfs/locks"},
	{name: "lfs object put", method: "PUT", path: "/owner/repo.git/info/lfs/objects/" + sha256Hex, clen: 9000, reason: "git lfs upload: PUT object"},
	{name: "lfs batch over cap", method: "POST", path: "/owner/repo.git/info/lfs/objects/batch", ctype: "application/vnd.git-lfs+json", clen: 1 << 20, reason: "git: request body over cap"},
	{name: "dumb refs", path: "/owner/repo.git/info/refs", reason: "git info/refs: query must be service=git-upload-pack"},
	{name: "refs post", method: "POST", path: "/owner/repo.git/info/refs", query: "service=git-upload-pack", clen: 1, reason: "mirror: method POST not allowed"},
	{name: "refs extra param", path: "/owner/repo.git/info/refs", query: "service=git-upload-pack&x=1", reason: "git info/refs: query must be service=git-upload-pack"},
	{name: "no repo", path: "/info/refs", query: "service=git-upload-pack", reason: "git: path outside download grammar"},
	{name: "web page", path: "/owner/repo", reason: "git: path outside download grammar"},
}

func TestCheckMirrorGit(t *testing.T) { runMirror(t, MirrorGit, gitCases) }

var genericCases = []mirrorCase{
	{name: "file", path: "/releases/download/v1.0/tool_linux_amd64.tar.gz", allow: true},
	{name: "head", method: "HEAD", path: "/releases/download/v1.0/tool_linux_amd64.tar.gz", allow: true},
	{name: "signed query allowed by option", path: "/blobs/data", query: "X-Amz-Expires=300&X-Amz-Signature=abc", opts: &MirrorOptions{MaxQuery: 64}, allow: true},
	{name: "signed query over option", path: "/blobs/data", query: "X-Amz-Expires=300&X-Amz-Signature=abc", opts: &MirrorOptions{MaxQuery: 8}, reason: "mirror: query too long"},
	{name: "post", method: "POST", path: "/upload", ctype: "multipart/form-data", clen: 100, reason: "mirror: method POST not allowed"},
	{name: "put", method: "PUT", path: "/file", clen: 100, reason: "mirror: method PUT not allowed"},
	{name: "connect", method: "CONNECT", path: "/", reason: "mirror: method not allowed"},
	{name: "query", path: "/file", query: "q=1", reason: "mirror: query string not allowed"},
	{name: "body on GET", path: "/file", clen: 5, reason: "mirror: body on GET/HEAD"},
}

func TestCheckMirrorGeneric(t *testing.T) { runMirror(t, MirrorGeneric, genericCases) }

// Path tricks are checked before any grammar, so generic shows them bare.
var pathTrickCases = []mirrorCase{
	{name: "dot-dot", path: "/a/../b", reason: "mirror: dot-segment in path"},
	{name: "dot", path: "/a/./b", reason: "mirror: dot-segment in path"},
	{name: "trailing dot-dot", path: "/a/..", reason: "mirror: dot-segment in path"},
	{name: "escaped dot-dot", path: "/a/%2e%2e/b", reason: "mirror: dot-segment in path"},
	{name: "half escaped dot-dot", path: "/a/.%2E/b", reason: "mirror: dot-segment in path"},
	{name: "escaped slash", path: "/a%2fb", reason: "mirror: escaped slash in path"},
	{name: "escaped slash upper", path: "/a%2Fb", reason: "mirror: escaped slash in path"},
	{name: "double-encoded slash", path: "/a%252fb", reason: "mirror: double-encoded escape in path"},
	{name: "backslash", path: `/a\b`, reason: "mirror: backslash in path"},
	{name: "escaped backslash", path: "/a%5cb", reason: "mirror: escaped backslash in path"},
	{name: "escaped NUL", path: "/a%00b", reason: "mirror: escaped control character in path"},
	{name: "escaped newline", path: "/a%0ab", reason: "mirror: escaped control character in path"},
	{name: "raw control", path: "/a\tb", reason: "mirror: control character in path"},
	{name: "empty segment", path: "/a//b", reason: "mirror: empty path segment"},
	{name: "leading double slash", path: "//evil.example/x", reason: "mirror: empty path segment"},
	{name: "semicolon", path: "/a/..;/b", reason: "mirror: ';' in path"},
	{name: "escaped semicolon", path: "/a%3bx", reason: "mirror: ';' in path"},
	{name: "malformed escape", path: "/a%zz", reason: "mirror: malformed percent-escape in path"},
	{name: "truncated escape", path: "/a%2", reason: "mirror: malformed percent-escape in path"},
	{name: "relative", path: "a/b", reason: "mirror: path must start with /"},
	{name: "empty", path: "", reason: "mirror: path must start with /"},
	{name: "space", path: "/a b", reason: "mirror: disallowed character in path"},
	{name: "fragment", path: "/a#b", reason: "mirror: disallowed character in path"},
	{name: "raw non-ASCII", path: "/\xc3\xa4", reason: "mirror: non-ASCII byte in path"},
	{name: "escaped non-ASCII", path: "/a%c3%a4", reason: "mirror: non-ASCII byte in path"},
	{name: "too many segments", path: strings.Repeat("/a", 33), reason: "mirror: too many path segments"},
	{name: "query control", path: "/a", query: "x=%0", reason: "mirror: malformed percent-escape in query"},
	{name: "query space", path: "/a", query: "x=a b", reason: "mirror: disallowed character in query"},
	{name: "URL over default cap", path: "/" + strings.Repeat("a", 1024), reason: "mirror: URL too long"},
	{name: "URL at default cap", path: "/" + strings.Repeat(strings.Repeat("b", 254)+"/", 4) + "ccc", allow: true},
	{name: "URL over option cap", path: "/" + strings.Repeat("a", 64), opts: &MirrorOptions{MaxURL: 64}, reason: "mirror: URL too long"},
	{name: "query counts toward URL cap", path: "/a", query: strings.Repeat("b", 63), opts: &MirrorOptions{MaxURL: 64, MaxQuery: 100}, reason: "mirror: URL too long"},
	{name: "URL at option cap", path: "/" + strings.Repeat("a", 63), opts: &MirrorOptions{MaxURL: 64}, allow: true},
}

func TestCheckMirrorPathTricks(t *testing.T) { runMirror(t, MirrorGeneric, pathTrickCases) }

func TestCheckMirrorUnknownEcosystem(t *testing.T) {
	for _, m := range []Mirror{MirrorNone, Mirror(len(ecosystems)), 200} {
		got := CheckMirror(m, &Request{Method: "GET", Path: "/"}, nil)
		if got.Allow || got.Reason != "mirror: unknown ecosystem" {
			t.Errorf("CheckMirror(%d) = %+v, want deny %q", m, got, "mirror: unknown ecosystem")
		}
	}
	if got := CheckMirror(MirrorGeneric, nil, nil); got.Allow {
		t.Errorf("CheckMirror(nil request) allowed")
	}
}

// pkt frames lines as git pkt-lines; "0000" and "0001" pass through.
func pkt(lines ...string) []byte {
	var b bytes.Buffer
	for _, l := range lines {
		if l == "0000" || l == "0001" {
			b.WriteString(l)
			continue
		}
		fmt.Fprintf(&b, "%04x%s", len(l)+4, l)
	}
	return b.Bytes()
}

func gz(t *testing.T, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func TestCheckMirrorBody(t *testing.T) {
	upload := &Request{Method: "POST", Path: "/owner/repo.git/git-upload-pack", ContentType: uploadPackType}
	batch := &Request{Method: "POST", Path: "/owner/repo.git/info/lfs/objects/batch", ContentType: lfsType}
	v0 := pkt("want "+sha1Hex+" multi_ack_detailed side-band-64k thin-pack ofs-delta agent=git/2.43.0\n",
		"want "+sha1Hex+"\n", "0000", "have "+sha1Hex+"\n", "done\n")
	big := bytes.Repeat(pkt("have "+sha1Hex+"\n"), 200) // 9 KiB: git gzips it
	bomb := gz(t, make([]byte, 5<<20))
	tests := []struct {
		name   string
		m      Mirror
		r      *Request
		body   []byte
		ok     bool
		reason string
	}{
		{"v0 fetch", MirrorGit, upload, v0, true, ""},
		{"v2 fetch", MirrorGit, upload, pkt("command=fetch", "agent=git/2.43.0", "object-format=sha1", "0001",
			"thin-pack\n", "ofs-delta\n", "want "+sha1Hex+"\n", "have "+sha1Hex+"\n", "done\n", "0000"), true, ""},
		{"v2 ls-refs", MirrorGit, upload, pkt("command=ls-refs\n", "agent=git/2.43.0\n", "0001", "peel\n", "symrefs\n",
			"ref-prefix HEAD\n", "ref-prefix refs/heads/\n", "0000"), true, ""},
		{"sha256 repo", MirrorGit, upload, pkt("want "+sha256Hex+"\n", "0000", "done\n"), true, ""},
		{"large request probe", MirrorGit, upload, []byte("0000"), true, ""},
		{"gzip body", MirrorGit, upload, gz(t, append(append([]byte{}, big...), pkt("done\n")...)), true, ""},
		{"receive-pack command", MirrorGit, upload, pkt(sha1Hex + " " + sha1Hex + " refs/heads/main\x00report-status\n"), false, "git-upload-pack body: unexpected line"},
		{"free text in have", MirrorGit, upload, pkt("have c2VjcmV0LWRhdGEtZXhmaWx0cmF0aW9uISEhISEhISE=\n"), false, "git-upload-pack body: unexpected line"},
		{"unknown command", MirrorGit, upload, pkt("command=push\n"), false, "git-upload-pack body: unexpected line"},
		{"bad length", MirrorGit, upload, []byte("zzzzwant"), false, "git-upload-pack body: bad pkt-line length"},
		{"length past end", MirrorGit, upload, []byte("0032want"), false, "git-upload-pack body: bad pkt-line length"},
		{"truncated", MirrorGit, upload, []byte("00"), false, "git-upload-pack body: truncated pkt-line"},
		{"empty", MirrorGit, upload, nil, false, "git-upload-pack body: empty"},
		{"gzip bomb", MirrorGit, upload, bomb, false, "git-upload-pack body: inflated body over cap"},
		{"bad gzip", MirrorGit, upload, []byte{0x1f, 0x8b, 0, 0}, false, "git-upload-pack body: bad gzip"},
		{"upload-pack over cap", MirrorGit, upload, make([]byte, uploadPackBodyCap+1), false, "git-upload-pack body: over cap"},
		{"lfs download", MirrorGit, batch, []byte(`{"operation":"download","transfers":["basic"],"ref":{"name":"refs/heads/main"},"objects":[{"oid":"` + sha256Hex + `","size":123}],"hash_algo":"sha256"}`), true, ""},
		{"lfs upload", MirrorGit, batch, []byte(`{"operation":"upload","objects":[{"oid":"` + sha256Hex + `","size":123}]}`), false, "git lfs upload: batch operation upload"},
		{"lfs duplicate operation", MirrorGit, batch, []byte(`{"operation":"download","operation":"upload"}`), false, "lfs batch: duplicate key"},
		{"lfs case-variant operation", MirrorGit, batch, []byte(`{"Operation":"upload","operation":"download"}`), false, "lfs batch: ambiguous operation key"},
		{"lfs escaped key", MirrorGit, batch, []byte(`{"operation":"download","operatio\u006e":"upload"}`), false, "lfs batch: duplicate key"},
		{"lfs missing operation", MirrorGit, batch, []byte(`{"objects":[]}`), false, "lfs batch: operation must be download"},
		{"lfs unknown key", MirrorGit, batch, []byte(`{"operation":"download","data":"c2VjcmV0"}`), false, "lfs batch: unexpected key"},
		{"lfs free-text oid", MirrorGit, batch, []byte(`{"operation":"download","objects":[{"oid":"secret","size":1}]}`), false, "lfs batch: bad value of objects"},
		{"lfs trailing data", MirrorGit, batch, []byte(`{"operation":"download"}{"operation":"upload"}`), false, "lfs batch: trailing data"},
		{"lfs not JSON", MirrorGit, batch, []byte(`operation=download`), false, "lfs batch: body is not a JSON object"},
		{"lfs over cap", MirrorGit, batch, make([]byte, lfsBatchBodyCap+1), false, "lfs batch body: over cap"},
		{"not git", MirrorNPM, upload, v0, false, "mirror: no request body allowed here"},
		{"GET", MirrorGit, &Request{Method: "GET", Path: upload.Path}, v0, false, "mirror: no request body allowed here"},
		{"receive-pack path", MirrorGit, &Request{Method: "POST", Path: "/owner/repo.git/git-receive-pack", ContentType: uploadPackType}, v0, false, "mirror: no request body allowed here"},
		{"receive-pack type", MirrorGit, &Request{Method: "POST", Path: upload.Path, ContentType: "application/x-git-receive-pack-request"}, v0, false, "mirror: no request body allowed here"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ok, reason := CheckMirrorBody(tc.m, tc.r, tc.body)
			if ok != tc.ok || reason != tc.reason {
				t.Errorf("CheckMirrorBody = (%v, %q), want (%v, %q)", ok, reason, tc.ok, tc.reason)
			}
		})
	}
}

func TestModulePrefixMatch(t *testing.T) {
	tests := []struct {
		mod, prefix string
		want        bool
	}{
		{"github.com/!burnt!sushi/toml", "github.com/BurntSushi", true},
		{"github.com/!burnt!sushi/toml", "github.com/BurntSushi/toml", true},
		{"github.com/!burnt!sushi", "github.com/BurntSushi/toml", false},
		{"github.com/!burnt!sushix/toml", "github.com/BurntSushi", false},
		{"github.com/burntsushi/toml", "github.com/BurntSushi", false},
		{"golang.org/x/mod", "golang.org", true},
		{"golang.org/x/mod", "", false},
		{"golang.org/x/mod", "golang.org/", false},
	}
	for _, tc := range tests {
		if got := modulePrefixMatch(strings.Split(tc.mod, "/"), tc.prefix); got != tc.want {
			t.Errorf("modulePrefixMatch(%q, %q) = %v, want %v", tc.mod, tc.prefix, got, tc.want)
		}
	}
}

var mirrorTables = []struct {
	m     Mirror
	cases []mirrorCase
}{
	{MirrorPyPI, pypiCases}, {MirrorNPM, npmCases}, {MirrorCrates, cratesCases},
	{MirrorRubyGems, rubygemsCases}, {MirrorMaven, mavenCases}, {MirrorGoProxy, goproxyCases},
	{MirrorApt, aptCases}, {MirrorOCI, ociCases}, {MirrorGit, gitCases},
	{MirrorGeneric, genericCases}, {MirrorGeneric, pathTrickCases},
}

// FuzzCheckMirror checks the invariants that hold for every request: no
// panic; a deny has a reason; nothing but GET/HEAD is allowed except git's
// two POST reads, which always carry a body cap; an allowed request fits
// the URL and query caps and holds no path trick.
func FuzzCheckMirror(f *testing.F) {
	for _, tb := range mirrorTables {
		for _, tc := range tb.cases {
			r := tc.request()
			maxURL, maxQuery := 0, 0
			if tc.opts != nil {
				maxURL, maxQuery = tc.opts.MaxURL, tc.opts.MaxQuery
			}
			f.Add(uint8(tb.m), r.Method, r.Path, r.Query, r.ContentType, r.ContentLength, maxURL, maxQuery, []byte(nil))
		}
	}
	f.Add(uint8(MirrorGit), "POST", "/o/r.git/git-upload-pack", "", uploadPackType, int64(-1), 0, 0, pkt("want "+sha1Hex+"\n", "0000", "done\n"))
	f.Add(uint8(MirrorGit), "POST", "/o/r.git/info/lfs/objects/batch", "", lfsType, int64(-1), 0, 0, []byte(`{"operation":"download"}`))
	f.Fuzz(func(t *testing.T, m uint8, method, path, query, ctype string, clen int64, maxURL, maxQuery int, body []byte) {
		o := &MirrorOptions{MaxURL: maxURL, MaxQuery: maxQuery}
		r := &Request{Method: method, Path: path, Query: query, ContentType: ctype, ContentLength: clen}
		v := CheckMirror(Mirror(m), r, o)
		if v.Allow != (v.Reason == "") {
			t.Fatalf("Allow=%v with reason %q", v.Allow, v.Reason)
		}
		if !v.Allow {
			return
		}
		limit := defaultMirrorMaxURL
		if maxURL > 0 {
			limit = maxURL
		}
		if len(path)+len(query) > limit {
			t.Fatalf("allowed URL of %d bytes over cap %d", len(path)+len(query), limit)
		}
		if len(query) > queryCap(Mirror(m), o) {
			t.Fatalf("allowed query of %d bytes over cap %d", len(query), queryCap(Mirror(m), o))
		}
		switch method {
		case "GET", "HEAD":
			if v.BodyCap != 0 || clen != 0 {
				t.Fatalf("%s allowed with BodyCap %d, ContentLength %d", method, v.BodyCap, clen)
			}
		case "POST":
			if Mirror(m) != MirrorGit || v.BodyCap <= 0 || clen > v.BodyCap ||
				!strings.HasSuffix(path, "/git-upload-pack") && !strings.HasSuffix(path, "/info/lfs/objects/batch") {
				t.Fatalf("POST %s allowed for %s with BodyCap %d", path, Mirror(m), v.BodyCap)
			}
			if len(body) > int(v.BodyCap) {
				body = body[:v.BodyCap]
			}
			ok, reason := CheckMirrorBody(Mirror(m), r, body)
			if ok != (reason == "") {
				t.Fatalf("CheckMirrorBody ok=%v with reason %q", ok, reason)
			}
			if ok && strings.HasSuffix(path, "/batch") && !bytes.Contains(body, []byte("download")) && !bytes.Contains(body, []byte(`\u`)) {
				t.Fatalf("LFS batch allowed without download: %q", body)
			}
		default:
			t.Fatalf("method %q allowed", method)
		}
		lp := strings.ToLower(path)
		for _, bad := range []string{"//", "\\", ";", "%25", "%5c", "%00"} {
			if strings.Contains(lp, bad) {
				t.Fatalf("allowed path %q holds %q", path, bad)
			}
		}
		if Mirror(m) != MirrorNPM && strings.Contains(lp, "%2f") {
			t.Fatalf("allowed path %q holds an escaped slash", path)
		}
		for _, seg := range strings.Split(path, "/") {
			if d, err := url.PathUnescape(seg); err != nil || d == "." || d == ".." {
				t.Fatalf("allowed path %q holds segment %q", path, seg)
			}
		}
	})
}

func BenchmarkCheckMirror(b *testing.B) {
	benches := []struct {
		name string
		m    Mirror
		r    Request
	}{
		{"pypi-wheel", MirrorPyPI, Request{Method: "GET", Path: pyDirs + "/requests-2.32.3-py3-none-any.whl"}},
		{"npm-scoped-escaped", MirrorNPM, Request{Method: "GET", Path: "/@types%2fnode"}},
		{"npm-tarball", MirrorNPM, Request{Method: "GET", Path: "/@types/node/-/node-20.11.0.tgz"}},
		{"crates-index", MirrorCrates, Request{Method: "GET", Path: "/se/rd/serde"}},
		{"maven-jar", MirrorMaven, Request{Method: "GET", Path: commonsLang + ".jar"}},
		{"goproxy-zip", MirrorGoProxy, Request{Method: "GET", Path: "/github.com/!burnt!sushi/toml/@v/v1.3.2.zip"}},
		{"apt-deb", MirrorApt, Request{Method: "GET", Path: "/debian/pool/main/o/openssl/libssl3_3.0.11-1~deb12u2_amd64.deb"}},
		{"oci-blob", MirrorOCI, Request{Method: "GET", Path: "/v2/library/ubuntu/blobs/sha256:" + sha256Hex}},
		{"oci-token", MirrorOCI, Request{Method: "GET", Path: "/token", Query: "scope=repository:library/ubuntu:pull&service=registry.docker.io"}},
		{"git-upload-pack", MirrorGit, Request{Method: "POST", Path: "/owner/repo.git/git-upload-pack", ContentType: uploadPackType, ContentLength: -1}},
		{"deny-push-discovery", MirrorGit, Request{Method: "GET", Path: "/owner/repo.git/info/refs", Query: "service=git-receive-pack"}},
	}
	o := &MirrorOptions{}
	for _, bc := range benches {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				CheckMirror(bc.m, &bc.r, o)
			}
		})
	}
}
