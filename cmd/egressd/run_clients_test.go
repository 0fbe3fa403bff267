//go:build linux

package main

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/cgi"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/egressd/egressd/internal/testnet"
)

// registries is a fake PyPI simple index, npm registry, Go module proxy and
// git smart-HTTP server on one origin, told apart by Host; it records
// every request it receives.
type registries struct {
	mu   sync.Mutex
	seen []string

	wheelName string
	wheel     []byte
	tgz       []byte
	modZip    []byte
	gitRoot   string
}

func (r *registries) saw(method, host, path string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, method+" "+host+path)
}

// writes lists the requests the registries received that were not reads.
func (r *registries) writes() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var w []string
	for _, s := range r.seen {
		if !strings.HasPrefix(s, "GET ") && !strings.HasPrefix(s, "HEAD ") && !strings.Contains(s, "git-upload-pack") {
			w = append(w, s)
		}
	}
	return w
}

const (
	pyDir = "/packages/ab/cd/0123456789abcdef0123456789abcdef0123456789abcdef0123456789ab/"
	goMod = "example.test/egmod"
	goVer = "v0.1.0"
	// goCommit is a commit hash of goMod, as `go get m@<hash>` sends it.
	goCommit = "0123456789ab"
	npmPkg   = "egtest"
)

func (r *registries) ServeHTTP(w http.ResponseWriter, q *http.Request) {
	host, _, _ := strings.Cut(q.Host, ":")
	r.saw(q.Method, host, q.URL.RequestURI())
	switch host {
	case "pypi.test":
		switch q.URL.Path {
		case "/simple/egtest/":
			sum := sha256.Sum256(r.wheel)
			fmt.Fprintf(w, `<html><body><a href="https://pypi.test%s%s#sha256=%x">%s</a></body></html>`, pyDir, r.wheelName, sum, r.wheelName)
		case pyDir + r.wheelName:
			w.Write(r.wheel)
		default:
			http.NotFound(w, q)
		}
	case "npm.test":
		switch q.URL.Path {
		case "/" + npmPkg:
			writePackument(w, r.tgz, "https://npm.test")
		case "/" + npmPkg + "/-/" + npmPkg + "-1.0.0.tgz":
			w.Write(r.tgz)
		default:
			http.NotFound(w, q)
		}
	case "goproxy.test":
		base := "/" + goMod + "/@v/"
		switch q.URL.Path {
		case base + "list":
			fmt.Fprintln(w, goVer)
		case base + goVer + ".info", base + goCommit + ".info": // go get m@<commit> resolves the hash first
			fmt.Fprintf(w, `{"Version":%q,"Time":"2026-01-01T00:00:00Z"}`, goVer)
		case base + goVer + ".mod":
			fmt.Fprintf(w, "module %s\n\ngo 1.21\n", goMod)
		case base + goVer + ".zip":
			w.Write(r.modZip)
		default:
			http.NotFound(w, q)
		}
	case "git.test":
		h := &cgi.Handler{Path: "/usr/lib/git-core/git-http-backend", Env: []string{"GIT_PROJECT_ROOT=" + r.gitRoot, "GIT_HTTP_EXPORT_ALL=1"}}
		h.ServeHTTP(w, q)
	default:
		http.NotFound(w, q)
	}
}

// writePackument answers with npmPkg's packument: one version, 1.0.0, whose
// tarball (tgz) the registry at registry serves.
func writePackument(w http.ResponseWriter, tgz []byte, registry string) {
	s1 := sha1.Sum(tgz)
	s512 := sha512.Sum512(tgz)
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"name": npmPkg, "dist-tags": map[string]string{"latest": "1.0.0"},
		"versions": map[string]any{"1.0.0": map[string]any{"name": npmPkg, "version": "1.0.0",
			"dist": map[string]string{"tarball": registry + "/" + npmPkg + "/-/" + npmPkg + "-1.0.0.tgz",
				"shasum": hex.EncodeToString(s1[:]), "integrity": "sha512-" + base64.StdEncoding.EncodeToString(s512[:])}}},
	})
}

func zipOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var b bytes.Buffer
	z := zip.NewWriter(&b)
	for name, body := range files {
		f, _ := z.Create(name)
		f.Write([]byte(body))
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// newRegistries builds the packages: a wheel, an npm tarball, a module zip
// and a bare git repository with one commit.
func newRegistries(t *testing.T, dir string) *registries {
	t.Helper()
	r := &registries{wheelName: "egtest-0.1-py3-none-any.whl"}
	files := map[string]string{
		"egtest/__init__.py":            "X = 1\n",
		"egtest-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: egtest\nVersion: 0.1\n",
		"egtest-0.1.dist-info/WHEEL":    "Wheel-Version: 1.0\nGenerator: egressd-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
	}
	var record strings.Builder
	for name, body := range files {
		sum := sha256.Sum256([]byte(body))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", name, base64.RawURLEncoding.EncodeToString(sum[:]), len(body))
	}
	record.WriteString("egtest-0.1.dist-info/RECORD,,\n")
	files["egtest-0.1.dist-info/RECORD"] = record.String()
	r.wheel = zipOf(t, files)

	var tb bytes.Buffer
	gz := gzip.NewWriter(&tb)
	tw := tar.NewWriter(gz)
	pj := fmt.Sprintf(`{"name":%q,"version":"1.0.0","main":"index.js"}`, npmPkg)
	for name, body := range map[string]string{"package/package.json": pj, "package/index.js": "module.exports = 1;\n"} {
		tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg})
		tw.Write([]byte(body))
	}
	tw.Close()
	gz.Close()
	r.tgz = tb.Bytes()

	prefix := goMod + "@" + goVer + "/"
	r.modZip = zipOf(t, map[string]string{prefix + "go.mod": "module " + goMod + "\n\ngo 1.21\n", prefix + "eg.go": "package egmod\n\nconst X = 1\n"})

	r.gitRoot = filepath.Join(dir, "git")
	work := filepath.Join(dir, "gitwork")
	for _, args := range [][]string{
		{"init", "-q", "-b", "main", work},
		{"-C", work, "-c", "user.name=t", "-c", "user.email=t@example.test", "commit", "-q", "--allow-empty", "-m", "one"},
		{"clone", "-q", "--bare", work, filepath.Join(r.gitRoot, "repo.git")},
	} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return r
}

const clientsConfig = `version: 1
resolver:
  upstreams: ["203.0.113.53:53"]
upstream_ca: {CA}
allow:
  - name: pypi
    hosts: [pypi.test]
    ports: [443]
    cidrs: [203.0.113.0/24]
    mirror: pypi
  - name: npm
    hosts: [npm.test]
    ports: [443]
    cidrs: [203.0.113.0/24]
    mirror: npm
  - name: goproxy
    hosts: [goproxy.test]
    ports: [443]
    cidrs: [203.0.113.0/24]
    mirror: goproxy
  - name: git
    hosts: [git.test]
    ports: [443]
    cidrs: [203.0.113.0/24]
    mirror: git
selftest:
  timeout: 3s
  tcp: [203.0.113.100:8080]
  udp: [203.0.113.100:123]
  ipv6: ["[2001:db8:2::100]:8080"]
  resolvers: [203.0.113.53:53]
  metadata: [169.254.169.254]
  canary_name: canary.test
  canary_url: http://canary.test/
`

