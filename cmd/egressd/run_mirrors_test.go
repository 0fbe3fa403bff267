//go:build linux

package main

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/egressd/egressd/internal/testnet"
)

// Repository managers as company sandboxes meet them: a devpi index, an
// Artifactory PyPI remote and a Nexus npm proxy, each under its product's
// path prefix and each with its own UI and API paths beside the
// repository. The origin counts every request it receives.
const (
	devpiBase = "/root/pypi"
	artBase   = "/artifactory/api/pypi/pypi-remote"
	nexusBase = "/repository/npm-proxy"
	artHash   = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789ab"
)

type prefixRegistries struct {
	pkgs *registries // the wheel and the npm tarball

	mu   sync.Mutex
	seen []string
}

func (p *prefixRegistries) ServeHTTP(w http.ResponseWriter, q *http.Request) {
	host, _, _ := strings.Cut(q.Host, ":")
	p.mu.Lock()
	p.seen = append(p.seen, q.Method+" "+host+q.URL.Path) // decoded: pip sends +f as %2Bf
	p.mu.Unlock()
	sum := sha256.Sum256(p.pkgs.wheel)
	wheel := p.pkgs.wheelName
	page := func(href string) {
		fmt.Fprintf(w, `<html><body><a href="%s#sha256=%x">%s</a></body></html>`, href, sum, wheel)
	}
	switch host + " " + q.URL.Path {
	case "devpi.test " + devpiBase + "/+simple/egtest/":
		page("../../+f/0ab/0123456789abc/" + wheel) // devpi links files relative to the page
	case "devpi.test " + devpiBase + "/+f/0ab/0123456789abc/" + wheel,
		"artifactory.test " + artBase + "/packages/packages/01/23/" + artHash + "/" + wheel:
		w.Write(p.pkgs.wheel)
	case "artifactory.test " + artBase + "/simple/egtest/":
		page("../../packages/packages/01/23/" + artHash + "/" + wheel)
	case "nexus.test " + nexusBase + "/" + npmPkg:
		writePackument(w, p.pkgs.tgz, "https://nexus.test"+nexusBase)
	case "nexus.test " + nexusBase + "/" + npmPkg + "/-/" + npmPkg + "-1.0.0.tgz":
		w.Write(p.pkgs.tgz)
	case "nexus.test " + nexusBase + "/-/ping":
		fmt.Fprint(w, "{}")
	case "nexus.test " + nexusBase + "/-/v1/search":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"objects":[{"package":{"name":%q,"version":"1.0.0","description":"egressd test package","date":"2026-01-01T00:00:00.000Z","links":{},"publisher":{"username":"t"},"maintainers":[{"username":"t"}]}}],"total":1}`, npmPkg)
	default:
		http.NotFound(w, q) // UI, login and REST API paths: never reached
	}
}

// requests returns what the origin received, as "METHOD host/path".
func (p *prefixRegistries) requests() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.seen...)
}

var prefixConfig = `version: 1
resolver:
  upstreams: ["203.0.113.53:53"]
upstream_ca: {CA}
allow:
  - name: devpi
    hosts: [devpi.test]
    ports: [443]
    cidrs: [203.0.113.0/24]
    mirror: pypi
    base_path: ` + devpiBase + `
  - name: artifactory-pypi
    hosts: [artifactory.test]
    ports: [443]
    cidrs: [203.0.113.0/24]
    mirror: pypi
    base_path: ` + artBase + `
  - name: nexus-npm
    hosts: [nexus.test]
    ports: [443]
    cidrs: [203.0.113.0/24]
    mirror: npm
    base_path: ` + nexusBase + `
` + clientsConfig[strings.Index(clientsConfig, "selftest:"):] // the same self-test

// TestRunRealClientsUnderPrefix (issue 23): pip installs from a devpi index
// and from an Artifactory PyPI remote, npm from a Nexus npm proxy, each
// under its product's prefix, inside `egressd run`; twine's upload to each
// PyPI repository and npm publish to Nexus get 403 mirror and never reach
// the origin, and neither do the products' paths outside the prefixes.
// The uploads are real twine's (Debian's package; .ci/run installs it),
// of a real wheel.
func TestRunRealClientsUnderPrefix(t *testing.T) {
	t.Parallel()
	for _, bin := range []string{"npm", "curl", "twine", "/usr/bin/python3"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is needed (.ci/run installs it)", bin)
		}
	}
	if out, err := exec.Command("/usr/bin/python3", "-m", "pip", "--version").CombinedOutput(); err != nil {
		t.Fatalf("pip is needed (.ci/run installs python3-pip): %v\n%s", err, out)
	}
	// The reads and the refused writes each run in a lab of their own, in
	// parallel: one run after another in one lab made this the package's
	// longest test.
	t.Run("reads", func(t *testing.T) {
		t.Parallel()
		prefixReads(t, newPrefixLab(t))
	})
	t.Run("writes", func(t *testing.T) {
		t.Parallel()
		prefixWrites(t, newPrefixLab(t))
	})
}

// prefixLab is a run lab whose origin serves the prefixed registries, with
// a HOME for the clients and a decision log.
type prefixLab struct {
	*runLab
	reg           *prefixRegistries
	home, logFile string
	flags         []string
}

func newPrefixLab(t *testing.T) *prefixLab {
	t.Helper()
	reg := &prefixRegistries{pkgs: newRegistries(t, t.TempDir())}
	origin := []netip.Addr{testnet.OriginAddr4}
	topo := testnet.New(t, testnet.WithOriginHandler(reg), testnet.WithRecords(map[string][]netip.Addr{
		"devpi.test": origin, "artifactory.test": origin, "nexus.test": origin}))
	p := &prefixLab{runLab: labOn(t, topo, prefixConfig), reg: reg}
	p.home = filepath.Join(p.dir, "home")
	os.Mkdir(p.home, 0o777)
	os.Chmod(p.home, 0o777)
	p.env = []string{"HOME=" + p.home}
	p.logFile = filepath.Join(p.dir, "decisions.log")
	if os.Getenv("EGRESSD_BIN") == "" {
		p.flags = []string{"--log", p.logFile} // an older build has no --log
	}
	return p
}

// prefixReads: pip from devpi and Artifactory, npm from Nexus, each under
// its prefix; only reads reach the origin.
func prefixReads(t *testing.T, p *prefixLab) {
	l, reg, flags := p.runLab, p.reg, p.flags
	pip := `/usr/bin/python3 -m pip install --no-cache-dir --disable-pip-version-check --target "$HOME/%s" --index-url %s egtest && test -f "$HOME/%s/egtest/__init__.py"`
	steps := []struct{ name, script string }{
		{"pip install from devpi", fmt.Sprintf(pip, "py-devpi", "https://devpi.test"+devpiBase+"/+simple/", "py-devpi")},
		{"pip install from artifactory", fmt.Sprintf(pip, "py-art", "https://artifactory.test"+artBase+"/simple/", "py-art")},
		{"npm install from nexus", `mkdir -p "$HOME/npmproj" && cd "$HOME/npmproj" && echo '{"name":"proj","version":"1.0.0"}' > package.json && npm install --no-audit --no-fund --no-update-notifier --registry https://nexus.test` + nexusBase + `/ egtest && test -f node_modules/egtest/index.js`},
	}
	for _, s := range steps {
		if out, code := l.run(t, flags, "sh", "-c", s.script); code != 0 {
			t.Errorf("%s inside egressd run: exit %d\n%s", s.name, code, out)
		}
	}
	// What npm asks besides installing: ping and search are reads; audit
	// (on by default in npm install) uploads the dependency tree and is
	// refused, which the run summary explains.
	npmOpts := ` --registry https://nexus.test` + nexusBase + `/ --no-update-notifier`
	if out, code := l.run(t, flags, "sh", "-c", `npm ping`+npmOpts+` && npm search --json`+npmOpts+` egtest`); code != 0 || !strings.Contains(out, `"egtest"`) {
		t.Errorf("npm ping and search through the Nexus prefix: exit %d\n%s", code, out)
	}
	out, code := l.run(t, flags, "sh", "-c", `mkdir -p "$HOME/auditproj" && cd "$HOME/auditproj" && echo '{"name":"proj","version":"1.0.0"}' > package.json && npm install --no-fund`+npmOpts+` egtest && test -f node_modules/egtest/index.js`)
	if code != 0 || !strings.Contains(out, "npm audit was refused (1)") || !strings.Contains(out, "audit=false") {
		t.Errorf("npm install with audit on: exit %d, want 0 and the summary naming the refused audit\n%s", code, out)
	}
	reads := reg.requests()
	for _, want := range []string{
		"GET devpi.test" + devpiBase + "/+f/0ab/0123456789abc/" + reg.pkgs.wheelName,
		"GET artifactory.test" + artBase + "/packages/packages/01/23/" + artHash + "/" + reg.pkgs.wheelName,
		"GET nexus.test" + nexusBase + "/" + npmPkg + "/-/" + npmPkg + "-1.0.0.tgz",
	} {
		if !strings.Contains(strings.Join(reads, "\n"), want) {
			t.Errorf("the origin never served %q: %v", want, reads)
		}
	}
	for _, r := range reads {
		if !strings.HasPrefix(r, "GET ") {
			t.Errorf("a write reached the origin during the reads: %s", r)
		}
	}
}

