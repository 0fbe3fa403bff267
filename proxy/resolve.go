package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/egressd/egressd/dnsclient"
)

// Resolver looks names up only through the configured upstreams (through
// dnsclient, the DNS filter's client too, which checks every answer), or
// through Go's own resolver when none are configured — never cgo, never
// the proxy environment. Answers are cached
// for their TTL (bounded), which is safe because every address is checked
// at dial time, on each connection.
type Resolver struct {
	Upstreams []netip.AddrPort
	// Dial opens the socket to an upstream; nil means a plain net.Dialer.
	// Tests and namespaced deployments inject their own.
	Dial    func(ctx context.Context, network, addr string) (net.Conn, error)
	Timeout time.Duration // per upstream attempt; 0 means 2s

	mu    sync.Mutex
	cache map[string]cacheEntry
}

type cacheEntry struct {
	addrs   []netip.Addr
	expires time.Time
}

const (
	maxCacheEntries = 10000
	maxCacheTTL     = 5 * time.Minute
	minCacheTTL     = time.Second
)

// ErrNoAddress means the name resolved to nothing usable.
var ErrNoAddress = errors.New("no address")

// Lookup returns the A and AAAA answers for name, IPv4 first.
func (r *Resolver) Lookup(ctx context.Context, name string) ([]netip.Addr, error) {
	now := time.Now()
	r.mu.Lock()
	if e, ok := r.cache[name]; ok && now.Before(e.expires) {
		r.mu.Unlock()
		return e.addrs, nil
	}
	r.mu.Unlock()
	var addrs []netip.Addr
	var ttl time.Duration
	var err error
	if len(r.Upstreams) == 0 {
		addrs, err = r.system(ctx, name)
		ttl = 30 * time.Second
	} else {
		addrs, ttl, err = r.upstream(ctx, name)
	}
	if err != nil {
		return nil, err
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("resolve %s: %w", name, ErrNoAddress)
	}
	r.mu.Lock()
	if r.cache == nil || len(r.cache) >= maxCacheEntries {
		r.cache = make(map[string]cacheEntry)
	}
	r.cache[name] = cacheEntry{addrs: addrs, expires: now.Add(min(max(ttl, minCacheTTL), maxCacheTTL))}
	r.mu.Unlock()
	return addrs, nil
}

func (r *Resolver) system(ctx context.Context, name string) ([]netip.Addr, error) {
	res := &net.Resolver{PreferGo: true}
	if r.Dial != nil {
		res.Dial = r.Dial
	}
	ips, err := res.LookupNetIP(ctx, "ip", name)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", name, err)
	}
	out := make([]netip.Addr, 0, len(ips))
	for _, a := range ips {
		out = append(out, a.Unmap())
	}
	return sortV4First(out), nil
}

// upstream asks each upstream in turn for A and AAAA (in parallel) and
// returns the first server's answers.
func (r *Resolver) upstream(ctx context.Context, name string) ([]netip.Addr, time.Duration, error) {
	var lastErr error
	for _, up := range r.Upstreams {
		type result struct {
			addrs []netip.Addr
			ttl   uint32
			err   error
		}
		ch := make(chan result, 2)
		for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA} {
			go func() {
				a, ttl, err := r.query(ctx, up, name, qt)
				ch <- result{a, ttl, err}
			}()
		}
		var addrs []netip.Addr
		ttl := uint32(maxCacheTTL / time.Second)
		var errs []error
		for range 2 {
			res := <-ch
			if res.err != nil {
				errs = append(errs, res.err)
				continue
			}
			addrs = append(addrs, res.addrs...)
			ttl = min(ttl, res.ttl)
		}
		if len(errs) < 2 {
			return sortV4First(addrs), time.Duration(ttl) * time.Second, nil
		}
		lastErr = errors.Join(errs...)
	}
	return nil, 0, fmt.Errorf("resolve %s: %w", name, lastErr)
}

// query asks up for qt records of name through the one upstream client
// (the DNS filter's too), which checks the answer; an NXDOMAIN is no
// addresses, not an upstream failure.
func (r *Resolver) query(ctx context.Context, up netip.AddrPort, name string, qt uint16) ([]netip.Addr, uint32, error) {
	timeout := r.Timeout
	if timeout == 0 {
		timeout = 2 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := dnsclient.Client{Dial: r.Dial, Timeout: timeout}
	resp, _, err := c.Exchange(ctx, up, dnsclient.NewQuery(dns.Fqdn(name), qt))
	if err != nil {
		return nil, 0, fmt.Errorf("query %s: %w", dns.TypeToString[qt], err)
	}
	var out []netip.Addr
	ttl := uint32(maxCacheTTL / time.Second)
	want := strings.ToLower(dns.Fqdn(name))
	for _, rr := range resp.Answer {
		// Follow only records for the name or its CNAME chain; the
		// chain order in the answer section is what resolvers send.
		h := rr.Header()
		if !strings.EqualFold(h.Name, want) {
			continue
		}
		switch v := rr.(type) {
		case *dns.CNAME:
			want = strings.ToLower(v.Target)
		case *dns.A:
			if a, ok := netip.AddrFromSlice(v.A.To4()); ok {
				out = append(out, a)
			}
		case *dns.AAAA:
			if a, ok := netip.AddrFromSlice(v.AAAA); ok {
				out = append(out, a.Unmap())
			}
		default:
			continue
		}
		ttl = min(ttl, h.Ttl)
	}
	return out, ttl, nil
}

func sortV4First(a []netip.Addr) []netip.Addr {
	out := a[:0:0]
	for _, x := range a {
		if x.Is4() {
			out = append(out, x)
		}
	}
	for _, x := range a {
		if !x.Is4() {
			out = append(out, x)
		}
	}
	return out
}
