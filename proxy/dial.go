package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/egressd/egressd/inject"
	"github.com/egressd/egressd/policy"
)

// DenyError is a refusal at dial time: every address the name resolved to
// failed the address check (or one was high-risk). The client gets a 403,
// not a 5xx: this is policy, not an outage.
type DenyError struct {
	Reason   policy.Reason
	Detail   string
	HighRisk bool
	Addr     netip.Addr // the address that was refused
}

func (e *DenyError) Error() string {
	return fmt.Sprintf("dial refused: %s: %s", e.Reason, e.Detail)
}

// checkedDialer resolves a decided target, checks every answer against the
// policy, and connects to a checked address itself, so the address checked
// is the address reached (no second lookup, no rebinding window).
type checkedDialer struct {
	// cur is what the policy in force decides about dialing, swapped
	// whole on reload while dials read it; cand is the candidate's while
	// a reload verifies one (the self-test's dials go its way).
	cur, cand atomic.Pointer[dialSettings]
	// resolverDial opens sockets to the DNS upstreams; nil: net.Dialer.
	resolverDial func(ctx context.Context, network, addr string) (net.Conn, error)
	// self reports whether an address is one of egressd's own listeners.
	self func(netip.AddrPort) bool
	// control runs on each upstream socket before connect (tests use it
	// for a namespace guard); nil means none.
	control func(network, address string, c syscall.RawConn) error
	// out holds the local end of every open upstream connection.
	out outbound
	// budget bounds the new names under wildcard rules each identity makes
	// the resolver ask for; log gets its one warning per identity and
	// wildcard when spent.
	budget *policy.NameBudget
	log    *slog.Logger
	// secrets reads the upstream proxy's credentials.
	secrets *inject.Store
}

type dialSettings struct {
	pol     *policy.Policy // whose settings these are
	res     *Resolver
	timeout time.Duration
	parent  *parentDialer // upstream_proxy; nil: direct
}

// settings are p's resolvers, dial timeout and upstream proxy (a fresh
// resolver, so no answer cached under other upstreams is used).
func (x *checkedDialer) settings(p *policy.Policy) *dialSettings {
	s := &dialSettings{
		pol:     p,
		res:     &Resolver{Upstreams: p.Resolver.Upstreams, Dial: x.resolverDial},
		timeout: p.Limits.DialTimeout,
	}
	if p.UpstreamProxy != nil {
		s.parent = &parentDialer{up: p.UpstreamProxy, secrets: x.secrets}
	}
	return s
}

// setPolicy takes the dial settings of p, the policy in force.
func (x *checkedDialer) setPolicy(p *policy.Policy) { x.cur.Store(x.settings(p)) }

// setCandidate takes the dial settings of p, the candidate a reload
// verifies (nil: none), so the self-test's requests it decides dial as p
// would (its resolvers, its upstream_proxy), not as the policy in force.
func (x *checkedDialer) setCandidate(p *policy.Policy) {
	if p == nil {
		x.cand.Store(nil)
		return
	}
	x.cand.Store(x.settings(p))
}

// settingsFor is how a dial decided by p goes: p's settings when p is the
// policy in force or the candidate, else (a policy retired since it
// decided) the settings in force.
func (x *checkedDialer) settingsFor(p *policy.Policy) *dialSettings {
	if c := x.cand.Load(); c != nil && c.pol == p {
		return c
	}
	return x.cur.Load()
}

// check resolves the target of an allowed decision and returns the
// addresses on port that pass the address checks, or the refusal: a
// CONNECT under an inspected rule runs it before answering 200, so a name
// that resolves only to forbidden addresses is refused at CONNECT.
func (x *checkedDialer) check(ctx context.Context, p *policy.Policy, d *policy.Decision, port uint16) ([]netip.AddrPort, error) {
	return x.checkWith(ctx, x.settingsFor(p), p, d, port)
}

// checkWith is check through the dial settings s (a dial reads them once:
// a candidate dropped between its lookup and its connect does not split
// them).
func (x *checkedDialer) checkWith(ctx context.Context, s *dialSettings, p *policy.Policy, d *policy.Decision, port uint16) ([]netip.AddrPort, error) {
	var addrs []netip.Addr
	if d.Addr.IsValid() {
		addrs = []netip.Addr{d.Addr.Unmap()}
	} else {
		if err := x.checkNameBudget(ctx, p, d); err != nil {
			return nil, err
		}
		var err error
		if addrs, err = s.res.Lookup(ctx, d.Host); err != nil {
			return nil, err
		}
	}
	good := make([]netip.AddrPort, 0, len(addrs))
	var refused *DenyError
	for _, a := range addrs {
		ap := netip.AddrPortFrom(a, port)
		ok, info := p.CheckAddr(d.Rule, a)
		switch {
		case info.Class == policy.ClassHighRisk:
			// A name that resolves to a metadata address is an attack
			// (rebinding) or a trap: refuse the whole target, not just
			// that answer.
			return nil, &DenyError{Reason: policy.ReasonHighRisk, Detail: fmt.Sprintf("%s resolved to %s (high-risk)", d.Host, a), HighRisk: true, Addr: a}
		case !ok:
			if refused == nil {
				refused = &DenyError{Reason: policy.ReasonSpecialAddr, Detail: fmt.Sprintf("%s resolved to %s (%s)", d.Host, a, info.Class), Addr: a}
			}
		case x.self != nil && x.self(ap):
			if refused == nil {
				refused = &DenyError{Reason: policy.ReasonProxyLoop, Detail: fmt.Sprintf("%s is egressd itself", ap), Addr: a}
			}
		default:
			good = append(good, ap)
		}
	}
	if len(good) == 0 {
		if refused == nil {
			return nil, fmt.Errorf("resolve %s: %w", d.Host, ErrNoAddress)
		}
		return nil, refused
	}
	return good, nil
}