// TestRunRealClients: pip, npm, go and git, unmodified, inside `egressd
// run`, against registries behind a private CA (upstream_ca): every
// download succeeds; every publish gets 403 mirror and never reaches the
// registry. twine is not installed here: its upload is sent as the same
// multipart POST to /legacy/ with curl.
func TestRunRealClients(t *testing.T) {
	t.Parallel()
	for _, bin := range []string{"npm", "git", "go", "/usr/bin/python3"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is needed", bin)
		}
	}
	type step struct{ name, script string }
	type publish struct{ name, script, host, method string }
	goGet := func(gopath, version string) string {
		return `export GOPROXY=https://goproxy.test GOSUMDB=off GOTOOLCHAIN=local GOPATH="$HOME/` + gopath + `" GOCACHE="$HOME/` + gopath + `-cache" GOFLAGS=-modcacherw && go mod download -json ` + goMod + `@` + version + ` && test -f "$HOME/` + gopath + `/pkg/mod/` + goMod + `@` + goVer + `/eg.go"`
	}
	// Each client runs in a lab of its own, in parallel: one run after
	// another in one lab made this the package's longest test.
	for _, c := range []struct {
		name      string
		downloads []step
		publishes []publish // after the downloads, in the same lab
	}{
		{name: "pip",
			downloads: []step{{"pip install", `/usr/bin/python3 -m pip install --no-cache-dir --disable-pip-version-check --target "$HOME/py" --index-url https://pypi.test/simple/ egtest && test -f "$HOME/py/egtest/__init__.py"`}},
			publishes: []publish{{"pypi upload (twine's POST, sent with curl)", `printf 'x' > "$HOME/f.whl"; curl -sS -o /dev/null -D - -F ':action=file_upload' -F 'protocol_version=1' -F 'name=egtest' -F 'version=0.2' -F 'content=@'"$HOME"'/f.whl' https://pypi.test/legacy/`, "pypi.test", "POST"}}},
		{name: "npm",
			downloads: []step{{"npm install", `mkdir -p "$HOME/npmproj" && cd "$HOME/npmproj" && echo '{"name":"proj","version":"1.0.0"}' > package.json && npm install --no-audit --no-fund --no-update-notifier --registry https://npm.test/ egtest && test -f node_modules/egtest/index.js`}},
			publishes: []publish{{"npm publish", `mkdir -p "$HOME/pub" && cd "$HOME/pub" && echo '{"name":"egtest","version":"9.9.9"}' > package.json && echo '//npm.test/:_authToken=egressd-test-fake' > .npmrc && npm publish --registry https://npm.test/ --no-update-notifier`, "npm.test", "PUT"}}},
		{name: "go",
			downloads: []step{{"go mod download", goGet("go", goVer)}, {"go mod download @commit", goGet("go2", goCommit)}}},
		{name: "git",
			downloads: []step{{"git clone", `git clone -q https://git.test/repo.git "$HOME/repo" && git -C "$HOME/repo" log --oneline | grep -q one`}},
			publishes: []publish{{"git push", `cd "$HOME/repo" && git -c user.name=t -c user.email=t@example.test commit -q --allow-empty -m two && git push -q origin HEAD:main`, "git.test", "GET"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			reg := newRegistries(t, t.TempDir())
			origin := []netip.Addr{testnet.OriginAddr4}
			topo := testnet.New(t, testnet.WithOriginHandler(reg), testnet.WithRecords(map[string][]netip.Addr{
				"pypi.test": origin, "npm.test": origin, "goproxy.test": origin, "git.test": origin}))
			l := labOn(t, topo, clientsConfig)
			home := filepath.Join(l.dir, "home")
			os.Mkdir(home, 0o777)
			os.Chmod(home, 0o777)
			l.env = []string{"HOME=" + home}
			logFile := filepath.Join(l.dir, "decisions.log")
			flags := []string{"--log", logFile}
			if os.Getenv("EGRESSD_BIN") != "" {
				flags = nil // an older build: no --log
			}
			for _, s := range c.downloads {
				out, code := l.run(t, flags, "sh", "-c", s.script)
				if code != 0 {
					t.Errorf("%s inside egressd run: exit %d\n%s", s.name, code, out)
				}
			}
			if w := reg.writes(); len(w) > 0 {
				t.Fatalf("the registries saw writes during the downloads: %v", w)
			}
			for _, p := range c.publishes {
				out, code := l.run(t, flags, "sh", "-c", p.script)
				t.Logf("%s: exit %d\n%s", p.name, code, out)
				if p.host == "pypi.test" && (!strings.Contains(out, "403") || !strings.Contains(out, "X-Egressd-Deny: mirror")) {
					t.Errorf("%s: want 403 mirror\n%s", p.name, out)
				}
				b, _ := os.ReadFile(logFile)
				if !deniedMirror(string(b), p.host, p.method) {
					t.Errorf("%s: no 403 mirror decision for %s %s in the log\n%s", p.name, p.method, p.host, out)
				}
			}
			if w := reg.writes(); len(w) > 0 {
				t.Errorf("a publish reached the registry: %v", w)
			}
			for _, s := range reg.seen {
				if strings.Contains(s, "receive-pack") {
					t.Errorf("git push reached the server: %s", s)
				}
			}
		})
	}
}

// deniedMirror reports whether the decision log holds a mirror denial of
// method on host.
func deniedMirror(log, host, method string) bool {
	for _, line := range strings.Split(log, "\n") {
		var d struct{ Msg, Host, Method, Decision, Reason string }
		if json.Unmarshal([]byte(line), &d) == nil && d.Msg == "decision" && d.Host == host && d.Method == method && d.Decision == "deny" && d.Reason == "mirror" {
			return true
		}
	}
	return false
}
