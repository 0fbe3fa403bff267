package main

import (
	"os"
	"path/filepath"
	"testing"
)

// productsConfig holds the rules docs/MIRRORS.md tells users to write for
// each repository manager.
const productsConfig = `version: 1
allow:
  - name: artifactory-pypi
    hosts: [artifactory.example.com]
    mirror: pypi
    base_path: /artifactory/api/pypi/pypi-remote
  - name: artifactory-npm
    hosts: [artifactory.example.com]
    mirror: npm
    base_path: /artifactory/api/npm/npm-remote
  - name: artifactory-go
    hosts: [artifactory.example.com]
    mirror: goproxy
    base_path: /artifactory/api/go/go-remote
  - name: artifactory-maven
    hosts: [artifactory.example.com]
    mirror: maven
    base_path: /artifactory/maven-remote
  - name: nexus-npm
    hosts: [nexus.example.com]
    mirror: npm
    base_path: /repository/npm-proxy
  - name: nexus-pypi
    hosts: [nexus.example.com]
    mirror: pypi
    base_path: /repository/pypi-proxy
  - name: nexus-maven
    hosts: [nexus.example.com]
    mirror: maven
    base_path: /repository/maven-central
  - name: nexus-apt
    hosts: [nexus.example.com]
    mirror: apt
    base_path: /repository/debian
  - name: devpi
    hosts: [devpi.example.com]
    mirror: pypi
    base_path: /root/pypi
  - name: gitlab-pypi
    hosts: [gitlab.example.com]
    mirror: pypi
    base_path: /api/v4/projects/42/packages/pypi
  - name: gitlab-npm
    hosts: [gitlab.example.com]
    mirror: npm
    base_path: /api/v4/groups/7/-/packages/npm
  - name: verdaccio
    hosts: [verdaccio.example.com]
    mirror: npm
  - name: athens
    hosts: [athens.example.com]
    mirror: goproxy
`

