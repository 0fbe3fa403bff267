package selftest

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"syscall"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// resendEvery is how often a datagram probe sends again while it waits: one
// datagram lost to a neighbour entry still resolving must not read as
// blocked.
const resendEvery = 250 * time.Millisecond

// blockedErr says whether a dial or read error means the wall held, and
// how. ok is false for errors that prove nothing (the probe's own socket
// failed): the caller reports those as errors.
func blockedErr(err error) (result string, ok bool) {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "blocked (no answer)", true
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		// egressd's walls answer IPv4 with an ICMP administratively
		// prohibited, which arrives as EHOSTUNREACH.
		return "blocked (unreachable)", true
	case errors.Is(err, syscall.EACCES):
		// The same answer over IPv6 (ICMPv6 administratively prohibited).
		return "blocked (administratively prohibited)", true
	case errors.Is(err, syscall.EPERM):
		// A local output filter refuses the send.
		return "blocked (refused locally)", true
	}
	return "", false
}

// refusedByTarget: a TCP reset or an ICMP port-unreachable came back, so a
// packet reached the target host. egressd's walls answer with an ICMP
// administratively prohibited instead (EHOSTUNREACH, EACCES: blockedErr),
// or, for a forged source or past the kernel's ICMP rate limit, nothing.
const refusedByTarget = "a reset or port-unreachable came back: the packet reached the target (egressd's walls refuse with administratively prohibited, never a reset; a REJECT with a reset elsewhere on the path also reads as this)"

// tcpResendAfter is when a direct TCP probe connects again while its
// first connect has had no answer: the kernel retransmits a SYN only after
// 1 s (its initial RTO), so one lost SYN on a path out would read as
// blocked within a timeout of 1 s (datagram probes send again every
// resendEvery).
const tcpResendAfter = 500 * time.Millisecond

// dialTCP connects directly to ap, a second time in parallel if the first
// has had no answer after tcpResendAfter. The first answer wins: a
// connection or an error other than a timeout (a refusal, a reset); the
// other connect is cancelled and anything it opens closed.
func (r *runner) dialTCP(ctx context.Context, ap netip.AddrPort) (net.Conn, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		c   net.Conn
		err error
	}
	results := make(chan result, 2)
	dial := func() {
		c, err := r.c.Dial(ctx, "tcp", ap.String())
		results <- result{c, err}
	}
	go dial()
	again := time.NewTimer(tcpResendAfter)
	defer again.Stop()
	started, pending := 1, 1
	var last result
	for pending > 0 {
		select {
		case <-again.C:
			if started == 1 {
				started, pending = 2, pending+1
				go dial()
			}
		case last = <-results:
			pending--
			if last.err == nil || !timedOut(last.err) {
				go func(n int) { // cancel (deferred) ends it at once
					for range n {
						if res := <-results; res.c != nil {
							res.c.Close()
						}
					}
				}(pending)
				return last.c, last.err
			}
		}
	}
	return last.c, last.err
}

// timedOut says whether err is a wait that ended without an answer.
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// tcp connects directly; a connection or a reset is a leak.
func (r *runner) tcp(ctx context.Context, ap netip.AddrPort) outcome {
	c, err := r.dialTCP(ctx, ap)
	if err == nil && r.redirectedTo(ap) {
		defer c.Close()
		return redirected(ctx, c, ap)
	}
	if err == nil {
		c.Close()
		if slices.Contains(r.c.Redirected, ap.Port()) {
			return leak("connected", fmt.Sprintf("a direct TCP connection to %s succeeded: the walls let it out, or intercepted a destination no rule could allow (to any probe a user writes, that is a way out)", ap))
		}
		return leak("connected", fmt.Sprintf("a direct TCP connection to %s succeeded: the walls let it out", ap))
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return leak("connection refused", refusedByTarget)
	}
	if res, ok := blockedErr(err); ok {
		return pass(res)
	}
	return errored("dial failed", err.Error())
}

// udp sends a datagram the target's service answers; a reply is a leak.
func (r *runner) udp(ctx context.Context, ap netip.AddrPort) outcome {
	var payload []byte
	switch ap.Port() {
	case 53:
		q, err := dnsQuery(r.question())
		if err != nil {
			return errored("no query", err.Error())
		}
		payload = q
	case 123:
		payload = ntpRequest()
	default:
		payload = []byte("egressd-selftest probe\n")
	}
	n, err := r.exchangeUDP(ctx, ap, payload, nil)
	if err == nil {
		return leak(fmt.Sprintf("reply of %d bytes", n), fmt.Sprintf("%s answered a datagram sent directly: UDP gets out", ap))
	}
	return datagramOutcome(err)
}

