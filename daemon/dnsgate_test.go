package daemon

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/egressd/egressd/policy"
)

// fakeUpstream answers every A question with 203.0.113.7 on 127.0.0.1.
func fakeUpstream(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: answerA}
	go srv.ActivateAndServe()            //nolint:errcheck
	t.Cleanup(func() { srv.Shutdown() }) //nolint:errcheck
	return pc.LocalAddr().String()
}

// answerA answers every A question with 203.0.113.7.
var answerA = dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	if q := r.Question[0]; q.Qtype == dns.TypeA {
		rr, _ := dns.NewRR(q.Name + " 60 IN A 203.0.113.7")
		m.Answer = append(m.Answer, rr)
	}
	w.WriteMsg(m) //nolint:errcheck
})

// dnsWriter keeps the reply for one client address.
type dnsWriter struct {
	nullDNSWriter
	got *dns.Msg
}

func (w *dnsWriter) WriteMsg(m *dns.Msg) error { w.got = m; return nil }

// ask puts one A question for name to the daemon's DNS filter from client
// and says what came back: the rcode, and "+answer" when it has records.
func ask(t *testing.T, d *Daemon, client string, name string) string {
	t.Helper()
	return askOver(t, d, "udp", client, name)
}

// askOver is ask over network: "udp" or "tcp".
func askOver(t *testing.T, d *Daemon, network, client string, name string) string {
	t.Helper()
	s := tryAsk(d, network, client, name)
	if s == "" {
		t.Fatalf("%s: no reply", name)
	}
	return s
}

// tryAsk is askOver for a goroutine that must not end the test (a Verify
// the daemon runs): "" when no reply came.
func tryAsk(d *Daemon, network, client string, name string) string {
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), dns.TypeA)
	var remote net.Addr = net.UDPAddrFromAddrPort(netip.MustParseAddrPort(client))
	if network == "tcp" {
		remote = net.TCPAddrFromAddrPort(netip.MustParseAddrPort(client))
	}
	w := &dnsWriter{nullDNSWriter: nullDNSWriter{remote: remote}}
	d.dns.ServeDNS(w, q)
	if w.got == nil {
		return ""
	}
	s := dns.RcodeToString[w.got.Rcode]
	if len(w.got.Answer) > 0 {
		s += "+answer"
	}
	return s
}

func dnsConfig(up string, hosts ...string) string {
	return fmt.Sprintf("version: 1\nlisten:\n  admin: 127.0.0.1:0\n  dns: 127.0.0.1:0\nresolver:\n  upstreams: [%q]\nallow:\n  - name: names\n    hosts: [%s]\n    cidrs: [203.0.113.0/24]\n    pages: [\"*\"]\n",
		up, `"`+strings.Join(hosts, `", "`)+`"`)
}

const sandboxClient = "127.0.0.1:40000"

