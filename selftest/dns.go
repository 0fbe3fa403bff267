package selftest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

// question is the name the DNS probes ask for.
func (r *runner) question() string {
	if r.c.CanaryName != "" {
		return r.c.CanaryName
	}
	return "example.com"
}

func dnsQuery(name string) ([]byte, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	m.RecursionDesired = true
	b, err := m.Pack()
	if err != nil {
		return nil, fmt.Errorf("pack query for %s: %w", name, err)
	}
	return b, nil
}

// replyTo returns an accept func that takes only a DNS response to query.
func replyTo(query []byte) func([]byte) bool {
	id := binary.BigEndian.Uint16(query)
	return func(b []byte) bool {
		var m dns.Msg
		return m.Unpack(b) == nil && m.Response && m.Id == id
	}
}

// dnsDirect sends a query straight to a public resolver: any answer, or a
// TCP connection at all, is a leak.
func (r *runner) dnsDirect(ctx context.Context, network string, ap netip.AddrPort) outcome {
	q, err := dnsQuery(r.question())
	if err != nil {
		return errored("no query", err.Error())
	}
	if network == "udp" {
		n, err := r.exchangeUDP(ctx, ap, q, nil)
		if err == nil {
			return leak(fmt.Sprintf("answered (%d bytes)", n), fmt.Sprintf("the resolver %s answered a query sent directly: DNS gets out, and with it any data spelled into names", ap))
		}
		return datagramOutcome(err)
	}
	c, err := r.dialTCP(ctx, ap)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return leak("connection refused", refusedByTarget)
		}
		if res, ok := blockedErr(err); ok {
			return pass(res)
		}
		return errored("dial failed", err.Error())
	}
	defer c.Close()
	res := "connected"
	if d, ok := ctx.Deadline(); ok {
		c.SetDeadline(d)
	}
	if m, err := exchangeTCP(c, q); err == nil {
		res = "answered " + dns.RcodeToString[m.Rcode]
	}
	return leak(res, fmt.Sprintf("a direct TCP connection to the resolver %s succeeded: DNS over TCP gets out", ap))
}

// exchangeTCP sends one length-prefixed query and returns the answer.
func exchangeTCP(c io.ReadWriter, q []byte) (*dns.Msg, error) {
	b := make([]byte, 2+len(q))
	binary.BigEndian.PutUint16(b, uint16(len(q)))
	copy(b[2:], q)
	if _, err := c.Write(b); err != nil {
		return nil, err
	}
	var l [2]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		return nil, err
	}
	resp := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(c, resp); err != nil {
		return nil, err
	}
	m := new(dns.Msg)
	if err := m.Unpack(resp); err != nil {
		return nil, err
	}
	return m, nil
}

// askResolver puts q to the sandbox resolver: over TCP with
// Config.ResolverTCP, else over UDP (resent until the context ends).
func (r *runner) askResolver(ctx context.Context, q []byte) (*dns.Msg, error) {
	if r.c.ResolverTCP {
		c, err := r.c.ResolverDial(ctx, "tcp", r.c.DNS.String())
		if err != nil {
			return nil, err
		}
		defer c.Close()
		stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
		defer stop()
		m, err := exchangeTCP(c, q)
		if err != nil {
			return nil, ctxErr(ctx, err)
		}
		if m.Id != binary.BigEndian.Uint16(q) || !m.Response {
			return nil, errors.New("the reply does not answer the query")
		}
		return m, nil
	}
	var reply []byte
	accept := replyTo(q)
	_, err := exchangeUDP(ctx, r.c.ResolverDial, r.c.DNS, q, func(b []byte) bool {
		if accept(b) {
			reply = append([]byte(nil), b...)
			return true
		}
		return false
	})
	if err != nil {
		return nil, err
	}
	m := new(dns.Msg)
	if err := m.Unpack(reply); err != nil {
		return nil, err
	}
	return m, nil
}

// dnsCanary asks the sandbox's own resolver for the canary name. The
// resolver must say the name does not exist: an address, or an empty
// success, means it treats the name as allowed and forwards it upstream.
func (r *runner) dnsCanary(ctx context.Context) outcome {
	q, err := dnsQuery(r.c.CanaryName)
	if err != nil {
		return errored("no query", err.Error())
	}
	m, err := r.askResolver(ctx, q)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return errored("no answer", fmt.Sprintf("the sandbox resolver %s did not answer within %v: the probe cannot tell", r.c.DNS, r.c.Timeout))
		}
		return errored("no answer", fmt.Sprintf("query to the sandbox resolver %s: %v", r.c.DNS, err))
	}
	rc := dns.RcodeToString[m.Rcode]
	switch m.Rcode {
	case dns.RcodeNameError, dns.RcodeRefused:
		return pass(rc)
	case dns.RcodeSuccess:
		var addrs []string
		for _, rr := range m.Answer {
			switch a := rr.(type) {
			case *dns.A:
				addrs = append(addrs, a.A.String())
			case *dns.AAAA:
				addrs = append(addrs, a.AAAA.String())
			}
		}
		if len(addrs) == 0 {
			return leak("NOERROR, no data", fmt.Sprintf("the resolver treats %s as allowed (an empty NOERROR): the query went upstream, so names can carry data out", r.c.CanaryName))
		}
		return leak("answered "+strings.Join(addrs, ","), fmt.Sprintf("the resolver resolved the canary %s: the name is allowed, so names can carry data out", r.c.CanaryName))
	case dns.RcodeServerFailure:
		return errored(rc, "SERVFAIL: an upstream failure or a rate limit; the probe cannot tell whether the name was forwarded")
	}
	return errored(rc, "unexpected answer from the sandbox resolver")
}