func datagramOutcome(err error) outcome {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return leak("port unreachable", refusedByTarget)
	}
	if res, ok := blockedErr(err); ok {
		return pass(res)
	}
	return errored("socket failed", err.Error())
}

// exchangeUDP sends payload to ap until a datagram comes back (or accept,
// if set, takes one) or ctx ends; it returns the reply's length.
func (r *runner) exchangeUDP(ctx context.Context, ap netip.AddrPort, payload []byte, accept func([]byte) bool) (int, error) {
	return exchangeUDP(ctx, r.c.Dial, ap, payload, accept)
}

func exchangeUDP(ctx context.Context, dial DialFunc, ap netip.AddrPort, payload []byte, accept func([]byte) bool) (int, error) {
	c, err := dial(ctx, "udp", ap.String())
	if err != nil {
		return 0, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	deadline, _ := ctx.Deadline()
	buf := make([]byte, 2048)
	for {
		if _, err := c.Write(payload); err != nil {
			return 0, ctxErr(ctx, err)
		}
		next, last := resendAt(deadline)
		c.SetReadDeadline(next)
		for {
			n, err := c.Read(buf)
			if err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) && ctx.Err() == nil && !last {
					break // send again
				}
				return 0, ctxErr(ctx, err)
			}
			if accept == nil || accept(buf[:n]) {
				return n, nil
			}
		}
	}
}

// resendAt is when a datagram probe waiting for an answer sends again:
// resendEvery from now, or its deadline (zero: none) if that comes first.
// last says the wait ends at the deadline: its timeout is the probe's end
// even if the context's timer has not fired yet (sending again then would
// spin until it does).
func resendAt(deadline time.Time) (next time.Time, last bool) {
	next = time.Now().Add(resendEvery)
	if !deadline.IsZero() && !next.Before(deadline) {
		return deadline, true
	}
	return next, false
}

// ctxErr prefers the context's error once it has ended: the deadline, not
// the socket's reaction to it, is what happened.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil && !errors.Is(err, syscall.ECONNREFUSED) {
		return ctx.Err()
	}
	return err
}

// ntpRequest is an NTPv4 client request (RFC 5905): LI 0, VN 4, mode 3,
// with a random transmit timestamp a server echoes back.
func ntpRequest() []byte {
	b := make([]byte, 48)
	b[0] = 0x23
	rand.Read(b[40:48])
	return b
}

// icmp sends echo requests to a and waits for a matching reply.
func (r *runner) icmp(ctx context.Context, a netip.Addr) outcome {
	network, proto := "ip4:icmp", 1
	var req, reply icmp.Type = ipv4.ICMPTypeEcho, ipv4.ICMPTypeEchoReply
	if a.Is6() {
		network, proto = "ip6:ipv6-icmp", 58
		req, reply = ipv6.ICMPTypeEchoRequest, ipv6.ICMPTypeEchoReply
	}
	pc, err := r.c.ListenICMP(network)
	if err != nil {
		return errored("no ICMP socket", err.Error())
	}
	defer pc.Close()
	stop := context.AfterFunc(ctx, func() { pc.SetDeadline(time.Now()) })
	defer stop()
	var idb [2]byte
	rand.Read(idb[:])
	id := int(binary.BigEndian.Uint16(idb[:]))
	msg, err := (&icmp.Message{Type: req, Body: &icmp.Echo{ID: id, Seq: 1, Data: []byte("egressd-selftest")}}).Marshal(nil)
	if err != nil {
		return errored("no ICMP message", err.Error())
	}
	to := &net.IPAddr{IP: a.AsSlice()}
	deadline, _ := ctx.Deadline()
	buf := make([]byte, 1500)
	for {
		if _, err := pc.WriteTo(msg, to); err != nil {
			return datagramOutcome(ctxErr(ctx, err))
		}
		next, last := resendAt(deadline)
		pc.SetReadDeadline(next)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) && ctx.Err() == nil && !last {
					break
				}
				return datagramOutcome(ctxErr(ctx, err))
			}
			// A raw socket sees every ICMP packet of the namespace: keep
			// only the reply to this probe's own echo, or a refusal of it.
			m, err := icmp.ParseMessage(proto, buf[:n])
			if err == nil && refusesEcho(m, a, id) {
				return pass("blocked (administratively prohibited)")
			}
			if err != nil || m.Type != reply {
				continue
			}
			e, ok := m.Body.(*icmp.Echo)
			src, _ := from.(*net.IPAddr)
			if !ok || e.ID != id || src == nil {
				continue
			}
			if s, ok := netip.AddrFromSlice(src.IP); ok && s.Unmap() == a {
				return leak("echo reply", fmt.Sprintf("%s answered a ping sent directly: ICMP gets out (a tunnel over ICMP is possible)", a))
			}
		}
	}
}