// TestDNSAnswersOnlyFromTheVerifiedPolicy: the DNS filter decided with the
// policy in force, so between a reload's swap and its self-test it sent
// names only the new policy allows upstream (while the proxy answered
// 503), and it kept answering after a leak took readiness away. Allowed
// names get SERVFAIL until the policy in force is the verified one;
// refused names keep their NXDOMAIN.
func TestDNSAnswersOnlyFromTheVerifiedPolicy(t *testing.T) {
	// Not parallel: it sets testHookSwapped, which every daemon's swap calls.
	for _, leak := range []bool{false, true} {
		name := map[bool]string{false: "sealed", true: "dropped"}[leak]
		t.Run(name, func(t *testing.T) {
			up := fakeUpstream(t)
			var cfg atomic.Pointer[string]
			set := func(s string) { cfg.Store(&s) }
			set(dnsConfig(up, "old.example.com"))
			f := startWith(t, func(o *Options) {
				o.Load = func() (*policy.Policy, error) { return policy.Parse(strings.NewReader(*cfg.Load()), "t.yaml") }
			})
			if got := ask(t, f.d, sandboxClient, "old.example.com"); got != "NOERROR+answer" {
				t.Fatalf("old.example.com once the boot self-test sealed: %s, want an answer", got)
			}
			if got := ask(t, f.d, sandboxClient, "x.new.example.com"); got != "NXDOMAIN" {
				t.Fatalf("x.new.example.com before the reload: %s, want NXDOMAIN", got)
			}
			var during []string
			testHookSwapped = func() {
				during = append(during, ask(t, f.d, sandboxClient, "x.new.example.com"), ask(t, f.d, sandboxClient, "old.example.com"), ask(t, f.d, sandboxClient, "unlisted.example.com"))
			}
			t.Cleanup(func() { testHookSwapped = nil })
			f.leak.Store(leak)
			set(dnsConfig(up, "old.example.com", "*.new.example.com"))
			if err := f.d.Reload(context.Background(), "test"); leak != (err != nil) {
				t.Fatalf("Reload: %v (leak %v)", err, leak)
			}
			if len(during) != 3 {
				t.Fatalf("the swap hook ran %d times", len(during)/3)
			}
			// the candidate is verified beside the verified policy, which
			// keeps deciding for sandboxes: its names are answered, the
			// candidate's new ones are not
			if want := []string{"NXDOMAIN", "NOERROR+answer", "NXDOMAIN"}; strings.Join(during, " ") != strings.Join(want, " ") {
				t.Errorf("during the reload (x.new.example.com, old.example.com, unlisted.example.com): %v, want %v: sandboxes decided by the verified policy while the candidate is verified", during, want)
			}
			want := "NOERROR+answer"
			if leak {
				want = "NXDOMAIN"
			}
			if got := ask(t, f.d, sandboxClient, "x.new.example.com"); got != want {
				t.Errorf("x.new.example.com after the reload: %s, want %s", got, want)
			}
			if got := ask(t, f.d, sandboxClient, "old.example.com"); got != "NOERROR+answer" {
				t.Errorf("old.example.com after the reload: %s, want an answer", got)
			}
			// a scheduled self-test that finds a leak takes readiness away:
			// nothing more goes upstream until one seals again
			f.leak.Store(true)
			f.d.scheduled(context.Background())
			if got := ask(t, f.d, sandboxClient, "old.example.com"); got != "SERVFAIL" {
				t.Errorf("old.example.com after a scheduled self-test found a leak: %s, want SERVFAIL", got)
			}
			f.leak.Store(false)
			f.d.scheduled(context.Background())
			if got := ask(t, f.d, sandboxClient, "old.example.com"); got != "NOERROR+answer" {
				t.Errorf("old.example.com once the self-test sealed again: %s, want an answer", got)
			}
		})
	}
}

// TestReloadSelftestTestsTheCandidateOverDNS: the self-test's own DNS
// probes (from a source the proxy's ReadyExempt names) are answered by the
// candidate policy, so a candidate that allows the canary name is caught
// as a leak and dropped. Without the exemption the canary probe would
// meet the gate's SERVFAIL and could not tell.
func TestReloadSelftestTestsTheCandidateOverDNS(t *testing.T) {
	t.Parallel()
	up := fakeUpstream(t)
	var cfg atomic.Pointer[string]
	set := func(s string) { cfg.Store(&s) }
	set(dnsConfig(up, "old.example.com"))
	var mu sync.Mutex
	probes := map[netip.AddrPort]bool{}
	const probeClient = "127.0.0.1:41000"
	var leaks []string
	f := startWith(t, func(o *Options) {
		o.Load = func() (*policy.Policy, error) { return policy.Parse(strings.NewReader(*cfg.Load()), "t.yaml") }
		o.ProxyConfig.ReadyExempt = func(ap, _ netip.AddrPort) bool { mu.Lock(); defer mu.Unlock(); return probes[ap] }
	})
	// from here the self-test is a canary probe from probeClient, exempt
	// while it runs (as cmd/egressd's probeConns)
	f.d.opt.Verify = func(ctx context.Context, p *policy.Policy) Verdict {
		mu.Lock()
		probes[netip.MustParseAddrPort(probeClient)] = true
		mu.Unlock()
		defer func() { mu.Lock(); delete(probes, netip.MustParseAddrPort(probeClient)); mu.Unlock() }()
		got := askOver(t, f.d, "tcp", probeClient, "canary.example.com")
		leaks = append(leaks, got)
		if strings.HasPrefix(got, "NXDOMAIN") || strings.HasPrefix(got, "REFUSED") {
			return Verdict{Sealed: true}
		}
		if strings.HasPrefix(got, "SERVFAIL") {
			return Verdict{Err: fmt.Errorf("canary: SERVFAIL: cannot tell")}
		}
		return Verdict{Leaks: []string{"dns-canary/canary.example.com: " + got}}
	}
	set(dnsConfig(up, "old.example.com", "*.example.com"))
	err := f.d.Reload(context.Background(), "test")
	if err == nil || !strings.Contains(err.Error(), "leaks") || !strings.Contains(err.Error(), "dropped") {
		t.Fatalf("Reload of a candidate that allows the canary: %v (the canary probe saw %v), want dropped for a leak", err, leaks)
	}
	if got := ask(t, f.d, sandboxClient, "canary.example.com"); got != "NXDOMAIN" {
		t.Errorf("canary.example.com after the candidate was dropped: %s, want NXDOMAIN", got)
	}
	if got := askOver(t, f.d, "tcp", probeClient, "canary.example.com"); got != "NXDOMAIN" {
		t.Errorf("canary.example.com from the (no longer exempt) probe address after the candidate was dropped: %s, want NXDOMAIN", got)
	}
}

