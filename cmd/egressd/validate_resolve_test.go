package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/miekg/dns"
)

// fakeResolver answers A queries on 127.0.0.1 from answers (NXDOMAIN for
// other names, an empty answer for other types) and counts the queries.
func fakeResolver(t *testing.T, answers map[string]string) (addr string, queries *atomic.Int32) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	queries = new(atomic.Int32)
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		queries.Add(1)
		m := new(dns.Msg)
		m.SetReply(r)
		q := r.Question[0]
		a, ok := answers[strings.TrimSuffix(strings.ToLower(q.Name), ".")]
		switch {
		case !ok:
			m.Rcode = dns.RcodeNameError
		case q.Qtype == dns.TypeA:
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.ParseIP(a)})
		}
		w.WriteMsg(m)
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go srv.ActivateAndServe()
	<-started
	t.Cleanup(func() { srv.Shutdown() })
	return pc.LocalAddr().String(), queries
}

// TestValidateNeverAllowsResolved: a rule whose name resolves only to a
// special-use address, without cidrs naming its block, can never allow
// it: validate warns, naming the rule, the host, the address and its
// class (exit 0; --strict makes it an error). A name that resolves to a
// public address gets nothing; one that does not resolve is a note, never
// an error (not even with --strict); a rule whose cidrs unlock the block
// gets nothing. --offline resolves nothing.
func TestValidateNeverAllowsResolved(t *testing.T) {
	up, queries := fakeResolver(t, map[string]string{
		"registry.internal.example": "10.0.0.5",
		"unlocked.internal.example": "10.0.0.6",
		"public.example.com":        "64.0.0.1", // an answer only: validate sends nothing to it
	})
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(cfg, []byte(`version: 1
resolver:
  upstreams: ["`+up+`"]
selftest:
  expect_reachable: [https://public.example.com/]
  canary_name: canary.example.net
allow:
  - name: internal-registry
    hosts: [registry.internal.example]
  - name: unlocked
    hosts: [unlocked.internal.example]
    cidrs: [10.0.0.0/24]
  - name: public
    hosts: [public.example.com, gone.example.com]
`), 0o644)

	code, out, errs := runCmd("validate", cfg)
	want := `warning: allow[0] ("internal-registry") can never allow registry.internal.example: it resolves only to 10.0.0.5 (private)`
	if code != exitOK || !strings.Contains(out, "ok") || !strings.Contains(errs, want) {
		t.Errorf("validate: exit %d, stdout %q, stderr:\n%s\nwant %q", code, out, errs, want)
	}
	if strings.Contains(errs, "unlocked.internal.example") || strings.Contains(errs, "public.example.com") {
		t.Errorf("validate warns about a name it can allow:\n%s", errs)
	}
	if !strings.Contains(errs, `note: allow[2] ("public"): gone.example.com did not resolve`) || strings.Contains(errs, "error: allow[2]") {
		t.Errorf("validate: an unresolvable name is not a note:\n%s", errs)
	}

	code, _, errs = runCmd("validate", "--strict", cfg)
	if code != exitUsage || !strings.Contains(errs, `error: allow[0] ("internal-registry") can never allow`) {
		t.Errorf("validate --strict: exit %d, stderr:\n%s", code, errs)
	}

	before := queries.Load()
	code, out, errs = runCmd("validate", "--offline", cfg)
	if code != exitOK || !strings.Contains(out, "ok") || strings.Contains(errs, "can never allow") || strings.Contains(errs, "did not resolve") {
		t.Errorf("validate --offline: exit %d, stdout %q, stderr:\n%s", code, out, errs)
	}
	if n := queries.Load() - before; n != 0 {
		t.Errorf("validate --offline sent %d queries", n)
	}
	if before == 0 {
		t.Errorf("validate sent no query to the configured upstream")
	}
}