// ICMP codes of "communication administratively prohibited", the walls'
// refusal (reject with icmpx admin-prohibited).
const (
	icmp4AdminProhibited = 13
	icmp6AdminProhibited = 1
)

// refusesEcho says whether m is an ICMP administratively prohibited that
// quotes an echo request with id sent to dst: a wall refused this probe's
// own echo, as a connect or send reads the same refusal (blockedErr).
// An unconnected raw socket gets no socket error for it (IPv6 never),
// so the probe reads the message itself. m comes from the network: every
// length is checked.
func refusesEcho(m *icmp.Message, dst netip.Addr, id int) bool {
	du, ok := m.Body.(*icmp.DstUnreach)
	if !ok {
		return false
	}
	q := du.Data // the refused packet: its IP header, then the echo
	var hdr, dstOff int
	var echo byte // the quoted message's type: an echo request
	switch {
	case m.Type == ipv4.ICMPTypeDestinationUnreachable && m.Code == icmp4AdminProhibited && dst.Is4():
		if len(q) < 20 || q[0]>>4 != 4 || q[9] != 1 {
			return false
		}
		hdr, dstOff, echo = int(q[0]&0x0f)*4, 16, byte(ipv4.ICMPTypeEcho)
	case m.Type == ipv6.ICMPTypeDestinationUnreachable && m.Code == icmp6AdminProhibited && dst.Is6():
		if len(q) < 40 || q[0]>>4 != 6 || q[6] != 58 { // no extension headers: the probe sends none
			return false
		}
		hdr, dstOff, echo = 40, 24, byte(ipv6.ICMPTypeEchoRequest)
	default:
		return false
	}
	if hdr < 20 || len(q) < hdr+8 {
		return false
	}
	qdst, ok := netip.AddrFromSlice(q[dstOff : dstOff+dst.BitLen()/8])
	return ok && qdst == dst && q[hdr] == echo && int(binary.BigEndian.Uint16(q[hdr+4:])) == id
}

// redirectProbeHost is the Host of a redirected HTTP probe; .invalid never
// resolves (RFC 6761).
const redirectProbeHost = "egressd-selftest-redirect.invalid"

// redirected checks a direct connection the walls redirected to egressd's
// transparent listener: egressd must refuse what goes over it.
func redirected(ctx context.Context, c net.Conn, ap netip.AddrPort) outcome {
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	if ap.Port() == 443 {
		tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true}) // no SNI: egressd refuses
		if err := tc.HandshakeContext(ctx); err != nil {
			return pass("redirected to egressd, handshake refused")
		}
		return leak("TLS handshake completed", fmt.Sprintf("a direct TLS connection to %s without SNI completed a handshake: something other than egressd answered", ap))
	}
	// Host names nothing any policy allows: egressd (which takes the host
	// from this header) refuses it whatever the rules; a target reached
	// past the walls answers it.
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+ap.String()+"/", nil)
	req.Host = redirectProbeHost
	req.Header.Set("Connection", "close")
	if err := req.Write(c); err != nil {
		return pass("redirected to egressd, closed")
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		return pass("redirected to egressd, closed")
	}
	resp.Body.Close()
	if resp.Header.Get("X-Egressd-Deny") != "" {
		return pass(fmt.Sprintf("redirected to egressd, refused %d %s", resp.StatusCode, resp.Header.Get("X-Egressd-Deny")))
	}
	return leak(fmt.Sprintf("HTTP %d", resp.StatusCode), fmt.Sprintf("a direct HTTP request to %s was answered without egressd's refusal: the target answered", ap))
}

// redirectedTo says whether the walls redirect a direct connection to ap to
// egressd: a Redirected port and a RedirectedTo destination.
func (r *runner) redirectedTo(ap netip.AddrPort) bool {
	return slices.Contains(r.c.Redirected, ap.Port()) &&
		slices.ContainsFunc(r.c.RedirectedTo, func(p netip.Prefix) bool { return p.Contains(ap.Addr().Unmap()) })
}
