// Package dnsclient is egressd's one client for upstream DNS resolvers:
// the proxy's resolver and the DNS filter both ask through it, so an
// upstream's answer is checked in one place and the same way on both
// paths (Check: message ID, response to a query, the question echoed,
// a final rcode; a truncated UDP answer asked again over TCP).
//
// It imports none of egressd's packages: it knows nothing of policy,
// only of the DNS protocol (miekg/dns).
package dnsclient

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// EDNSSize is the UDP payload size advertised upstream (the DNS Flag Day
// 2020 value: no IP fragmentation).
const EDNSSize = 1232

// DefaultTimeout bounds one exchange when Client.Timeout is zero.
const DefaultTimeout = 1500 * time.Millisecond

// Client sends queries to upstream resolvers and checks their answers.
// The zero value dials with a net.Dialer in the caller's network
// namespace. A Client is safe for concurrent use.
type Client struct {
	// Dial opens a connection to an upstream; network is "udp" or "tcp".
	// Nil: a net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Timeout bounds one exchange with one upstream (UDP and the TCP
	// retry each). Zero: DefaultTimeout.
	Timeout time.Duration
}

// NewQuery builds a fresh query for one question: a new random ID,
// recursion desired, EDNS0 with EDNSSize and no options. Callers never
// forward a client's message: no client EDNS options (ECS, cookies,
// padding) and no other sections go upstream.
func NewQuery(fqdn string, qtype uint16) *dns.Msg {
	q := new(dns.Msg)
	q.Id = dns.Id()
	q.RecursionDesired = true
	q.Question = []dns.Question{{Name: fqdn, Qtype: qtype, Qclass: dns.ClassINET}}
	q.SetEdns0(EDNSSize, false)
	return q
}

// Ask sends q to each upstream in turn until one gives an answer that
// passes Check, and returns it with the upstream that gave it and the
// round trip time. The error joins every upstream's failure.
func (c *Client) Ask(ctx context.Context, ups []netip.AddrPort, q *dns.Msg) (*dns.Msg, netip.AddrPort, time.Duration, error) {
	var errs []error
	for _, up := range ups {
		resp, rtt, err := c.Exchange(ctx, up, q)
		if err == nil {
			return resp, up, rtt, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	if len(errs) == 0 {
		return nil, netip.AddrPort{}, 0, errors.New("no upstream resolver configured")
	}
	return nil, netip.AddrPort{}, 0, errors.Join(errs...)
}

// Exchange sends q to up over UDP, asks again over TCP when the answer is
// truncated, and returns the answer only if it passes Check. Errors name
// the upstream.
func (c *Client) Exchange(ctx context.Context, up netip.AddrPort, q *dns.Msg) (*dns.Msg, time.Duration, error) {
	resp, rtt, err := c.exchange(ctx, "udp", up, q)
	if err == nil && resp.Truncated {
		resp, rtt, err = c.exchange(ctx, "tcp", up, q)
	}
	if err == nil {
		err = Check(q, resp)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("upstream %s: %w", up, err)
	}
	return resp, rtt, nil
}

func (c *Client) exchange(ctx context.Context, network string, up netip.AddrPort, q *dns.Msg) (*dns.Msg, time.Duration, error) {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	dial := c.Dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	conn, err := dial(ctx, network, up.String())
	if err != nil {
		return nil, 0, fmt.Errorf("dial %s: %w", network, err)
	}
	defer conn.Close()
	// dns.Client has no dial hook; ExchangeWithConnContext takes the conn
	// Dial opened and uses it as UDP when it is a PacketConn, with length
	// framing otherwise. It sets the deadlines from ctx.
	resp, rtt, err := new(dns.Client).ExchangeWithConnContext(ctx, q, &dns.Conn{Conn: conn})
	if err != nil {
		return nil, 0, fmt.Errorf("exchange over %s: %w", network, err)
	}
	return resp, rtt, nil
}

// Check accepts resp only as the answer to q: the same message ID, a
// response to a standard query, the one question echoed (names compared
// case-insensitively, as resolvers may echo 0x20-mixed case), and a final
// rcode (NOERROR or NXDOMAIN). Anything else is an upstream failure,
// never an answer.
func Check(q, resp *dns.Msg) error {
	switch {
	case resp.Id != q.Id:
		return fmt.Errorf("reply id %d to query id %d", resp.Id, q.Id)
	case !resp.Response || resp.Opcode != dns.OpcodeQuery:
		return errors.New("not a query response")
	case len(resp.Question) != 1 || len(q.Question) != 1:
		return fmt.Errorf("response has %d questions", len(resp.Question))
	}
	want, got := q.Question[0], resp.Question[0]
	if !strings.EqualFold(got.Name, want.Name) || got.Qtype != want.Qtype || got.Qclass != want.Qclass {
		return fmt.Errorf("response to another question (%s %s)", got.Name, dns.Type(got.Qtype))
	}
	if resp.Rcode != dns.RcodeSuccess && resp.Rcode != dns.RcodeNameError {
		return fmt.Errorf("rcode %s", dns.RcodeToString[resp.Rcode])
	}
	return nil
}