// TestCheckMirrorProducts: egressd check against each product's layout:
// reads allowed, every write form the product has and its non-repository
// paths denied (issue 23).
func TestCheckMirrorProducts(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "egressd.yaml")
	if err := os.WriteFile(cfg, []byte(productsConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	const sha = "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"
	products := map[string][]struct {
		method, url string
		allow       bool
	}{
		"artifactory": {
			{"GET", "https://artifactory.example.com/artifactory/api/pypi/pypi-remote/simple/requests/", true},
			{"GET", "https://artifactory.example.com/artifactory/api/pypi/pypi-remote/packages/packages/d1/61/" + sha[:60] + "/requests-2.32.3-py3-none-any.whl", true},
			{"GET", "https://artifactory.example.com/artifactory/api/npm/npm-remote/express", true},
			{"GET", "https://artifactory.example.com/artifactory/api/npm/npm-remote/express/-/express-4.21.2.tgz", true},
			{"GET", "https://artifactory.example.com/artifactory/api/go/go-remote/golang.org/x/mod/@v/v0.20.0.zip", true},
			{"GET", "https://artifactory.example.com/artifactory/maven-remote/org/slf4j/slf4j-api/2.0.9/slf4j-api-2.0.9.jar", true},
			{"POST", "https://artifactory.example.com/artifactory/api/pypi/pypi-remote", false},
			{"PUT", "https://artifactory.example.com/artifactory/api/npm/npm-remote/mypkg", false},
			{"PUT", "https://artifactory.example.com/artifactory/api/npm/npm-remote/-/user/org.couchdb.user:bob", false},
			{"GET", "https://artifactory.example.com/artifactory/api/npm/npm-remote/auth", false},
			{"PUT", "https://artifactory.example.com/artifactory/maven-remote/com/acme/app/1.0/app-1.0.jar", false},
			{"PUT", "https://artifactory.example.com/artifactory/libs-release-local/com/acme/app/1.0/app-1.0.jar", false},
			{"GET", "https://artifactory.example.com/ui/login", false},
			{"POST", "https://artifactory.example.com/artifactory/api/security/token", false},
			{"GET", "https://artifactory.example.com/artifactory/api/repositories", false},
		},
		"nexus": {
			{"GET", "https://nexus.example.com/repository/npm-proxy/express", true},
			{"GET", "https://nexus.example.com/repository/npm-proxy/@types%2fnode", true},
			{"GET", "https://nexus.example.com/repository/npm-proxy/express/-/express-4.21.2.tgz", true},
			{"GET", "https://nexus.example.com/repository/pypi-proxy/simple/requests/", true},
			{"GET", "https://nexus.example.com/repository/pypi-proxy/packages/requests/2.32.3/requests-2.32.3.tar.gz", true},
			{"GET", "https://nexus.example.com/repository/maven-central/org/slf4j/slf4j-api/2.0.9/slf4j-api-2.0.9.pom", true},
			{"GET", "https://nexus.example.com/repository/debian/dists/bookworm/InRelease", true},
			{"PUT", "https://nexus.example.com/repository/npm-proxy/mypkg", false},
			{"PUT", "https://nexus.example.com/repository/npm-proxy/-/user/org.couchdb.user:bob", false},
			{"POST", "https://nexus.example.com/repository/pypi-proxy/", false},
			{"PUT", "https://nexus.example.com/repository/maven-central/com/acme/app/1.0/app-1.0.jar", false},
			{"POST", "https://nexus.example.com/repository/debian/", false},
			{"GET", "https://nexus.example.com/service/rest/v1/repositories", false},
			{"POST", "https://nexus.example.com/service/rapture/session", false},
			{"GET", "https://nexus.example.com/repository/maven-releases/org/a/b/1.0/b-1.0.jar", false},
		},
		"devpi": {
			{"GET", "https://devpi.example.com/root/pypi/+simple/requests/", true},
			{"GET", "https://devpi.example.com/root/pypi/+f/d16/1d71145abeec5/requests-2.32.3-py3-none-any.whl", true},
			{"POST", "https://devpi.example.com/root/pypi/", false},
			{"POST", "https://devpi.example.com/+login", false},
			{"PUT", "https://devpi.example.com/root/newindex", false},
			{"GET", "https://devpi.example.com/+api", false},
		},
		"gitlab": {
			{"GET", "https://gitlab.example.com/api/v4/projects/42/packages/pypi/simple/requests", true},
			{"GET", "https://gitlab.example.com/api/v4/projects/42/packages/pypi/files/" + sha + "/requests-2.32.3.tar.gz", true},
			{"GET", "https://gitlab.example.com/api/v4/groups/7/-/packages/npm/@acme%2flib", true},
			{"GET", "https://gitlab.example.com/api/v4/groups/7/-/packages/npm/@acme/lib/-/@acme/lib-1.0.0.tgz", true},
			{"POST", "https://gitlab.example.com/api/v4/projects/42/packages/pypi", false},
			{"PUT", "https://gitlab.example.com/api/v4/groups/7/-/packages/npm/@acme%2flib", false},
			{"GET", "https://gitlab.example.com/api/v4/projects/42/repository/files/secrets", false},
			{"GET", "https://gitlab.example.com/users/sign_in", false},
		},
		"verdaccio": {
			{"GET", "https://verdaccio.example.com/express", true},
			{"GET", "https://verdaccio.example.com/-/ping", true},
			{"PUT", "https://verdaccio.example.com/mypkg", false},
			{"PUT", "https://verdaccio.example.com/-/user/org.couchdb.user:bob", false},
			{"GET", "https://verdaccio.example.com/-/verdaccio/data/packages", false},
		},
		"athens": {
			{"GET", "https://athens.example.com/github.com/pkg/errors/@v/list", true},
			{"GET", "https://athens.example.com/github.com/pkg/errors/@v/614d223910a1.info", true},
			{"GET", "https://athens.example.com/catalog", false},
			{"PUT", "https://athens.example.com/example.com/m/@v/v1.0.0.zip", false},
		},
	}
	for product, cases := range products {
		for _, tc := range cases {
			code, out, errOut := runCmd("check", "--config", cfg, "--method", tc.method, tc.url)
			want := exitDeny
			if tc.allow {
				want = exitOK
			}
			if code != want {
				t.Errorf("%s: check --method %s %s: exit %d, want %d\n%s%s", product, tc.method, tc.url, code, want, out, errOut)
			}
		}
	}
}
