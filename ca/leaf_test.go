package ca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func mustNew(t testing.TB) *CA {
	t.Helper()
	c, err := New()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// countIssues makes c count leaf generations.
func countIssues(c *CA) *atomic.Int64 {
	var n atomic.Int64
	c.beforeIssue = func(string) { n.Add(1) }
	return &n
}

func TestLeafVerifies(t *testing.T) {
	c := mustNew(t)
	other := mustNew(t)
	tests := []struct {
		name     string
		host     string
		verifyAs string // the name or address a client checks
		wantDNS  []string
		wantIP   string
	}{
		{name: "name", host: "allowed.test", verifyAs: "allowed.test", wantDNS: []string{"allowed.test"}},
		{name: "name normalized", host: "Allowed.TEST.", verifyAs: "allowed.test", wantDNS: []string{"allowed.test"}},
		{name: "IPv4", host: "203.0.113.7", verifyAs: "203.0.113.7", wantIP: "203.0.113.7"},
		{name: "IPv6", host: "2001:db8::1", verifyAs: "2001:db8::1", wantIP: "2001:db8::1"},
		{name: "IPv6 bracketed", host: "[2001:db8::1]", verifyAs: "2001:db8::1", wantIP: "2001:db8::1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			cert, err := c.Leaf(tc.host)
			if err != nil {
				t.Fatalf("Leaf(%q): %v", tc.host, err)
			}
			leaf := cert.Leaf
			opts := x509.VerifyOptions{Roots: c.Pool(), DNSName: tc.verifyAs, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
			if _, err := leaf.Verify(opts); err != nil {
				t.Errorf("Verify as %q: %v", tc.verifyAs, err)
			}
			// Negative controls: the same check fails for another name and
			// for another CA, so a pass above means something.
			wrongName := opts
			wrongName.DNSName = "other.test"
			if _, err := leaf.Verify(wrongName); err == nil {
				t.Error("leaf verified as other.test; want a name mismatch")
			}
			wrongCA := opts
			wrongCA.Roots = other.Pool()
			if _, err := leaf.Verify(wrongCA); err == nil {
				t.Error("leaf verified against another CA; want unknown authority")
			}

			if got := fmt.Sprint(leaf.DNSNames); got != fmt.Sprint(tc.wantDNS) {
				t.Errorf("DNSNames: got %s, want %v", got, tc.wantDNS)
			}
			var gotIP string
			if len(leaf.IPAddresses) == 1 {
				gotIP = leaf.IPAddresses[0].String()
			}
			if len(leaf.IPAddresses) > 1 || gotIP != tc.wantIP {
				t.Errorf("IPAddresses: got %v, want [%s]", leaf.IPAddresses, tc.wantIP)
			}
			if pub, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
				t.Errorf("leaf key: got %T, want ECDSA P-256", leaf.PublicKey)
			}
			if _, ok := cert.PrivateKey.(*ecdsa.PrivateKey); !ok {
				t.Errorf("private key: got %T, want *ecdsa.PrivateKey", cert.PrivateKey)
			}
			if leaf.IsCA {
				t.Error("leaf is a CA")
			}
			if d := start.Add(-backdate).Sub(leaf.NotBefore); d < 0 || d > 5*time.Second {
				t.Errorf("NotBefore: got %v, want about an hour before %v", leaf.NotBefore, start)
			}
			if d := start.Add(leafValidity).Sub(leaf.NotAfter); d < -5*time.Second || d > 5*time.Second {
				t.Errorf("NotAfter: got %v, want about 7 days after %v", leaf.NotAfter, start)
			}
		})
	}
}

