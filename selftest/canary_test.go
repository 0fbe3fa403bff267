package selftest

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestCanaryLogNamesIdentity: the canary-log probe reports a leak naming
// the identity whose canary token the canary server logged.
func TestCanaryLogNamesIdentity(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, log string
		status    Status
		detail    string
	}{
		{"clean", "GET /health\n", Pass, ""},
		{"this run", "GET /?egressd-selftest-run1\n", Leak, "this run's canary"},
		{"sandbox b", "query 5d41402abc4b.canary.example.net A\n", Leak, "agent-b (token 5d41402abc4b)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, tt.log) }))
			defer srv.Close()
			d := &net.Dialer{}
			r := &runner{token: "egressd-selftest-run1", c: Config{CanaryLog: srv.URL, LogDial: d.DialContext,
				CanaryTokens: map[string]string{"agent-a": "0123456789ab", "agent-b": "5d41402abc4b"}}}
			o := r.canaryLog(context.Background())
			if o.status != tt.status || !strings.Contains(o.detail, tt.detail) {
				t.Errorf("got %s %q, want %s containing %q", o.status, o.detail, tt.status, tt.detail)
			}
		})
	}
}

// TestDNSCanaryOverTCP: egressd's own self-test asks its resolver over TCP
// (ResolverTCP), the one transport whose source the resolver can trust
// for the readiness exemption; the verdicts are those of UDP, and the
// query never goes over UDP.
func TestDNSCanaryOverTCP(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		rcode  int
		answer bool
		status Status
	}{
		{"refused name", dns.RcodeNameError, false, Pass},
		{"allowed name", dns.RcodeSuccess, true, Leak},
		{"empty success", dns.RcodeSuccess, false, Leak},
		{"servfail", dns.RcodeServerFailure, false, Error},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var udp atomic.Int32
			h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
				if _, ok := w.RemoteAddr().(*net.UDPAddr); ok {
					udp.Add(1)
				}
				m := new(dns.Msg)
				m.SetRcode(r, tt.rcode)
				if tt.answer {
					rr, _ := dns.NewRR(r.Question[0].Name + " 60 IN A 203.0.113.7")
					m.Answer = append(m.Answer, rr)
				}
				w.WriteMsg(m) //nolint:errcheck
			})
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			pc, err := net.ListenPacket("udp", l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			ts, us := &dns.Server{Listener: l, Handler: h}, &dns.Server{PacketConn: pc, Handler: h}
			go ts.ActivateAndServe() //nolint:errcheck
			go us.ActivateAndServe() //nolint:errcheck
			defer ts.Shutdown()      //nolint:errcheck
			defer us.Shutdown()      //nolint:errcheck
			d := &net.Dialer{}
			r := &runner{c: Config{CanaryName: "canary.example.net", DNS: netip.MustParseAddrPort(l.Addr().String()),
				ResolverDial: d.DialContext, ResolverTCP: true, Timeout: time.Second}}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			o := r.dnsCanary(ctx)
			if o.status != tt.status {
				t.Errorf("got %s %q %q, want %s", o.status, o.result, o.detail, tt.status)
			}
			if n := udp.Load(); n != 0 {
				t.Errorf("%d queries over UDP, want none", n)
			}
		})
	}
}
