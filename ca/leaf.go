package ca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"
)

// DefaultCacheSize is how many leaf certificates a CA keeps.
const DefaultCacheSize = 10000

const (
	leafValidity = 7 * 24 * time.Hour
	// renewBefore is how long before its NotAfter a cached leaf is
	// replaced, so no client is handed a leaf about to expire.
	renewBefore = 24 * time.Hour
)

// entry is one cached leaf. Only ref changes after insertion.
type entry struct {
	cert    *tls.Certificate
	renewAt time.Time
	ref     atomic.Bool // CLOCK "recently used" bit
}

// call is one leaf generation that other callers for the same key wait on.
type call struct {
	done    chan struct{}
	cert    *tls.Certificate
	err     error
	waiters int // guarded by CA.mu; read by tests
}

// Leaf returns a certificate for host, a DNS name or an IP address (no
// port; IPv6 may be bracketed), issued by c: ECDSA P-256, valid 7 days from
// an hour ago (never past the CA's own expiry), with host as its only
// subject alternative name. Leaves are cached per normalized host and
// reissued a day before they expire; concurrent calls for one host generate
// it once. Names are lowercased and one trailing dot dropped; a wildcard,
// a non-ASCII name or a name ending in a numeric label is refused.
func (c *CA) Leaf(host string) (*tls.Certificate, error) {
	// Keys are normalized names and normalize(key) == key, so a host that
	// is already a key needs no parsing: the common case of a lowercase SNI.
	if cert := c.cached(host); cert != nil {
		return cert, nil
	}
	key, ip, err := normalize(host)
	if err != nil {
		return nil, fmt.Errorf("issue certificate: %w", err)
	}
	return c.fetch(key, func() (*tls.Certificate, error) { return c.issue(key, ip) })
}

// Fetch has the shape of goproxy's CertStorage interface, so a CA can be
// set as ProxyHttpServer.CertStore: it caches gen's certificate under the
// normalized hostname in the cache Leaf uses, and concurrent calls for one
// host call gen once. The two paths share entries, so use one of them.
// ServerConfig is the preferred path: goproxy's TLSConfigFromCA issues
// 365-day leaves with keys derived from the CA key.
func (c *CA) Fetch(hostname string, gen func() (*tls.Certificate, error)) (*tls.Certificate, error) {
	key, _, err := normalize(hostname)
	if err != nil {
		return nil, fmt.Errorf("fetch certificate: %w", err)
	}
	return c.fetch(key, gen)
}

// ServerConfig returns a server-side TLS config for an inspected tunnel to
// host (a CONNECT authority; a port is ignored). Its certificate names the
// ClientHello's SNI, or host when the client sends none (as for an IP
// address); the SNI is not compared with host (see StrictServerConfig).
// Only HTTP/1.1 is offered, since the proxy inspects HTTP/1.1 inside the
// tunnel. Each call returns a new config, which goproxy may modify.
//
// Under goproxy the upstream of an inspected request is taken from the
// inner request's Host header, not from the CONNECT host or the SNI: the
// proxy must check that header itself.
func (c *CA) ServerConfig(host string) (*tls.Config, error) {
	return c.serverConfig(host, false)
}

// StrictServerConfig is ServerConfig, except that the handshake fails when
// the client sends an SNI that does not name host (after normalization),
// as the proxy already requires of spliced tunnels: a client that CONNECTs
// to one name and asks the TLS layer for another is attempting fronting.
func (c *CA) StrictServerConfig(host string) (*tls.Config, error) {
	return c.serverConfig(host, true)
}

func (c *CA) serverConfig(host string, strict bool) (*tls.Config, error) {
	fallback, _, err := normalize(stripPort(host))
	if err != nil {
		return nil, fmt.Errorf("tls config for %q: %w", host, err)
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			name := hello.ServerName
			if name == "" {
				name = fallback
			} else if strict {
				if key, _, err := normalize(name); err != nil || key != fallback {
					return nil, fmt.Errorf("SNI %q does not name the CONNECT host %q", name, fallback)
				}
			}
			return c.Leaf(name)
		},
	}, nil
}

// fetch returns the cached certificate for key or, on a miss or when the
// entry is due for renewal, generates one with gen. The hit path takes only
// a read lock.
func (c *CA) fetch(key string, gen func() (*tls.Certificate, error)) (*tls.Certificate, error) {
	if cert := c.cached(key); cert != nil {
		return cert, nil
	}

	c.mu.Lock()
	if e := c.entries[key]; e != nil && c.now().Before(e.renewAt) {
		c.mu.Unlock()
		return e.cert, nil
	}
	if cl := c.inflight[key]; cl != nil {
		cl.waiters++
		c.mu.Unlock()
		<-cl.done
		return cl.cert, cl.err
	}
	cl := &call{done: make(chan struct{}), err: errors.New("certificate generation panicked")}
	c.inflight[key] = cl
	c.mu.Unlock()

	var renewAt time.Time
	defer func() {
		c.mu.Lock()
		delete(c.inflight, key)
		if cl.err == nil {
			c.store(key, cl.cert, renewAt)
		}
		c.mu.Unlock()
		close(cl.done)
	}()
	if c.beforeIssue != nil {
		c.beforeIssue(key)
	}
	cert, err := gen()
	if err == nil {
		renewAt, err = renewTime(cert)
	}
	if err != nil {
		cert, err = nil, fmt.Errorf("certificate for %s: %w", key, err)
	}
	cl.cert, cl.err = cert, err
	return cert, err
}

