package testnet

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// DefaultRecords are the names the fake DNS server answers (A and AAAA
// from the addresses given); any other name gets NXDOMAIN. Read-only:
// change a Topo's records with WithRecords or DNSServer.Set.
var DefaultRecords = map[string][]netip.Addr{
	"allowed.test":  {OriginAddr4, OriginAddr6},
	"other.test":    {OriginAddr4, OriginAddr6},
	"origin.test":   {OriginAddr4, OriginAddr6},
	"v4only.test":   {OriginAddr4},
	"v6only.test":   {OriginAddr6},
	"meta.test":     {MetadataAddr4},                    // rebinding to the metadata server
	"private.test":  {netip.MustParseAddr("10.0.0.1")},  // a private answer
	"loopback.test": {netip.MustParseAddr("127.0.0.1")}, // a loopback answer
	"gateway.test":  {GatewayAddr4, GatewayAddr6},       // egressd itself
	"mixed.test":    {OriginAddr4, MetadataAddr4},       // one good, one bad
}

// Hit is one thing a fake service saw.
type Hit struct {
	// Remote is the peer's address: 198.51.100.2 for a sandbox that got
	// through directly, 203.0.113.1 for traffic from gw (the proxy).
	Remote netip.AddrPort
	// Local is the address the service was reached on.
	Local netip.AddrPort
	// What says what was asked: "GET allowed.test /path" for HTTP (with
	// "sni=NAME" for TLS), "A allowed.test." for DNS, the byte count for
	// echo, "accept" for plain TCP.
	What string
}

// Service is a fake internet service and the hits it saw. A hit is
// recorded before the service answers, so a client that has the answer can
// count it at once. Safe for concurrent use.
type Service struct {
	// Name says what the service is ("origin", "tcp/22", ...).
	Name string
	// Addrs are the addresses it listens on.
	Addrs []netip.AddrPort

	mu   sync.Mutex
	hits []Hit
}

// Hits is the number of hits so far.
func (s *Service) Hits() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.hits)
}

// Seen returns a copy of the hits so far.
func (s *Service) Seen() []Hit {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Hit(nil), s.hits...)
}

// Reset forgets the hits so far.
func (s *Service) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hits = nil
}

func (s *Service) record(remote, local net.Addr, what string) {
	h := Hit{Remote: addrPort(remote.String()), Local: addrPort(local.String()), What: what}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hits = append(s.hits, h)
}

func addrPort(s string) netip.AddrPort {
	ap, _ := netip.ParseAddrPort(s)
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// DNSServer is the fake internet's authoritative DNS server. Its records
// can be changed while it runs.
type DNSServer struct {
	Service

	rmu     sync.RWMutex
	records map[string][]netip.Addr // keys: lower-case FQDN
}

// Set replaces name's addresses; no addresses makes the name NXDOMAIN.
func (d *DNSServer) Set(name string, addrs ...netip.Addr) {
	d.rmu.Lock()
	defer d.rmu.Unlock()
	if len(addrs) == 0 {
		delete(d.records, canonName(name))
		return
	}
	d.records[canonName(name)] = append([]netip.Addr(nil), addrs...)
}

func canonName(n string) string { return strings.ToLower(dns.Fqdn(n)) }

// ServeDNS answers A and AAAA queries from the records, NXDOMAIN for
// unknown names, and records every query as a hit.
func (d *DNSServer) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	if len(r.Question) != 1 {
		m.SetRcode(r, dns.RcodeFormatError)
		w.WriteMsg(m)
		return
	}
	q := r.Question[0]
	d.record(w.RemoteAddr(), w.LocalAddr(), dns.TypeToString[q.Qtype]+" "+q.Name)
	d.rmu.RLock()
	addrs, ok := d.records[canonName(q.Name)]
	d.rmu.RUnlock()
	if !ok {
		m.SetRcode(r, dns.RcodeNameError)
		w.WriteMsg(m)
		return
	}
	hdr := dns.RR_Header{Name: q.Name, Class: dns.ClassINET, Ttl: 5, Rrtype: q.Qtype}
	for _, a := range addrs {
		switch {
		case q.Qtype == dns.TypeA && a.Is4():
			m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: a.AsSlice()})
		case q.Qtype == dns.TypeAAAA && a.Is6():
			m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: a.AsSlice()})
		}
	}
	w.WriteMsg(m)
}

