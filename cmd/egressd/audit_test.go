package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/daemon"
	"github.com/egressd/egressd/policy"
)

// writeAuditLog writes a closed log of three decisions and returns its path
// and lines.
func writeAuditLog(t *testing.T) (string, [][]byte) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	s, err := audit.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(s.Handler(nil))
	for _, h := range []string{"pypi.org", "files.pythonhosted.org", "169.254.169.254"} {
		log.Info(audit.DecisionMsg, "host", h, "decision", "allow")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	return path, bytes.SplitAfter(b, []byte{'\n'})[:5]
}

func TestAuditVerifyCommand(t *testing.T) {
	clean, lines := writeAuditLog(t)
	dir := t.TempDir()
	write := func(name string, ls ...[]byte) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, bytes.Join(ls, nil), 0o600)
		return p
	}
	edited := bytes.Replace(lines[2], []byte("files.pythonhosted.org"), []byte("files.pythonhosted.org.evil.example"), 1)
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
	}{
		{"intact", []string{clean}, exitOK, "intact: 5 lines, 3 decisions, 0 tunnel(s), 1 session(s), sealed; head 5:"},
		{"edited in the middle", []string{write("edited", lines[0], lines[1], edited, lines[3], lines[4])}, exitDeny, ":3: tampered: edited:"},
		{"removed line", []string{write("removed", lines[0], lines[1], lines[3], lines[4])}, exitDeny, ":3: tampered: removed:"},
		{"reordered", []string{write("reordered", lines[0], lines[2], lines[1], lines[3], lines[4])}, exitDeny, ":2: tampered: reordered:"},
		{"truncated tail", []string{write("truncated", lines[:4]...)}, exitDeny, ":5: tampered: truncated:"},
		{"truncated tail, --live", []string{"--live", write("live", lines[:4]...)}, exitOK, "not sealed (--live)"},
		{"flags after the file", []string{write("live2", lines[:4]...), "--live"}, exitOK, "intact"},
		{"missing file", []string{filepath.Join(dir, "nope")}, exitUsage, ""},
		{"bad anchor", []string{"--anchor", "x", clean}, exitUsage, ""},
		{"two files", []string{clean, clean}, exitUsage, ""},
		{"no file", nil, exitUsage, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), append([]string{"audit", "verify"}, tt.args...), &stdout, &stderr)
			if code != tt.wantCode || !strings.Contains(stdout.String(), tt.wantOut) {
				t.Errorf("got exit %d, stdout %q, stderr %q; want exit %d, stdout containing %q",
					code, stdout.String(), stderr.String(), tt.wantCode, tt.wantOut)
			}
		})
	}
}

// TestAuditSinkWithDaemon wires the sink the way serve does (README "Audit
// log") and checks that the proxy's real decision lines land in a log that
// verifies, with the anchors on stderr.
func TestAuditSinkWithDaemon(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	sink, err := audit.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	log := slog.New(sink.Handler(slog.NewJSONHandler(&stderr, nil)))
	cfg := "version: 1\nlisten:\n  proxy: 127.0.0.1:0\n  dns: \"\"\n  admin: \"\"\n"
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d, err := daemon.New(daemon.Options{
		Load:            func() (*policy.Policy, error) { return policy.Parse(strings.NewReader(cfg), "test.yaml") },
		Logger:          log,
		NoSelftest:      true,
		AllowUnverified: true,
		ProxyListener:   pl,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	started, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- d.Run(ctx, started) }()
	<-started
	proxyURL, _ := url.Parse("http://" + pl.Addr().String())
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}, Timeout: 10 * time.Second}
	for _, target := range []string{"http://denied.example/a", "http://169.254.169.254/latest/meta-data/"} {
		resp, err := c.Get(target) // denied by policy before any dial
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("%s: status %d, want 403", target, resp.StatusCode)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}

	var anchors []audit.Anchor
	for _, l := range strings.Split(stderr.String(), "\n") {
		var m struct {
			Msg       string `json:"msg"`
			AuditSeq  uint64 `json:"audit_seq"`
			AuditHash string `json:"audit_hash"`
		}
		if json.Unmarshal([]byte(l), &m) == nil && m.Msg == audit.DecisionMsg {
			anchors = append(anchors, audit.Anchor{Seq: m.AuditSeq, Hash: m.AuditHash})
		}
	}
	if len(anchors) != 2 {
		t.Fatalf("got %d anchored decisions on stderr, want 2:\n%s", len(anchors), stderr.String())
	}
	f, _ := os.Open(path)
	defer f.Close()
	rep, err := audit.Verify(f, audit.VerifyOptions{Strict: true, Anchors: anchors})
	if err != nil || rep.Records != 2 || !rep.Sealed {
		t.Fatalf("got %+v, %v; want 2 records in a sealed log", rep, err)
	}
	b, _ := os.ReadFile(path)
	for _, want := range []string{`"component":"proxy"`, `"host":"denied.example"`, `"reason":"no-rule"`, `"reason":"high-risk"`} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("audit log lacks %s:\n%s", want, b)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for the daemon's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
