package dnsclient

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/egressd/egressd/internal/testutil"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	q := NewQuery("example.test.", dns.TypeA)
	tests := []struct {
		name  string
		spoil func(m *dns.Msg)
		err   string // "" when the answer passes
	}{
		{"answer", func(m *dns.Msg) {}, ""},
		{"nxdomain", func(m *dns.Msg) { m.Rcode = dns.RcodeNameError }, ""},
		{"0x20 case", func(m *dns.Msg) { m.Question[0].Name = "ExAmPlE.TeSt." }, ""},
		{"another id", func(m *dns.Msg) { m.Id = q.Id + 1 }, "reply id"},
		{"not a response", func(m *dns.Msg) { m.Response = false }, "not a query response"},
		{"another opcode", func(m *dns.Msg) { m.Opcode = dns.OpcodeUpdate }, "not a query response"},
		{"no question", func(m *dns.Msg) { m.Question = nil }, "0 questions"},
		{"two questions", func(m *dns.Msg) { m.Question = append(m.Question, m.Question[0]) }, "2 questions"},
		{"another name", func(m *dns.Msg) { m.Question[0].Name = "other.test." }, "another question"},
		{"another type", func(m *dns.Msg) { m.Question[0].Qtype = dns.TypeAAAA }, "another question"},
		{"another class", func(m *dns.Msg) { m.Question[0].Qclass = dns.ClassCHAOS }, "another question"},
		{"servfail", func(m *dns.Msg) { m.Rcode = dns.RcodeServerFailure }, "rcode SERVFAIL"},
		{"refused", func(m *dns.Msg) { m.Rcode = dns.RcodeRefused }, "rcode REFUSED"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := new(dns.Msg)
			m.SetReply(q)
			tt.spoil(m)
			err := Check(q, m)
			if tt.err == "" && err != nil {
				t.Fatalf("Check: %v, want nil", err)
			}
			if tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Fatalf("Check: %v, want an error with %q", err, tt.err)
			}
		})
	}
}

func TestNewQuery(t *testing.T) {
	t.Parallel()
	a, b := NewQuery("example.test.", dns.TypeAAAA), NewQuery("example.test.", dns.TypeAAAA)
	if len(a.Question) != 1 || a.Question[0].Qtype != dns.TypeAAAA || a.Question[0].Qclass != dns.ClassINET || !a.RecursionDesired {
		t.Fatalf("query: %v", a)
	}
	if opt := a.IsEdns0(); opt == nil || opt.UDPSize() != EDNSSize || len(opt.Option) != 0 {
		t.Fatalf("EDNS0: %v", a.IsEdns0())
	}
	// IDs are random: two queries in a row sharing one is a 1 in 65536
	// event, so retry a bounded number of times before calling it fixed.
	for i := 0; a.Id == b.Id && i < 4; i++ {
		b = NewQuery("example.test.", dns.TypeAAAA)
	}
	if a.Id == b.Id {
		t.Fatalf("five queries share the id %d", a.Id)
	}
}

// serve runs h on UDP and TCP of one 127.0.0.1 port.
func serve(t *testing.T, h dns.HandlerFunc) netip.AddrPort {
	t.Helper()
	pc, l := testutil.ListenUDPTCP(t)
	udp, tcp := &dns.Server{PacketConn: pc, Handler: h}, &dns.Server{Listener: l, Handler: h}
	go udp.ActivateAndServe()
	go tcp.ActivateAndServe()
	t.Cleanup(func() { udp.Shutdown(); tcp.Shutdown() })
	return netip.MustParseAddrPort(pc.LocalAddr().String())
}

// TestExchangeTruncatedRetriesOverTCP: a truncated UDP answer is asked
// again over TCP, and the TCP answer is checked too.
func TestExchangeTruncatedRetriesOverTCP(t *testing.T) {
	t.Parallel()
	for _, forgeTCP := range []bool{false, true} {
		up := serve(t, func(w dns.ResponseWriter, r *dns.Msg) {
			m := new(dns.Msg)
			m.SetReply(r)
			if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
				m.Truncated = true
			} else {
				m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(127, 0, 0, 1)}}
				if forgeTCP {
					m.Question[0].Name = "other.test."
				}
			}
			w.WriteMsg(m)
		})
		c := &Client{Timeout: time.Second}
		resp, _, err := c.Exchange(context.Background(), up, NewQuery("example.test.", dns.TypeA))
		switch {
		case forgeTCP && err == nil:
			t.Errorf("forged TCP answer taken: %v", resp)
		case !forgeTCP && (err != nil || len(resp.Answer) != 1):
			t.Errorf("TCP retry: %v, %v", resp, err)
		}
	}
}