// dial connects to the target of an allowed decision on port.
func (x *checkedDialer) dial(ctx context.Context, p *policy.Policy, d *policy.Decision, port uint16) (net.Conn, netip.AddrPort, error) {
	cur := x.settingsFor(p)
	good, err := x.checkWith(ctx, cur, p, d, port)
	if err != nil {
		return nil, netip.AddrPort{}, err
	}
	nd := net.Dialer{Timeout: cur.timeout, Control: x.control}
	var errs []error
	for _, ap := range good {
		if cur.parent != nil {
			c, err := cur.parent.dial(ctx, &nd, ap)
			if err == nil {
				return c, ap, nil
			}
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		// Not nd.DialTCP: with no local address it still binds 0.0.0.0:0
		// before connecting (Go 1.26), which takes an ephemeral port for
		// every destination at once.
		c, err := nd.DialContext(ctx, "tcp", ap.String())
		if err == nil {
			return x.out.track(c), ap, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, netip.AddrPort{}, errors.Join(errs...)
}

// reasonFor maps a dial or upstream error to the reason the client gets:
// the refusal's for a policy refusal, upstream-timeout for a timeout,
// upstream-unreachable for anything else.
func reasonFor(err error) policy.Reason {
	var de *DenyError
	var ne net.Error
	switch {
	case errors.As(err, &de):
		return de.Reason
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return policy.ReasonUpstreamTimeout
	default:
		return policy.ReasonUpstreamUnreachable
	}
}

// outbound remembers the local address of every open upstream connection,
// so that a server of egressd on this host (the admin endpoint) can tell
// that its client is egressd's own proxy and refuse to trust it.
type outbound struct {
	mu sync.Mutex
	m  map[netip.AddrPort]int
}

// track records c's local address until c is closed. The wrapper embeds
// *net.TCPConn, so the relay still finds its raw socket and half-close.
func (o *outbound) track(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	la, err := netip.ParseAddrPort(tc.LocalAddr().String())
	if err != nil {
		return c
	}
	la = netip.AddrPortFrom(la.Addr().Unmap(), la.Port())
	o.mu.Lock()
	if o.m == nil {
		o.m = map[netip.AddrPort]int{}
	}
	o.m[la]++
	o.mu.Unlock()
	return &outConn{TCPConn: tc, o: o, local: la}
}

// has reports whether ap is the local end of an open upstream connection.
func (o *outbound) has(ap netip.AddrPort) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.m[netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())] > 0
}

type outConn struct {
	*net.TCPConn
	o     *outbound
	local netip.AddrPort
	once  sync.Once
}

// closeSocket closes the Go descriptor only: a loop relays the socket
// through a duplicate (loop_linux.go), and the tunnel is open, so its
// local address stays known (ViaProxy) until Close at the tunnel's end.
func (c *outConn) closeSocket() error { return c.TCPConn.Close() }

func (c *outConn) Close() error {
	c.once.Do(func() {
		c.o.mu.Lock()
		if c.o.m[c.local]--; c.o.m[c.local] <= 0 {
			delete(c.o.m, c.local)
		}
		c.o.mu.Unlock()
	})
	return c.TCPConn.Close()
}

// checkNameBudget refuses a name under a wildcard rule once the requesting
// identity has spent its budget of distinct names there (the query would
// carry the name to that domain's name servers), or any such name under
// limits.dns_exact_only.
func (x *checkedDialer) checkNameBudget(ctx context.Context, p *policy.Policy, d *policy.Decision) error {
	id := ""
	if rq, ok := ctx.Value(keyDecision).(*request); ok {
		id = rq.budget() // the source's: a label or token never opens a fresh budget
	}
	v, wildcard, first := x.budget.Allow(p, id, d.Host, time.Now())
	switch v {
	case policy.NameExactOnly:
		return &DenyError{Reason: policy.ReasonExactOnly, Detail: d.Host + " is under " + wildcard + ": limits.dns_exact_only resolves only names a rule lists"}
	case policy.NameOverBudget:
		if first && x.log != nil {
			x.log.Warn("dns wildcard budget spent: new names under this wildcard are refused for the rest of the hour",
				slog.String("identity", id), slog.String("wildcard", wildcard), slog.Int("budget", p.Limits.DNSWildcardNames))
		}
		return &DenyError{Reason: policy.ReasonWildcardBudget, Detail: fmt.Sprintf("%s: identity spent its %d new names under %s this hour", d.Host, p.Limits.DNSWildcardNames, wildcard)}
	}
	return nil
}

// dialRefusal is how a failed address check or dial is decided on every
// path that opens a tunnel: its reason and detail, and the high-risk mark
// on rq's decision when the refusal carries one.
func dialRefusal(rq *request, err error) (policy.Reason, string) {
	var de *DenyError
	if errors.As(err, &de) {
		rq.d.HighRisk = de.HighRisk
		return de.Reason, de.Detail
	}
	return reasonFor(err), err.Error()
}