func TestNormalize(t *testing.T) {
	tests := []struct {
		name    string
		host    string
		want    string
		wantErr string
	}{
		{name: "lowercase and trailing dot", host: "Files.PythonHosted.org.", want: "files.pythonhosted.org"},
		{name: "underscore", host: "_acme.allowed.test", want: "_acme.allowed.test"},
		{name: "IPv4", host: "203.0.113.7", want: "203.0.113.7"},
		{name: "IPv6 canonical", host: "2001:DB8:0:0::1", want: "2001:db8::1"},
		{name: "IPv6 bracketed", host: "[2001:db8::1]", want: "2001:db8::1"},
		{name: "empty", host: "", wantErr: "1 to 253"},
		{name: "only a dot", host: ".", wantErr: "1 to 253"},
		{name: "wildcard", host: "*.allowed.test", wantErr: "not allowed"},
		{name: "empty label", host: "a..test", wantErr: "1 to 63"},
		{name: "label too long", host: strings.Repeat("a", 64) + ".test", wantErr: "1 to 63"},
		{name: "name too long", host: strings.Repeat("a.", 127) + "test", wantErr: "1 to 253"},
		{name: "non-ASCII", host: "bücher.test", wantErr: "not allowed"},
		{name: "space", host: "a b.test", wantErr: "not allowed"},
		{name: "port left on", host: "allowed.test:443", wantErr: "not allowed"},
		{name: "short IPv4 spelling", host: "127.1", wantErr: "numeric label"},
		{name: "hex IPv4 part", host: "0x7f.0x1", wantErr: "numeric label"},
		{name: "zone", host: "fe80::1%eth0", wantErr: "zone"},
		{name: "bracketed IPv4", host: "[203.0.113.7]", wantErr: "brackets"},
		{name: "bracketed name", host: "[allowed.test]", wantErr: "brackets"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := normalize(tc.host)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("normalize(%q): got %q, %v; want error containing %q", tc.host, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("normalize(%q): got %q, %v; want %q", tc.host, got, err, tc.want)
			}
		})
	}
}

func TestLeafCacheHit(t *testing.T) {
	c := mustNew(t)
	issued := countIssues(c)
	a, err := c.Leaf("allowed.test")
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"allowed.test", "ALLOWED.test."} {
		b, err := c.Leaf(host)
		if err != nil {
			t.Fatal(err)
		}
		if b != a {
			t.Errorf("Leaf(%q): got a new certificate, want the cached pointer", host)
		}
	}
	other, err := c.Leaf("other.test")
	if err != nil {
		t.Fatal(err)
	}
	if other == a {
		t.Error("Leaf(other.test) returned allowed.test's certificate")
	}
	if got := issued.Load(); got != 2 {
		t.Errorf("generations: got %d, want 2", got)
	}
}

// waiting reports how many callers wait on key's generation.
func (c *CA) waiting(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl := c.inflight[key]; cl != nil {
		return cl.waiters
	}
	return 0
}

func TestLeafConcurrentGeneratesOnce(t *testing.T) {
	tests := []struct {
		name      string
		hosts     func(i int) string
		wantGen   int64
		wantShare bool
	}{
		{name: "one host", hosts: func(int) string { return "allowed.test" }, wantGen: 1, wantShare: true},
		// Negative control: distinct hosts do not wait on each other, so
		// the hook does see concurrent generations when there are some.
		{name: "distinct hosts", hosts: func(i int) string { return fmt.Sprintf("h%d.test", i) }, wantGen: 8},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			const n = 8
			c := mustNew(t)
			var entered atomic.Int64
			release := make(chan struct{})
			c.beforeIssue = func(string) {
				entered.Add(1)
				<-release
			}
			certs := make([]*tls.Certificate, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					var err error
					if certs[i], err = c.Leaf(tc.hosts(i)); err != nil {
						t.Error(err)
					}
				})
			}
			// Hold the generation until every other caller is parked on it
			// (one host) or every caller is generating (distinct hosts).
			deadline := time.Now().Add(10 * time.Second)
			for entered.Load()+int64(c.waiting("allowed.test")) < n {
				if time.Now().After(deadline) {
					close(release)
					t.Fatalf("after 10s: %d generating, %d waiting; want %d callers in all", entered.Load(), c.waiting("allowed.test"), n)
				}
				time.Sleep(time.Millisecond)
			}
			close(release)
			wg.Wait()
			if got := entered.Load(); got != tc.wantGen {
				t.Errorf("generations: got %d, want %d", got, tc.wantGen)
			}
			shared := true
			for _, cert := range certs[1:] {
				shared = shared && cert == certs[0]
			}
			if shared != tc.wantShare {
				t.Errorf("all callers got one pointer: got %v, want %v", shared, tc.wantShare)
			}
		})
	}
}