// TestDNSExemptionOnlyOverTCP: the self-test's DNS probes pass the
// readiness gate by their source address and port, and a UDP source is
// whatever the sender writes: a sandbox with CAP_NET_RAW (Docker's default)
// that spoofs an open probe socket's address and port had its queries
// forwarded upstream while egressd was not ready (during a reload's
// verification, after a leak). Only a TCP client, whose address a
// handshake proved, is exempt; the probe asks over TCP.
func TestDNSExemptionOnlyOverTCP(t *testing.T) {
	t.Parallel()
	up := fakeUpstream(t)
	const probeClient = "127.0.0.1:41000"
	f := startWith(t, func(o *Options) {
		cfg := dnsConfig(up, "old.example.com")
		o.Load = func() (*policy.Policy, error) { return policy.Parse(strings.NewReader(cfg), "t.yaml") }
		o.ProxyConfig.ReadyExempt = func(ap, _ netip.AddrPort) bool { return ap == netip.MustParseAddrPort(probeClient) }
	})
	// a scheduled self-test finds a leak: nothing allowed goes upstream
	f.leak.Store(true)
	f.d.scheduled(context.Background())
	if got := ask(t, f.d, sandboxClient, "old.example.com"); got != "SERVFAIL" {
		t.Fatalf("old.example.com while not ready: %s, want SERVFAIL", got)
	}
	if got := askOver(t, f.d, "udp", probeClient, "old.example.com"); got != "SERVFAIL" {
		t.Errorf("old.example.com over UDP from a probe socket's address and port while not ready: %s, want SERVFAIL (a UDP source can be spoofed)", got)
	}
	if got := askOver(t, f.d, "tcp", probeClient, "old.example.com"); got != "NOERROR+answer" {
		t.Errorf("old.example.com over TCP from the probe's connection while not ready: %s, want an answer (the self-test meets the policy in force)", got)
	}
}

// TestDNSTCPCountsClientConns: TCP connections to the DNS port are client
// connections of their source's identity like the proxy's
// (limits.client_conns_per_identity): one past the limit is closed
// unanswered, so a sandbox cannot hold DNS connections without bound.
func TestDNSTCPCountsClientConns(t *testing.T) {
	t.Parallel()
	up := fakeUpstream(t)
	f := startWith(t, func(o *Options) {
		cfg := dnsConfig(up, "old.example.com") + "limits:\n  client_conns_per_identity: 3\n"
		o.Load = func() (*policy.Policy, error) { return policy.Parse(strings.NewReader(cfg), "t.yaml") }
	})
	_, dnsAddr, _ := f.d.Addrs()
	ask := func() (net.Conn, error) {
		c, err := net.Dial("tcp", dnsAddr)
		if err != nil {
			return nil, err
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		q := new(dns.Msg)
		q.SetQuestion("refused.example.", dns.TypeA)
		co := &dns.Conn{Conn: c}
		if err := co.WriteMsg(q); err != nil {
			c.Close()
			return nil, err
		}
		if _, err := co.ReadMsg(); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
	for i := range 3 {
		c, err := ask()
		if err != nil {
			t.Fatalf("DNS TCP connection %d: %v", i+1, err)
		}
		defer c.Close()
	}
	if c, err := ask(); err == nil {
		c.Close()
		t.Fatalf("a fourth DNS TCP connection of one source with client_conns_per_identity 3 was answered, want it closed")
	}
}
