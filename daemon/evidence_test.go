package daemon

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/honeytoken"
	"github.com/egressd/egressd/policy"
)

// TestGatewayEvidence: the gateway serve and run share signs its audit
// log with audit.sign_key, and refuses the honeytokens of the state
// directory's store, including a set issued while it runs.
func TestGatewayEvidence(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := audit.GenerateKey(filepath.Join(dir, "keys")); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	first, _ := honeytoken.Issue("pod-a")
	if err := honeytoken.Append(state, first); err != nil {
		t.Fatal(err)
	}
	cfg := "version: 1\nlisten:\n  proxy: 127.0.0.1:0\n  dns: \"\"\n  admin: \"\"\naudit:\n  sign_key: file:" + filepath.Join(dir, "keys", audit.PrivateKeyFile) + "\n"
	auditLog := filepath.Join(dir, "audit.jsonl")
	g, err := NewGateway(Gateway{
		Options: Options{Load: func() (*policy.Policy, error) { return policy.Parse(strings.NewReader(cfg), "test.yaml") },
			Logger: slog.New(slog.DiscardHandler), NoSelftest: true, AllowUnverified: true},
		StateDir: state, AuditLog: auditLog,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	started, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- g.Run(ctx, started) }()
	<-started
	pa, _, _ := g.Addrs()
	proxyURL, _ := url.Parse("http://" + pa)
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}, Timeout: 10 * time.Second}
	get := func(target string) string {
		t.Helper()
		resp, err := c.Get(target) // refused before any dial: no rule allows anything
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.Header.Get("X-Egressd-Deny")
	}
	if got := get("http://denied.example/?k=" + first[0].Value); got != "honeytoken" {
		t.Fatalf("a stored honeytoken: %q, want honeytoken", got)
	}
	if got := get("http://denied.example/?k=plain"); got != "no-rule" {
		t.Fatalf("without it: %q", got)
	}
	// a set issued while the gateway runs is watched within the refresh
	later, _ := honeytoken.Issue("pod-b")
	honeytoken.Append(state, later)
	deadline := time.Now().Add(5 * honeyRefresh)
	for get("http://denied.example/?k="+later[2].Value) != "honeytoken" {
		if time.Now().After(deadline) {
			t.Fatal("a honeytoken issued after start was never refused")
		}
		time.Sleep(50 * time.Millisecond) // polling the refresh, which is time-driven
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	pub, _ := audit.ReadPublicKey(filepath.Join(dir, "keys", audit.PublicKeyFile))
	b, _ := os.ReadFile(auditLog)
	rep, err := audit.Verify(bytes.NewReader(b), audit.VerifyOptions{Key: pub})
	if err != nil || rep.SignedLines != rep.Lines || rep.Checkpoints < 2 {
		t.Fatalf("audit log with the key: %+v %v\n%s", rep, err, b)
	}
	if !bytes.Contains(b, []byte(`"honeytoken":"aws-access-key-id"`)) {
		t.Errorf("the audit log lacks the honeytoken decision")
	}
}