func TestLeafRenewal(t *testing.T) {
	c := mustNew(t)
	issued := countIssues(c)
	now := time.Now()
	c.now = func() time.Time { return now }

	first, err := c.Leaf("allowed.test")
	if err != nil {
		t.Fatal(err)
	}
	renewAt := first.Leaf.NotAfter.Add(-renewBefore)
	tests := []struct {
		name    string
		at      time.Time
		wantNew bool
	}{
		{name: "just before renewal", at: renewAt.Add(-time.Second), wantNew: false},
		{name: "at renewal", at: renewAt, wantNew: true},
		{name: "renewed entry is cached", at: renewAt.Add(time.Second), wantNew: false},
		{name: "after expiry", at: first.Leaf.NotAfter.Add(leafValidity), wantNew: true},
	}
	prev := first
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			now = tc.at
			before := issued.Load()
			got, err := c.Leaf("allowed.test")
			if err != nil {
				t.Fatal(err)
			}
			if isNew := got != prev; isNew != tc.wantNew {
				t.Fatalf("new certificate: got %v, want %v", isNew, tc.wantNew)
			}
			if tc.wantNew {
				if issued.Load() != before+1 {
					t.Errorf("generations: got %d, want %d", issued.Load(), before+1)
				}
				if !got.Leaf.NotAfter.After(prev.Leaf.NotAfter) || !got.Leaf.NotBefore.Before(now) {
					t.Errorf("renewed leaf valid %v to %v; want it to cover %v and outlast %v",
						got.Leaf.NotBefore, got.Leaf.NotAfter, now, prev.Leaf.NotAfter)
				}
			}
			prev = got
		})
	}
	if len(c.ring) != 1 || len(c.entries) != 1 {
		t.Errorf("cache after renewals: %d slots, %d entries; want 1 and 1", len(c.ring), len(c.entries))
	}
}

func TestLeafClampedToCA(t *testing.T) {
	now := time.Now()
	cert, key := testCert(t, now.Add(-30*time.Minute), now.Add(48*time.Hour), true)
	c := newCA(cert, key)

	leaf, err := c.Leaf("allowed.test")
	if err != nil {
		t.Fatal(err)
	}
	if !leaf.Leaf.NotAfter.Equal(cert.NotAfter) {
		t.Errorf("leaf NotAfter: got %v, want the CA's %v", leaf.Leaf.NotAfter, cert.NotAfter)
	}
	if !leaf.Leaf.NotBefore.Equal(cert.NotBefore) {
		t.Errorf("leaf NotBefore: got %v, want the CA's %v", leaf.Leaf.NotBefore, cert.NotBefore)
	}

	c.now = func() time.Time { return cert.NotAfter.Add(time.Second) }
	if _, err := c.Leaf("other.test"); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("Leaf after CA expiry: got %v, want an expired-CA error", err)
	}
}

func TestLeafEviction(t *testing.T) {
	c := mustNew(t)
	c.capacity = 3
	issued := countIssues(c)
	get := func(host string) *tls.Certificate {
		t.Helper()
		cert, err := c.Leaf(host)
		if err != nil {
			t.Fatal(err)
		}
		return cert
	}
	a := get("a.test")
	get("b.test")
	get("c.test")
	if get("a.test") != a { // marks a as recently used
		t.Fatal("a.test not cached")
	}
	get("d.test") // evicts b, the oldest entry not used since insertion
	if got := issued.Load(); got != 4 {
		t.Fatalf("generations: got %d, want 4", got)
	}

	tests := []struct {
		host   string
		cached bool
	}{
		{"a.test", true},
		{"c.test", true},
		{"d.test", true},
		{"b.test", false},
	}
	for _, tc := range tests {
		t.Run(tc.host, func(t *testing.T) {
			c.mu.RLock()
			_, ok := c.entries[tc.host]
			c.mu.RUnlock()
			if ok != tc.cached {
				t.Errorf("cached: got %v, want %v", ok, tc.cached)
			}
		})
	}
	if len(c.entries) != 3 || len(c.ring) != 3 {
		t.Errorf("cache size: %d entries, %d slots; want 3 and 3", len(c.entries), len(c.ring))
	}
}