// cached returns key's certificate if it is cached and not due for renewal.
func (c *CA) cached(key string) *tls.Certificate {
	c.mu.RLock()
	e := c.entries[key]
	c.mu.RUnlock()
	if e == nil || !c.now().Before(e.renewAt) {
		return nil
	}
	if !e.ref.Load() { // avoid a shared write on every hit
		e.ref.Store(true)
	}
	return e.cert
}

// store inserts or replaces key's entry; c.mu must be held. When the cache
// is full it evicts by CLOCK: the hand passes over (and clears) entries
// used since its last pass and evicts the first unused one, so hot hosts
// stay without the hit path having to take the write lock.
func (c *CA) store(key string, cert *tls.Certificate, renewAt time.Time) {
	ne := &entry{cert: cert, renewAt: renewAt}
	if c.entries[key] != nil { // a renewal keeps its ring slot
		c.entries[key] = ne
		return
	}
	if len(c.ring) < c.capacity {
		c.ring = append(c.ring, key)
		c.entries[key] = ne
		return
	}
	for {
		victim := c.entries[c.ring[c.hand]]
		if !victim.ref.Load() {
			break
		}
		victim.ref.Store(false)
		c.hand = (c.hand + 1) % len(c.ring)
	}
	delete(c.entries, c.ring[c.hand])
	c.ring[c.hand] = key
	c.entries[key] = ne
	c.hand = (c.hand + 1) % len(c.ring)
}

// renewTime is when a cached cert must be replaced.
func renewTime(cert *tls.Certificate) (time.Time, error) {
	if cert == nil || len(cert.Certificate) == 0 {
		return time.Time{}, errors.New("generator returned no certificate")
	}
	leaf := cert.Leaf
	if leaf == nil {
		var err error
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return time.Time{}, fmt.Errorf("parse generated certificate: %w", err)
		}
	}
	return leaf.NotAfter.Add(-renewBefore), nil
}

// issue signs a new leaf for name (normalized; ip is valid when name is an
// address).
func (c *CA) issue(name string, ip netip.Addr) (*tls.Certificate, error) {
	now := c.now()
	notBefore, notAfter := now.Add(-backdate), now.Add(leafValidity)
	if notBefore.Before(c.cert.NotBefore) {
		notBefore = c.cert.NotBefore
	}
	if notAfter.After(c.cert.NotAfter) {
		notAfter = c.cert.NotAfter
	}
	if !notAfter.After(now) {
		return nil, fmt.Errorf("CA %q expired on %s", c.cert.Subject.CommonName, c.cert.NotAfter.UTC().Format(time.RFC3339))
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate leaf key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	if ip.IsValid() {
		tmpl.IPAddresses = []net.IP{ip.AsSlice()}
	} else {
		tmpl.DNSNames = []string{name}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return nil, fmt.Errorf("sign leaf: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse leaf: %w", err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// stripPort drops a port from a host:port authority; anything else is
// returned as is.
func stripPort(hostport string) string {
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		return host
	}
	return hostport
}

// normalize returns the cache key for host: an IP address in canonical
// form (with ip set), or a lowercased DNS name without a trailing dot. The
// names reaching here come from clients (SNI), so only plain LDH names,
// with underscores, are accepted.
func normalize(host string) (key string, ip netip.Addr, err error) {
	h := host
	bracketed := strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]")
	if bracketed {
		h = h[1 : len(h)-1]
	}
	if ip, err := netip.ParseAddr(h); err == nil {
		switch {
		case ip.Zone() != "":
			return "", netip.Addr{}, fmt.Errorf("host %q: an address with a zone", host)
		case bracketed && !ip.Is6():
			return "", netip.Addr{}, fmt.Errorf("host %q: brackets around an IPv4 address", host)
		}
		return ip.String(), ip, nil
	}
	if bracketed {
		return "", netip.Addr{}, fmt.Errorf("host %q: brackets around a name", host)
	}
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	if h == "" || len(h) > 253 {
		return "", netip.Addr{}, fmt.Errorf("host %q: want a name of 1 to 253 characters", host)
	}
	label := 0 // length of the current label
	last := 0  // where the last label starts
	for i := 0; i < len(h); i++ {
		b := h[i]
		switch {
		case b == '.':
			if label == 0 {
				return "", netip.Addr{}, fmt.Errorf("host %q: want labels of 1 to 63 characters", host)
			}
			label, last = 0, i+1
			continue
		case !(b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '-' || b == '_'):
			return "", netip.Addr{}, fmt.Errorf("host %q: character %q not allowed in a name", host, b)
		}
		if label++; label > 63 {
			return "", netip.Addr{}, fmt.Errorf("host %q: want labels of 1 to 63 characters", host)
		}
	}
	if label == 0 {
		return "", netip.Addr{}, fmt.Errorf("host %q: want labels of 1 to 63 characters", host)
	}
	// A name ending in a number is an IPv4 address in some other spelling
	// (decimal, octal, hex parts), never a name to certify.
	if isNumeric(h[last:]) {
		return "", netip.Addr{}, fmt.Errorf("host %q: ends in a numeric label, not a name", host)
	}
	return h, netip.Addr{}, nil
}

// isNumeric reports whether s is a decimal number or a 0x hex number.
func isNumeric(s string) bool {
	if rest, ok := strings.CutPrefix(s, "0x"); ok {
		s = rest
		if s == "" {
			return true
		}
		return strings.Trim(s, "0123456789abcdef") == ""
	}
	return strings.Trim(s, "0123456789") == ""
}