// prefixWrites: twine's uploads, npm publish and the products' paths
// outside their prefixes get 403 mirror, and none reaches the origin.
func prefixWrites(t *testing.T, p *prefixLab) {
	l, reg, flags, logFile := p.runLab, p.reg, p.flags, p.logFile
	// twine upload: the real client, a real wheel, the user's credentials
	// (a multipart POST of the file and its metadata to the repository).
	wheel := filepath.Join(p.home, reg.pkgs.wheelName)
	if err := os.WriteFile(wheel, reg.pkgs.wheel, 0o644); err != nil {
		t.Fatal(err)
	}
	twine := `twine upload --non-interactive --disable-progress-bar -u bob -p secret --repository-url %s "$HOME/` + reg.pkgs.wheelName + `"`
	writes := []struct{ name, script, host, method string }{
		{"twine upload to devpi", fmt.Sprintf(twine, "https://devpi.test"+devpiBase+"/"), "devpi.test", "POST"},
		{"twine upload to artifactory", fmt.Sprintf(twine, "https://artifactory.test"+artBase), "artifactory.test", "POST"},
		{"npm publish to nexus", `mkdir -p "$HOME/pub" && cd "$HOME/pub" && echo '{"name":"egtest","version":"9.9.9"}' > package.json && echo '//nexus.test` + nexusBase + `/:_authToken=egressd-test-fake' > .npmrc && npm publish --registry https://nexus.test` + nexusBase + `/ --no-update-notifier`, "nexus.test", "PUT"},
		{"devpi login (outside the prefix)", `curl -sS -o /dev/null -w '%{http_code}\n' -X POST -d '{"user":"bob","password":"secret"}' https://devpi.test/+login`, "devpi.test", "POST"},
		{"nexus REST API (outside the prefix)", `curl -sS -o /dev/null -w '%{http_code}\n' https://nexus.test/service/rest/v1/repositories`, "nexus.test", "GET"},
	}
	for _, w := range writes {
		before := len(reg.requests())
		out, code := l.run(t, flags, "sh", "-c", w.script)
		t.Logf("%s: exit %d\n%s", w.name, code, out)
		if strings.HasPrefix(w.script, "twine") || strings.HasPrefix(w.script, "curl") {
			if !strings.Contains(out, "403") {
				t.Errorf("%s: want 403\n%s", w.name, out)
			}
		} else if code == 0 {
			t.Errorf("%s: exit 0, want a refusal", w.name)
		}
		b, _ := os.ReadFile(logFile)
		if !deniedMirror(string(b), w.host, w.method) {
			t.Errorf("%s: no 403 mirror decision for %s %s in the log", w.name, w.method, w.host)
		}
		for _, got := range reg.requests()[before:] {
			// npm publish reads the packument first; that read may pass.
			if !strings.HasPrefix(got, "GET nexus.test"+nexusBase+"/") || w.method == "GET" {
				t.Errorf("%s reached the registry: %s", w.name, got)
			}
		}
	}
}