func TestFetch(t *testing.T) {
	c := mustNew(t)
	var calls int
	gen := func(host string) func() (*tls.Certificate, error) {
		return func() (*tls.Certificate, error) {
			calls++
			return c.issue(host, netip.Addr{})
		}
	}

	a, err := c.Fetch("fetch.test", gen("fetch.test"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Fetch("FETCH.test", gen("fetch.test"))
	if err != nil {
		t.Fatal(err)
	}
	if a != b || calls != 1 {
		t.Errorf("second Fetch: same pointer %v, gen calls %d; want true, 1", a == b, calls)
	}

	// Fetch and Leaf share the cache.
	l, err := c.Leaf("fetch.test")
	if err != nil {
		t.Fatal(err)
	}
	if l != a {
		t.Error("Leaf after Fetch: got a new certificate, want the cached one")
	}

	// A failed generation is not cached.
	failing := func() (*tls.Certificate, error) { calls++; return nil, errors.New("boom") }
	if _, err := c.Fetch("fail.test", failing); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("Fetch with a failing gen: got %v, want boom", err)
	}
	empty := func() (*tls.Certificate, error) { calls++; return &tls.Certificate{}, nil }
	if _, err := c.Fetch("fail.test", empty); err == nil || !strings.Contains(err.Error(), "no certificate") {
		t.Errorf("Fetch with an empty certificate: got %v, want no certificate", err)
	}
	calls = 0
	if _, err := c.Fetch("fail.test", gen("fail.test")); err != nil || calls != 1 {
		t.Errorf("Fetch after failures: err %v, gen calls %d; want nil, 1", err, calls)
	}

	if _, err := c.Fetch("*.test", gen("x.test")); err == nil {
		t.Error("Fetch(*.test): got nil error, want a refused name")
	}
}

func TestServerConfig(t *testing.T) {
	c := mustNew(t)
	tests := []struct {
		name       string
		connect    string // the CONNECT authority
		sni        string // what the client sends and verifies; an IP is not sent
		clientMin  uint16
		clientMax  uint16
		clientALPN []string
		wantName   string // the leaf's DNS name or IP
		strict     bool
		wantErr    string // in the server's handshake error
	}{
		{name: "SNI", connect: "allowed.test:443", sni: "allowed.test", wantName: "allowed.test"},
		{name: "IP, no SNI, falls back to host", connect: "203.0.113.7:443", sni: "203.0.113.7", wantName: "203.0.113.7"},
		{name: "IPv6 authority", connect: "[2001:db8::1]:443", sni: "2001:db8::1", wantName: "2001:db8::1"},
		{name: "h2 not offered", connect: "allowed.test:443", sni: "allowed.test", clientALPN: []string{"h2", "http/1.1"}, wantName: "allowed.test"},
		{name: "SNI other than host is certified", connect: "allowed.test:443", sni: "other.test", wantName: "other.test"},
		{name: "strict, SNI names host", connect: "allowed.test:443", sni: "allowed.test", strict: true, wantName: "allowed.test"},
		{name: "strict, SNI in other case", connect: "Allowed.Test:443", sni: "ALLOWED.test", strict: true, wantName: "allowed.test"},
		{name: "strict, IP without SNI", connect: "203.0.113.7:443", sni: "203.0.113.7", strict: true, wantName: "203.0.113.7"},
		{name: "strict, SNI other than host refused", connect: "allowed.test:443", sni: "other.test", strict: true, wantErr: "does not name the CONNECT host"},
		{name: "strict, name SNI on IP CONNECT refused", connect: "203.0.113.7:443", sni: "allowed.test", strict: true, wantErr: "does not name the CONNECT host"},
		{name: "TLS 1.1 refused", connect: "allowed.test:443", sni: "allowed.test", clientMin: tls.VersionTLS10, clientMax: tls.VersionTLS11, wantErr: "unsupported versions"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			newConfig := c.ServerConfig
			if tc.strict {
				newConfig = c.StrictServerConfig
			}
			cfg, err := newConfig(tc.connect)
			if err != nil {
				t.Fatal(err)
			}
			cliConn, srvConn := loopbackPair(t)
			srv := tls.Server(srvConn, cfg)
			srvErr := make(chan error, 1)
			go func() { srvErr <- srv.Handshake(); srvConn.Close() }()

			cli := tls.Client(cliConn, &tls.Config{
				RootCAs:    c.Pool(),
				ServerName: tc.sni,
				MinVersion: tc.clientMin,
				MaxVersion: tc.clientMax,
				NextProtos: tc.clientALPN,
			})
			err = cli.Handshake()
			if err != nil {
				cliConn.Close() // unblock the server's read
			}
			serr := <-srvErr
			if tc.wantErr != "" {
				if err == nil || serr == nil || !strings.Contains(serr.Error(), tc.wantErr) {
					t.Fatalf("handshake: client %v, server %v; want server error containing %q", err, serr, tc.wantErr)
				}
				return
			}
			if err != nil || serr != nil {
				t.Fatalf("handshake: client %v, server %v", err, serr)
			}
			st := cli.ConnectionState()
			if st.NegotiatedProtocol != "" && st.NegotiatedProtocol != "http/1.1" {
				t.Errorf("ALPN: got %q, want http/1.1 or none", st.NegotiatedProtocol)
			}
			if tc.clientALPN != nil && st.NegotiatedProtocol != "http/1.1" {
				t.Errorf("ALPN: got %q, want http/1.1", st.NegotiatedProtocol)
			}
			leaf := st.PeerCertificates[0]
			got := append(append([]string{}, leaf.DNSNames...), ipStrings(leaf.IPAddresses)...)
			if len(got) != 1 || got[0] != tc.wantName {
				t.Errorf("leaf names: got %v, want [%s]", got, tc.wantName)
			}
		})
	}

	for _, bad := range []string{"", "*.test:443", "bücher.test:443"} {
		if _, err := c.ServerConfig(bad); err == nil {
			t.Errorf("ServerConfig(%q): got nil error, want a refused host", bad)
		}
		if _, err := c.StrictServerConfig(bad); err == nil {
			t.Errorf("StrictServerConfig(%q): got nil error, want a refused host", bad)
		}
	}
	a, _ := c.ServerConfig("allowed.test:443")
	b, _ := c.ServerConfig("allowed.test:443")
	if a == b {
		t.Error("ServerConfig returned a shared config; goproxy mutates what it gets")
	}
}

// loopbackPair returns both ends of a TCP connection on 127.0.0.1 (unlike
// net.Pipe, a failed handshake cannot deadlock on unbuffered writes), each
// with a deadline and closed at cleanup.
func loopbackPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		client.Close()
		t.Fatal("accept failed")
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, c := range []net.Conn{client, server} {
		c.SetDeadline(deadline)
		t.Cleanup(func() { c.Close() })
	}
	return client, server
}

func ipStrings(ips []net.IP) []string {
	var s []string
	for _, ip := range ips {
		s = append(s, ip.String())
	}
	return s
}

func BenchmarkLeafCached(b *testing.B) {
	c := mustNew(b)
	if _, err := c.Leaf("allowed.test"); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Leaf("allowed.test"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLeafCachedParallel(b *testing.B) {
	c := mustNew(b)
	if _, err := c.Leaf("allowed.test"); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.Leaf("allowed.test"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkLeafFresh(b *testing.B) {
	c := mustNew(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		if _, err := c.Leaf(fmt.Sprintf("h%d.test", i)); err != nil {
			b.Fatal(err)
		}
	}
}