// startServices starts every fake service in inet. Listeners are opened
// here, so a service that cannot start fails New.
func (t *Topo) startServices(cfg *config) (err error) {
	secret := make([]byte, 16)
	rand.Read(secret)
	t.MetadataSecret = "egressd-testnet-metadata-secret-" + hex.EncodeToString(secret)
	if t.CA, err = newCA(); err != nil {
		return err
	}
	origins := []netip.Addr{OriginAddr4, OriginAddr6}

	t.Origin = &Service{Name: "origin"}
	handler := cfg.originHandler
	if handler == nil {
		handler = http.HandlerFunc(originHandler)
	}
	if err := t.serveHTTP(t.Origin, origins, 80, nil, handler); err != nil {
		return err
	}
	t.TLS = &Service{Name: "tls-origin"}
	if err := t.serveHTTP(t.TLS, origins, 443, t.CA.serverConfig, handler); err != nil {
		return err
	}
	t.Metadata = &Service{Name: "metadata"}
	secretBody := t.MetadataSecret + "\n"
	if err := t.serveHTTP(t.Metadata, []netip.Addr{MetadataAddr4}, 80, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, secretBody)
	})); err != nil {
		return err
	}

	t.DNS = &DNSServer{Service: Service{Name: "dns"}, records: map[string][]netip.Addr{}}
	for n, a := range cfg.records {
		t.DNS.Set(n, a...)
	}
	for _, a := range []netip.Addr{DNSAddr4, DNSAddr6} {
		if err := t.serveDNS(a); err != nil {
			return err
		}
	}

	t.TCP = map[uint16]*Service{}
	for _, p := range TCPPorts {
		s := &Service{Name: fmt.Sprintf("tcp/%d", p)}
		t.TCP[p] = s
		for _, a := range origins {
			if err := t.serveTCP(s, netip.AddrPortFrom(a, p)); err != nil {
				return err
			}
		}
	}
	t.UDP = map[uint16]*Service{}
	for _, p := range UDPPorts {
		s := &Service{Name: fmt.Sprintf("udp/%d", p)}
		t.UDP[p] = s
		for _, a := range origins {
			if err := t.serveUDPEcho(s, netip.AddrPortFrom(a, p)); err != nil {
				return err
			}
		}
	}
	return nil
}

// originHandler answers every request with 200 and a line naming what it
// saw, so a test can tell the origin's answer from a proxy's.
func originHandler(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	fmt.Fprintf(w, "origin ok: %s %s %s\n", r.Method, r.Host, r.URL.RequestURI())
}

func (t *Topo) serveHTTP(s *Service, addrs []netip.Addr, port uint16, tlsConf *tls.Config, h http.Handler) error {
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			what := r.Method + " " + r.Host + " " + r.URL.RequestURI()
			if r.TLS != nil {
				what += " sni=" + r.TLS.ServerName
			}
			local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
			s.mu.Lock()
			s.hits = append(s.hits, Hit{Remote: addrPort(r.RemoteAddr), Local: addrPort(fmt.Sprint(local)), What: what})
			s.mu.Unlock()
			h.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 5 * time.Second,
		// Refused handshakes are what many tests provoke; keep them quiet.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	// Registered first, so it runs last, also when a later listen fails.
	var wg sync.WaitGroup
	t.onClose(func() {
		srv.Close()
		wg.Wait()
	})
	for _, a := range addrs {
		ap := netip.AddrPortFrom(a, port)
		l, err := t.ListenInInternet("tcp", ap.String())
		if err != nil {
			return err
		}
		s.Addrs = append(s.Addrs, ap)
		if tlsConf != nil {
			l = tls.NewListener(l, tlsConf)
		}
		wg.Go(func() { srv.Serve(l) })
	}
	return nil
}

func (t *Topo) serveDNS(a netip.Addr) error {
	ap := netip.AddrPortFrom(a, 53)
	pc, err := t.ListenPacketInInternet("udp", ap.String())
	if err != nil {
		return err
	}
	l, err := t.ListenInInternet("tcp", ap.String())
	if err != nil {
		return err
	}
	t.DNS.Addrs = append(t.DNS.Addrs, ap)
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: t.DNS}, {Listener: l, Handler: t.DNS}} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		done := make(chan error, 1)
		go func() { done <- srv.ActivateAndServe() }()
		select {
		case <-started:
		case err := <-done:
			return fmt.Errorf("dns server on %s: %w", ap, err)
		}
		t.onClose(func() {
			srv.Shutdown()
			<-done
		})
	}
	return nil
}

// serveTCP accepts, records, writes a one-line banner and closes.
func (t *Topo) serveTCP(s *Service, ap netip.AddrPort) error {
	l, err := t.ListenInInternet("tcp", ap.String())
	if err != nil {
		return err
	}
	s.Addrs = append(s.Addrs, ap)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s.record(c.RemoteAddr(), c.LocalAddr(), "accept")
			c.SetWriteDeadline(time.Now().Add(time.Second))
			fmt.Fprintf(c, "testnet %s\n", s.Name)
			c.Close()
		}
	}()
	t.onClose(func() { l.Close(); <-done })
	return nil
}

// serveUDPEcho records and echoes every datagram.
func (t *Topo) serveUDPEcho(s *Service, ap netip.AddrPort) error {
	pc, err := t.ListenPacketInInternet("udp", ap.String())
	if err != nil {
		return err
	}
	s.Addrs = append(s.Addrs, ap)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 64<<10)
		for {
			n, from, err := pc.ReadFrom(buf)
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				continue
			}
			s.record(from, pc.LocalAddr(), fmt.Sprintf("%d bytes", n))
			pc.WriteTo(buf[:n], from)
		}
	}()
	t.onClose(func() { pc.Close(); <-done })
	return nil
}

// newTLSClientConfig trusts roots only.
func newTLSClientConfig(roots *x509.CertPool) *tls.Config {
	return &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
}
