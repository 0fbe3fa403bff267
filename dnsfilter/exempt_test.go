package dnsfilter

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/egressd/egressd/policy"
)

// TestExemptIsTheConnection: Exempt is asked for the TCP connection: the
// client's address and port and the filter's own address the client
// dialed. The self-test's connection passes Gate; a connection that only
// shares its client address and port (one to another of egressd's
// listeners: Linux lets connect() share a local port between
// destinations) meets Gate's SERVFAIL.
func TestExemptIsTheConnection(t *testing.T) {
	up := newUpstream(t)
	up.set(t, "allowed.test.", dns.TypeA, "allowed.test. 60 IN A "+good4)
	pol := parsePolicy(t, []netip.AddrPort{up.addr}, 1000)
	var mu sync.Mutex
	var pair struct{ client, server netip.AddrPort }
	var asked []string
	s, err := New(Config{
		Policy:     func() *policy.Policy { return pol },
		Logger:     slog.New(slog.DiscardHandler),
		Dial:       loopbackDial(t),
		Registerer: prometheus.NewRegistry(),
		Timeout:    2 * time.Second,
		Gate:       func(*policy.Policy) (policy.Reason, string) { return policy.ReasonNotReady, "not ready" },
		Exempt: func(client, server netip.AddrPort) bool {
			mu.Lock()
			defer mu.Unlock()
			asked = append(asked, client.String()+"->"+server.String())
			return client == pair.client && server == pair.server
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(nil, l) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		<-done
	}()
	listenAP := netip.MustParseAddrPort(l.Addr().String())
	for _, tc := range []struct {
		name   string
		server netip.AddrPort // egressd's address of the self-test's connection
		rcode  int
	}{
		{"the self-test's connection", listenAP, dns.RcodeSuccess},
		{"same client address, another listener", netip.AddrPortFrom(listenAP.Addr(), listenAP.Port()+1), dns.RcodeServerFailure},
	} {
		t.Run(tc.name, func(t *testing.T) {
			co, err := dns.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer co.Close()
			client := netip.MustParseAddrPort(co.LocalAddr().String())
			mu.Lock()
			pair.client, pair.server, asked = client, tc.server, nil
			mu.Unlock()
			q := new(dns.Msg)
			q.SetQuestion("allowed.test.", dns.TypeA)
			co.SetDeadline(time.Now().Add(5 * time.Second))
			if err := co.WriteMsg(q); err != nil {
				t.Fatal(err)
			}
			r, err := co.ReadMsg()
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if r.Rcode != tc.rcode {
				t.Errorf("rcode %s, want %s (exemption asked for %v)", dns.RcodeToString[r.Rcode], dns.RcodeToString[tc.rcode], asked)
			}
			if len(asked) == 0 || asked[0] != client.String()+"->"+listenAP.String() {
				t.Errorf("exemption asked for %v, want %s->%s", asked, client, listenAP)
			}
		})
	}
}
