//go:build linux

package main

import (
	"io/fs"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/egressd/egressd/internal/testnet"
)

// runInjectConfig: the pypi registry of TestRunRealClients, its rule
// adding the token the index requires ({INJECT}).
const runInjectConfig = `version: 1
resolver:
  upstreams: ["203.0.113.53:53"]
upstream_ca: {CA}
allow:
  - name: pypi
    hosts: [pypi.test]
    ports: [443]
    cidrs: [203.0.113.0/24]
    mirror: pypi
{INJECT}selftest:
  timeout: 3s
  tcp: [203.0.113.100:8080]
  udp: [203.0.113.100:123]
  ipv6: ["[2001:db8:2::100]:8080"]
  resolvers: [203.0.113.53:53]
  metadata: [169.254.169.254]
  canary_name: canary.test
  canary_url: http://canary.test/
`

// TestRunInjectPipInstall is issue 16's must-show inside `egressd run`:
// pip, in a --clean-env sandbox, installs from an index that answers 401
// without "Bearer <token>"; egressd adds the token from a root-only file.
// The token is in the host environment that starts egressd, yet not in
// the sandbox's env, the secret file is unreadable from the sandbox, and
// the token is in none of: the run log, egressd's and pip's output, the
// report, the state dir. Negative control: the same run without the
// inject block fails with the index's 401.
func TestRunInjectPipInstall(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("/usr/bin/python3"); err != nil {
		t.Fatal("/usr/bin/python3 is needed")
	}
	const token = "rtok-run-7d3f91c04ab2e658"
	reg := newRegistries(t, t.TempDir())
	var unauthorized, authorized atomic.Int64
	index := http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		if q.Header.Get("Authorization") != "Bearer "+token {
			unauthorized.Add(1)
			http.Error(w, "token required", http.StatusUnauthorized)
			return
		}
		authorized.Add(1)
		reg.ServeHTTP(w, q)
	})
	topo := testnet.New(t, testnet.WithOriginHandler(index),
		testnet.WithRecords(map[string][]netip.Addr{"pypi.test": {testnet.OriginAddr4}}))
	secretDir := t.TempDir() // 0700, root's: out of the sandbox user's reach
	secret := filepath.Join(secretDir, "registry-token")
	if err := os.WriteFile(secret, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	install := func(inject string) (l *runLab, logFile, out string, code int) {
		l = labOn(t, topo, strings.ReplaceAll(runInjectConfig, "{INJECT}", inject))
		home := filepath.Join(l.dir, "home")
		os.Mkdir(home, 0o777)
		os.Chmod(home, 0o777)
		// REGISTRY_TOKEN is in egressd's environment: --clean-env must drop it
		l.env = []string{"HOME=" + home, "REGISTRY_TOKEN=" + token}
		logFile = filepath.Join(l.dir, "run.jsonl")
		script := `env; echo "REGISTRY_TOKEN=[$REGISTRY_TOKEN]"; cat ` + secret + ` 2>&1; ` +
			`/usr/bin/python3 -m pip install --isolated --no-input --no-cache-dir --disable-pip-version-check --retries 0 ` +
			`--target "$HOME/py" --index-url https://pypi.test/simple/ egtest && test -f "$HOME/py/egtest/__init__.py"`
		out, code = l.run(t, []string{"--clean-env", "--log", logFile}, "sh", "-c", script)
		return l, logFile, out, code
	}

	// Negative control: no inject block, no token, the index says 401.
	_, _, out, code := install("")
	if code == 0 || unauthorized.Load() == 0 || authorized.Load() != 0 {
		t.Fatalf("without inject: exit %d, %d unauthorized and %d authorized requests; want a failed install on 401\n%s",
			code, unauthorized.Load(), authorized.Load(), out)
	}

	injectRule := "    inject: {header: Authorization, prefix: \"Bearer \", value_from: \"file:" + secret + "\"}\n"
	l, logFile, out, code := install(injectRule)
	if code != 0 || authorized.Load() == 0 {
		t.Fatalf("with inject: exit %d, %d authorized requests\n%s", code, authorized.Load(), out)
	}
	if !strings.Contains(out, "REGISTRY_TOKEN=[]") || strings.Contains(out, "REGISTRY_TOKEN="+token) {
		t.Errorf("the sandbox's environment holds the token:\n%s", out)
	}
	// The secret file is hidden in CMD's mount namespace (an empty file
	// there), besides being unreadable by the sandbox's user.
	if strings.Contains(out, token) {
		t.Errorf("the sandbox read the secret file:\n%s", out)
	}
	runLog := readFileT(t, logFile)
	if !strings.Contains(runLog, `"rule":"pypi","decision":"allow"`) {
		t.Errorf("the run log holds no decision under the pypi rule:\n%s", runLog)
	}
	rc, report, rerr := runCmd("report", "--config", l.cfg, "--log", logFile, "--state-dir", l.state)
	if rc != exitOK || !strings.Contains(report, "| pypi | all | pypi.test |") || !strings.Contains(report, "Authorization: Bearer <"+secret+">") {
		t.Errorf("report: exit %d\n%s%s", rc, report, rerr)
	}
	where := map[string]string{"egressd's and pip's output": out, "run log": runLog, "report": report + rerr}
	filepath.WalkDir(l.state, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			where["state dir "+p] = readFileT(t, p)
		}
		return nil
	})
	if len(where) < 4 {
		t.Errorf("the state dir %s holds no file (no self-test history?)", l.state)
	}
	for name, s := range where {
		if strings.Contains(s, token) || strings.Contains(s, token[5:]) {
			t.Errorf("the token appears in the %s", name)
		}
	}
}
