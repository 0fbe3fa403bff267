package dnsfilter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/egressd/egressd/dnsclient"
	"github.com/egressd/egressd/policy"
	"github.com/miekg/dns"
)

// systemTTL is the TTL of answers built from the system resolver, which
// does not report one.
const systemTTL = 60

// resolve asks for qtype records of fqdn (lower case): the upstreams in
// order through the one upstream client (which checks each answer), or
// the system resolver when there are none. The answer's rcode is NOERROR
// or NXDOMAIN; anything else is an error.
func (s *Server) resolve(ctx context.Context, ups []netip.AddrPort, fqdn string, qtype uint16) (*dns.Msg, netip.AddrPort, time.Duration, error) {
	if len(ups) == 0 {
		start := time.Now()
		m, err := s.lookupSystem(ctx, fqdn, qtype)
		return m, netip.AddrPort{}, time.Since(start), err
	}
	// A fresh query rather than the client's (see dnsclient.NewQuery).
	return s.up.Ask(ctx, ups, dnsclient.NewQuery(fqdn, qtype))
}

// lookupSystem resolves with Go's own resolver (resolv.conf and hosts),
// dialing through s.dial, and builds an answer of address records. A name
// with no addresses comes back as NODATA: Go reports NXDOMAIN and NODATA
// alike as not found, and NODATA is the answer that denies less.
func (s *Server) lookupSystem(ctx context.Context, fqdn string, qtype uint16) (*dns.Msg, error) {
	network := "ip4"
	if qtype == dns.TypeAAAA {
		network = "ip6"
	}
	r := &net.Resolver{PreferGo: true, Dial: s.dial}
	addrs, err := r.LookupNetIP(ctx, network, fqdn) // the final dot keeps search domains out
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
		addrs, err = nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("system resolver: %w", err)
	}
	m := &dns.Msg{MsgHdr: dns.MsgHdr{Response: true, Rcode: dns.RcodeSuccess}}
	for _, a := range addrs {
		hdr := dns.RR_Header{Name: fqdn, Rrtype: qtype, Class: dns.ClassINET, Ttl: systemTTL}
		switch {
		case qtype == dns.TypeA && a.Unmap().Is4():
			m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: a.Unmap().AsSlice()})
		case qtype == dns.TypeAAAA && a.Is6() && !a.Is4In6():
			m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: a.AsSlice()})
		}
	}
	return m, nil
}

// filtered is an upstream answer after filterAnswer.
type filtered struct {
	kept    []dns.RR
	dropped int    // address records removed by the policy
	why     string // why the first was removed: its address class, or the CNAME target
}

// filterAnswer keeps the CNAME chain that starts at qname and the qtype
// records at its end whose address the policy lets rule reach. Records
// for other names, other types (DNAME, RRSIG, ...) and chains longer than
// maxCNAMEChain are left out. A chain through a high-risk or malformed
// name drops every address: the name-level deny holds behind an alias too.
func filterAnswer(p *policy.Policy, rule *policy.Rule, qname string, qtype uint16, answer []dns.RR) filtered {
	var f filtered
	owner := qname
	for range maxCNAMEChain {
		var next *dns.CNAME
		for _, rr := range answer {
			if c, ok := rr.(*dns.CNAME); ok && c.Hdr.Class == dns.ClassINET && strings.EqualFold(c.Hdr.Name, owner) {
				next = c
				break
			}
		}
		if next == nil {
			break
		}
		target, addr, err := policy.NormalizeHost(strings.TrimSuffix(next.Target, "."))
		if err != nil || addr.IsValid() || p.HighRiskName(target) {
			f = filtered{why: "cname " + next.Target}
			for _, rr := range answer {
				if rr.Header().Rrtype == qtype {
					f.dropped++
				}
			}
			return f
		}
		f.kept = append(f.kept, next)
		owner = next.Target
	}
	for _, rr := range answer {
		h := rr.Header()
		if h.Rrtype != qtype || h.Class != dns.ClassINET || !strings.EqualFold(h.Name, owner) {
			continue
		}
		a, ok := rrAddr(rr)
		if ok {
			var info policy.AddrInfo
			if ok, info = p.CheckAddr(rule, a); !ok && f.why == "" {
				f.why = info.Class.String()
			}
		}
		if !ok {
			f.dropped++
			continue
		}
		f.kept = append(f.kept, rr)
	}
	return f
}

// rrAddr is the address of an A or AAAA record. An A record must hold an
// IPv4 address and an AAAA record an IPv6 one that is not IPv4-mapped.
func rrAddr(rr dns.RR) (netip.Addr, bool) {
	switch rr := rr.(type) {
	case *dns.A:
		a, ok := netip.AddrFromSlice(rr.A)
		a = a.Unmap()
		return a, ok && a.Is4()
	case *dns.AAAA:
		a, ok := netip.AddrFromSlice(rr.AAAA)
		return a, ok && a.Is6() && !a.Is4In6()
	}
	return netip.Addr{}, false
}