// TestAskFailsOver: a failing upstream (here: one that answers
// SERVFAIL) passes the question on to the next; every failure is named.
func TestAskFailsOver(t *testing.T) {
	t.Parallel()
	bad := serve(t, func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetRcode(r, dns.RcodeServerFailure)
		w.WriteMsg(m)
	})
	good := serve(t, func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		w.WriteMsg(m)
	})
	c := &Client{Timeout: time.Second}
	_, up, _, err := c.Ask(context.Background(), []netip.AddrPort{bad, good}, NewQuery("example.test.", dns.TypeA))
	if err != nil || up != good {
		t.Fatalf("Ask: %s, %v; want %s", up, err, good)
	}
	_, _, _, err = c.Ask(context.Background(), []netip.AddrPort{bad}, NewQuery("example.test.", dns.TypeA))
	if err == nil || !strings.Contains(err.Error(), bad.String()) || !strings.Contains(err.Error(), "SERVFAIL") {
		t.Fatalf("Ask of a failing upstream: %v", err)
	}
	if _, _, _, err = c.Ask(context.Background(), nil, NewQuery("example.test.", dns.TypeA)); err == nil {
		t.Fatal("Ask with no upstream: no error")
	}
}

// FuzzCheck: any message an upstream sends is checked without a panic,
// and an accepted one answers the question asked.
func FuzzCheck(f *testing.F) {
	q := NewQuery("example.test.", dns.TypeA)
	m := new(dns.Msg)
	m.SetReply(q)
	b, _ := m.Pack()
	f.Add(b)
	f.Add([]byte{0, 1, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		resp := new(dns.Msg)
		if resp.Unpack(b) != nil {
			return
		}
		resp.Id = q.Id // let the fuzzer reach the checks past the ID
		if Check(q, resp) == nil && !strings.EqualFold(resp.Question[0].Name, q.Question[0].Name) {
			t.Fatalf("accepted an answer to %q", resp.Question[0].Name)
		}
	})
}

// TestExchangeRedTeam: what a hostile or broken upstream might send. A
// reply with another ID before the real one is skipped (UDP); an answer
// truncated over TCP too is asked once more, never in a loop; an answer
// to another question is refused whatever it holds.
func TestExchangeRedTeam(t *testing.T) {
	t.Parallel()
	a := func(name string) dns.RR {
		return &dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(127, 0, 0, 1)}
	}
	var tcpAsked atomic.Int32
	up := serve(t, func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		switch _, udp := w.RemoteAddr().(*net.UDPAddr); {
		case r.Question[0].Name == "spoof.test." && udp:
			bad := m.Copy()
			bad.Id = r.Id + 1
			bad.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: "spoof.test.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(169, 254, 169, 254)}}
			w.WriteMsg(bad)
			m.Answer = []dns.RR{a("spoof.test.")}
		case r.Question[0].Name == "tc.test.":
			if !udp {
				tcpAsked.Add(1)
			}
			m.Truncated = true
		case r.Question[0].Name == "other.test.":
			m.Question[0].Name = "allowed.test."
			m.Answer = []dns.RR{a("allowed.test.")}
		}
		w.WriteMsg(m)
	})
	c := &Client{Timeout: time.Second}
	resp, _, err := c.Exchange(context.Background(), up, NewQuery("spoof.test.", dns.TypeA))
	if err != nil || len(resp.Answer) != 1 || !resp.Answer[0].(*dns.A).A.Equal(net.IPv4(127, 0, 0, 1)) {
		t.Errorf("a wrong-ID reply first: %v, %v; want the real answer", resp, err)
	}
	if _, _, err := c.Exchange(context.Background(), up, NewQuery("tc.test.", dns.TypeA)); err != nil {
		t.Errorf("truncated over TCP too: %v", err)
	}
	if n := tcpAsked.Load(); n != 1 {
		t.Errorf("asked over TCP %d times, want 1", n)
	}
	if resp, _, err := c.Exchange(context.Background(), up, NewQuery("other.test.", dns.TypeA)); err == nil {
		t.Errorf("an answer to another question taken: %v", resp)
	}
}
