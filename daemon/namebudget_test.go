package daemon

import (
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/egressd/egressd/policy"
)

// nullDNSWriter is a dns.ResponseWriter for one client address that keeps
// nothing.
type nullDNSWriter struct{ remote net.Addr }

func (w nullDNSWriter) LocalAddr() net.Addr {
	if _, tcp := w.remote.(*net.TCPAddr); tcp { // a TCP client's connection is TCP at both ends
		return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53}
	}
	return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53}
}
func (w nullDNSWriter) RemoteAddr() net.Addr        { return w.remote }
func (w nullDNSWriter) WriteMsg(*dns.Msg) error     { return nil }
func (w nullDNSWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w nullDNSWriter) Close() error                { return nil }
func (w nullDNSWriter) TsigStatus() error           { return nil }
func (w nullDNSWriter) TsigTimersOnly(bool)         {}
func (w nullDNSWriter) Hijack()                     {}

// TestOneNameBudgetForDNSAndProxy: the DNS filter and the proxy's resolver
// each kept a budget of their own, so an identity resolved
// dns_wildcard_names new names through each: twice the budget the README
// states. Names resolved through the DNS filter count in the proxy too.
func TestOneNameBudgetForDNSAndProxy(t *testing.T) {
	t.Parallel()
	const cfg = "version: 1\nlisten:\n  dns: 127.0.0.1:5353\nresolver:\n  upstreams: [\"127.0.0.1:9\"]\nlimits:\n  dns_wildcard_names: 2\nallow:\n  - hosts: [\"*.wild.test\"]\n    pages: [\"*\"]\n"
	d, err := New(Options{
		Load:       func() (*policy.Policy, error) { return policy.Parse(strings.NewReader(cfg), "t.yaml") },
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		NoSelftest: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	d.ready.Store(true)
	d.verified.Store(d.Policy())
	client := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}
	for _, name := range []string{"n0.wild.test.", "n1.wild.test."} {
		q := new(dns.Msg)
		q.SetQuestion(name, dns.TypeA)
		d.dns.ServeDNS(nullDNSWriter{remote: client}, q)
	}
	rec := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "http://n2.wild.test/", nil)
	r.RemoteAddr = "127.0.0.1:40001"
	d.px.ServeHTTP(rec, r)
	if got := rec.Header().Get("X-Egressd-Deny"); got != policy.ReasonWildcardBudget.String() {
		t.Errorf("third new name, through the proxy after two through the DNS filter: %d %q, want 403 %s", rec.Code, got, policy.ReasonWildcardBudget)
	}
}
