package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
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
	"github.com/egressd/egressd/event"
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

// writeTunnelLog writes a closed log in which one tunnel opened and its
// close record was never written (a stop that sealed before it).
func writeTunnelLog(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tunnels.jsonl")
	s, err := audit.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(s.Handler(nil))
	log.Info(audit.DecisionMsg, event.KeyHost, "pypi.org", event.KeyTunnel, event.TunnelOpen, event.KeyTunnelID, 1)
	log.Info(audit.DecisionMsg, event.KeyHost, "pypi.org", event.KeyTunnel, event.TunnelOpen, event.KeyTunnelID, 2)
	log.Info(audit.DecisionMsg, event.KeyHost, "pypi.org", event.KeyTunnel, event.TunnelClose, event.KeyTunnelID, 2)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestAuditVerifyCommand(t *testing.T) {
	t.Parallel()
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
		{"a tunnel without its close record", []string{writeTunnelLog(t)}, exitDeny, ":5: incomplete: sealed with 1 tunnel(s) whose close record was never written"},
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
	t.Parallel()
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

// TestAuditSignedCommand: keygen, a log signed with its key, and a
// consistent rewrite (content changed, every seq and prev recomputed) that
// passes audit verify without the key and fails with it.
func TestAuditSignedCommand(t *testing.T) {
	t.Parallel()
	keys := filepath.Join(t.TempDir(), "keys")
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"audit", "keygen", "--out", keys}, &stdout, &stderr); code != exitOK {
		t.Fatalf("keygen: %d %s", code, stderr.String())
	}
	p := &policy.Policy{Audit: policy.Audit{SignKey: filepath.Join(keys, audit.PrivateKeyFile), CheckpointRecords: 2, CheckpointInterval: time.Hour}}
	ao, err := daemon.AuditOptions(p)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	s, err := audit.OpenWith(path, ao)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(s.Handler(nil))
	for _, h := range []string{"pypi.org", "files.pythonhosted.org", "169.254.169.254"} {
		log.Info(audit.DecisionMsg, "host", h, "decision", "deny")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	// the rewrite: the metadata hit now reads as an ordinary host
	rewritten := rechainLines(bytes.Replace(b, []byte("169.254.169.254"), []byte("example.com"), 1))
	rwPath := filepath.Join(t.TempDir(), "rewritten.jsonl")
	os.WriteFile(rwPath, rewritten, 0o600)
	// a live log: the lines after the last checkpoint (record 3, not yet
	// signed when the seal came) are reported, not refused
	ls := bytes.SplitAfter(b, []byte{'\n'})
	livePath := filepath.Join(t.TempDir(), "live.jsonl")
	os.WriteFile(livePath, bytes.Join(ls[:6], nil), 0o600)
	pub := filepath.Join(keys, audit.PublicKeyFile)
	other := filepath.Join(t.TempDir(), "other")
	if code := run(context.Background(), []string{"audit", "keygen", "--out", other}, &stdout, &stderr); code != exitOK {
		t.Fatalf("keygen: %d %s", code, stderr.String())
	}
	otherPub := filepath.Join(other, audit.PublicKeyFile)
	for _, tt := range []struct {
		args     []string
		wantCode int
		wantOut  string
	}{
		{[]string{path}, exitOK, "signed checkpoint(s) not checked: pass --key"},
		{[]string{"--key", pub, path}, exitOK, "signed: lines 1-8 covered by 3 checkpoint(s)"},
		{[]string{rwPath}, exitOK, "intact"},
		{[]string{"--key", pub, rwPath}, exitDeny, ":6: tampered: unsigned: no valid signature covers lines 6-8"},
		{[]string{"--key", filepath.Join(keys, audit.PrivateKeyFile), path}, exitUsage, ""},
		{[]string{"--key", pub, "--live", livePath}, exitOK, ":6: note: lines 6-6 are not signed yet"},
		{[]string{"--key", pub, livePath}, exitDeny, "tampered: truncated"},
		// --final-key: the key the log must end with (after a rotation)
		{[]string{"--key", pub, "--final-key", pub, path}, exitOK, "signed: lines 1-8"},
		{[]string{"--final-key", pub, path}, exitOK, "signed: lines 1-8"},
		{[]string{"--key", pub, "--final-key", otherPub, path}, exitDeny, "not by the final key"},
	} {
		stdout.Reset()
		stderr.Reset()
		code := run(context.Background(), append([]string{"audit", "verify"}, tt.args...), &stdout, &stderr)
		if code != tt.wantCode || !strings.Contains(stdout.String(), tt.wantOut) {
			t.Errorf("verify %v: exit %d, stdout %q, stderr %q; want %d and %q", tt.args, code, stdout.String(), stderr.String(), tt.wantCode, tt.wantOut)
		}
	}
}

// rechainLines recomputes every seq and prev of a log, as whoever can
// write the file can.
func rechainLines(b []byte) []byte {
	var out []byte
	var prev [32]byte
	for i, l := range bytes.SplitAfter(bytes.TrimSuffix(b, []byte{'\n'}), []byte{'\n'}) {
		l = bytes.TrimSuffix(l, []byte{'\n'})
		body := l[bytes.Index(l, []byte(`,"audit":"`)):]
		nl := fmt.Appendf(nil, `{"seq":%d,"prev":"%s"%s`, i+1, hex.EncodeToString(prev[:]), body)
		prev = sha256.Sum256(nl)
		out = append(append(out, nl...), '\n')
	}
	return out
}
