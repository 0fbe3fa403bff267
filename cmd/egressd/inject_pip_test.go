package main

import (
	"archive/zip"
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/miekg/dns"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy"
)

// demoWheel is a minimal pure-Python wheel, built in memory.
func demoWheel(t *testing.T) []byte {
	t.Helper()
	var b bytes.Buffer
	z := zip.NewWriter(&b)
	files := []struct{ name, body string }{
		{"egressd_demo/__init__.py", "VALUE = 42\n"},
		{"egressd_demo-0.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: egressd-demo\nVersion: 0.1\n"},
		{"egressd_demo-0.1.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: egressd-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
		{"egressd_demo-0.1.dist-info/RECORD", "egressd_demo/__init__.py,,\negressd_demo-0.1.dist-info/METADATA,,\negressd_demo-0.1.dist-info/WHEEL,,\negressd_demo-0.1.dist-info/RECORD,,\n"},
	}
	for _, f := range files {
		w, err := z.Create(f.name)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, f.body)
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// privateIndex is a PEP 503 index on 127.0.0.1 that answers only requests
// carrying "Bearer "+token, and records every Authorization it saw.
func privateIndex(t *testing.T, token string, seen *[]string) string {
	t.Helper()
	whl := demoWheel(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ErrorLog: log.New(io.Discard, "", 0), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		*seen = append(*seen, r.Header.Get("Authorization"))
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "token required", http.StatusUnauthorized)
			return
		}
		switch r.URL.Path {
		case "/simple/egressd-demo/":
			fmt.Fprint(w, `<html><body><a href="/files/egressd_demo-0.1-py3-none-any.whl">egressd_demo-0.1-py3-none-any.whl</a></body></html>`)
		case "/files/egressd_demo-0.1-py3-none-any.whl":
			w.Write(whl)
		default:
			http.NotFound(w, r)
		}
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String()
}

// loopbackDNS answers every A question with 127.0.0.1.
func loopbackDNS(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if q := r.Question[0]; q.Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(127, 0, 0, 1)})
		}
		w.WriteMsg(m)
	})}
	go srv.ActivateAndServe()
	t.Cleanup(func() { srv.Shutdown() })
	return pc.LocalAddr().String()
}

// TestInjectPipInstall is the must-show of credential injection: pip, in
// an environment with no token, installs from a private index that
// requires one, through egressd, which adds the token from a file; the
// token is in no log line, no audit record, no report and none of pip's
// output. Negative control: the same install as an identity the rule does
// not name fails.
func TestInjectPipInstall(t *testing.T) {
	t.Parallel()
	pip, err := exec.LookPath("pip3")
	if err != nil {
		t.Skip("pip3 not installed")
	}
	const token = "rtok-5c1e8a9d2b7f4e60"
	dir := t.TempDir()
	tokFile := filepath.Join(dir, "registry-token")
	if err := os.WriteFile(tokFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var seen []string
	_, port, _ := net.SplitHostPort(privateIndex(t, token, &seen))
	cfgFile := filepath.Join(dir, "egressd.yaml")
	cfg := fmt.Sprintf(`version: 1
resolver:
  upstreams: ["%s"]
identities:
  - {name: build, user: build, token_sha256: 2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881} # pip's proxy password: "x"
  - {name: research, user: research, token_sha256: 2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881}
allow:
  - name: private-index
    hosts: [pypi.internal.example]
    cidrs: [127.0.0.0/8]
    ports: ["%s"]
    identities: [build]
    inject: {prefix: "Bearer ", value_from: "file:%s", plain_http: true}
`, loopbackDNS(t), port, tokFile)
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := policy.Load(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(dir, "decisions.jsonl")
	auditFile := filepath.Join(dir, "audit.log")
	lf, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	sink, err := audit.Open(auditFile)
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(sink.Handler(slog.NewJSONHandler(lf, nil)))
	px := proxy.New(p, proxy.Config{Logger: logger, Control: func(_, addr string, _ syscall.RawConn) error {
		if ap, err := netip.ParseAddrPort(addr); err != nil || !ap.Addr().IsLoopback() {
			return fmt.Errorf("test dials loopback only, not %s", addr)
		}
		return nil
	}})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go px.Serve(l)
	install := func(user string) (string, error) {
		target := filepath.Join(dir, "site-"+user)
		cmd := exec.Command(pip, "install", "--isolated", "--no-deps", "--no-cache-dir", "--disable-pip-version-check",
			"--retries", "0", "--timeout", "10", "--target", target,
			"--index-url", "http://pypi.internal.example:"+port+"/simple/", "--trusted-host", "pypi.internal.example:"+port,
			"--proxy", "http://"+user+":x@"+l.Addr().String(), "egressd-demo")
		// the sandbox's environment: no token, no pip configuration
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "PIP_CONFIG_FILE=/dev/null", "PYENV_VERSION=" + os.Getenv("PYENV_VERSION")}
		out, err := cmd.CombinedOutput()
		if err == nil {
			if _, serr := os.Stat(filepath.Join(target, "egressd_demo", "__init__.py")); serr != nil {
				err = serr
			}
		}
		return string(out), err
	}
	out, err := install("build")
	if err != nil {
		t.Fatalf("pip install as build failed: %v\n%s", err, out)
	}
	out2, err := install("research")
	if err == nil {
		t.Errorf("pip install as research succeeded: the rule names build only\n%s", out2)
	}
	px.Shutdown(context.Background())
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	if len(seen) == 0 {
		t.Fatal("the index saw no request")
	}
	for _, a := range seen {
		if a != "Bearer "+token {
			t.Errorf("the index saw Authorization %q; want only egressd's credential", a)
		}
	}
	code, report, _ := runCmd("report", "--config", cfgFile, "--log", logFile, "--state-dir", dir)
	if code != exitOK || !strings.Contains(report, "private-index") {
		t.Errorf("report: exit %d\n%s", code, report)
	}
	for name, s := range map[string]string{"pip output": out + out2, "report": report, "decision log": readFileT(t, logFile), "audit log": readFileT(t, auditFile)} {
		if strings.Contains(s, token) || strings.Contains(s, token[5:]) {
			t.Errorf("the token appears in the %s", name)
		}
	}
	if log := readFileT(t, logFile); !strings.Contains(log, `"rule":"private-index"`) || !strings.Contains(log, `"view":"build"`) {
		t.Errorf("decision log lacks the allowed install:\n%s", log)
	}
}

func readFileT(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
