// Package dnsfilter is the sandbox's only resolver. It answers A and AAAA
// questions for names an allow rule covers, forwarding them to the
// configured upstreams, and drops every answer whose address the policy
// would refuse to dial: cloud metadata and other high-risk addresses
// always, private and other special-use addresses unless the rule's cidrs
// unlock them. Every other name gets NXDOMAIN, for every type, without any
// upstream query: a query name that never leaves egressd cannot carry data
// out (DNS exfiltration).
//
//	s, err := dnsfilter.New(dnsfilter.Config{
//		Policy:     live.Load, // the policy in force, read once per query
//		Logger:     logger,
//		Registerer: registry,
//	})
//	go s.Serve(udpConn, tcpListener) // sockets already bound in the right namespace
//	...
//	s.Shutdown(ctx)
package dnsfilter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/egressd/egressd/dnsclient"
	"github.com/egressd/egressd/event"
	"github.com/egressd/egressd/honeytoken"
	"github.com/egressd/egressd/policy"
	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
)

// Config configures a Server. Only Policy is required.
type Config struct {
	// Policy returns the policy in force. It is called once per query, so a
	// reload (an atomic.Pointer swap) applies from the next query on.
	Policy func() *policy.Policy
	// Logger gets one line per query. Nil: logs are discarded. The caller
	// names the component (egressd's wiring adds component=dns): this
	// package adds no key of its own, so none appears twice.
	Logger *slog.Logger
	// Dial opens a connection to an upstream resolver; network is "udp" or
	// "tcp". Nil: a net.Dialer in the caller's network namespace.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Registerer gets the query counters. Nil: they are kept but not
	// registered.
	Registerer prometheus.Registerer
	// Timeout bounds one exchange with one upstream. Zero: 1.5s. Each query
	// also has an overall budget of 4s, below the 5s that stub resolvers
	// wait, so a client sees SERVFAIL rather than a timeout.
	Timeout time.Duration
	// NameBudget counts the distinct names each identity resolves under
	// wildcard rules. Share the proxy's (egressd's wiring does), so the
	// budget is one per identity, not one per path. Nil: the server's own.
	NameBudget *policy.NameBudget
	// Gate, when set, is asked before a name the policy allows is
	// answered: anything but ReasonAllowed gets SERVFAIL and nothing goes
	// upstream (egressd's wiring: the policy in force is not the verified
	// one, or the walls are not sealed). Refused names keep their NXDOMAIN.
	Gate func(p *policy.Policy) (policy.Reason, string)
	// Exempt, when set, lets a client connection past Gate: the
	// self-test's own probes, which must meet the candidate policy. It is
	// asked with the client's address and port and this server's address
	// the client dialed (the connection, not just its client address: see
	// probens.Conns). Only over TCP: a UDP source address and port are
	// whatever the sender writes (a sandbox with CAP_NET_RAW can spoof an
	// open probe socket's), while a TCP client's were proved by its
	// handshake.
	Exempt func(client, server netip.AddrPort) bool
	// Candidate, when set, returns the policy a reload is verifying (nil:
	// none): it decides for the clients Exempt names (over TCP), and the
	// policy in force for everyone else.
	Candidate func() *policy.Policy
	// Honeytokens, when set, are refused in any query name (NXDOMAIN,
	// reason honeytoken), and OnHoneytoken hears of each such query.
	Honeytokens  *honeytoken.Registry
	OnHoneytoken func(identity, name string, t honeytoken.Token)
	// Answered, when set, is told the addresses of every answer given for
	// an allowed name, and their shortest TTL, before the client gets them
	// (egressd's wiring: transparent mode redirects those addresses, and
	// only those, for that long).
	Answered func(client netip.Addr, addrs []netip.Addr, ttl time.Duration)
}

// Server is a filtering DNS server. Its ServeDNS is safe for concurrent use.
type Server struct {
	policy func() *policy.Policy
	log    *slog.Logger
	dial   func(ctx context.Context, network, addr string) (net.Conn, error)
	up     *dnsclient.Client // asks the upstreams and checks their answers
	limits limiters

	queries *prometheus.CounterVec // by result
	refused *prometheus.CounterVec // names answered NXDOMAIN by policy, by identity
	// budget counts the distinct names each identity resolves under each
	// wildcard rule; overBudget counts the names it refused, by identity.
	budget     *policy.NameBudget
	overBudget *prometheus.CounterVec
	gate       func(*policy.Policy) (policy.Reason, string)
	exempt     func(client, server netip.AddrPort) bool
	cand       func() *policy.Policy // the candidate a reload verifies, for exempt clients
	honey      *honeytoken.Registry
	onHoney    func(identity, name string, t honeytoken.Token)
	answered   func(netip.Addr, []netip.Addr, time.Duration)

	mu        sync.Mutex
	closed    bool
	listeners []*listener
}

var _ dns.Handler = (*Server)(nil)

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("dnsfilter: server closed")

const (
	queryBudget = 4 * time.Second

	// ednsSize is the UDP payload size advertised to clients, the one
	// advertised upstream.
	ednsSize = dnsclient.EDNSSize

	maxNameLen    = 253 // presentation form without the final dot (255 on the wire)
	maxLabelLen   = 63
	maxCNAMEChain = 8
	maxLogName    = 100
)

// Results: the values of the result label and log field.
const (
	resultAnswered    = "answered"    // forwarded; the upstream's answer passed as it was
	resultFiltered    = "filtered"    // forwarded; at least one address was dropped
	resultNoData      = "nodata"      // allowed name, a type that is not forwarded
	resultNXDomain    = "nxdomain"    // name refused by policy: unlisted, high-risk or malformed
	resultRateLimited = "ratelimited" // client over its query rate
	resultServFail    = "servfail"    // no upstream gave a usable answer
	resultNotReady    = "notready"    // allowed name, but the Gate refused: SERVFAIL, nothing upstream
	resultFormErr     = "formerr"     // not exactly one question
	resultNotImp      = "notimp"      // opcode other than QUERY, or class other than IN
	resultIgnored     = "ignored"     // a response, not a query: never answered
)

var allResults = []string{resultAnswered, resultFiltered, resultNoData, resultNXDomain, resultRateLimited,
	resultServFail, resultNotReady, resultFormErr, resultNotImp, resultIgnored}

// Log field names.
const (
	logClient   = "client"
	logIdentity = "identity"
	logQName    = "qname"
	logQType    = "qtype"
	logResult   = "result"
	logReason   = "reason"
	logRule     = "rule"
	logUpstream = "upstream"
	logRTT      = "rtt"
	logAnswers  = "answers"
	logDropped  = "dropped"
	logSkipped  = "suppressed"
)

// New returns a Server for c. It registers the counters with c.Registerer.
func New(c Config) (*Server, error) {
	if c.Policy == nil {
		return nil, errors.New("dnsfilter: new server: no policy")
	}
	s := &Server{
		policy:   c.Policy,
		log:      c.Logger,
		dial:     c.Dial,
		limits:   limiters{clients: map[netip.Addr]*client{}},
		budget:   c.NameBudget,
		gate:     c.Gate,
		exempt:   c.Exempt,
		cand:     c.Candidate,
		honey:    c.Honeytokens,
		onHoney:  c.OnHoneytoken,
		answered: c.Answered,
		queries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egressd_dns_queries_total",
			Help: "DNS queries answered by the filter, by result.",
		}, []string{"result"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egressd_dns_refused_names_total",
			Help: "DNS queries for names the policy refuses (NXDOMAIN), by client identity (\"unknown\" when none matches): a DNS exfiltration signal.",
		}, []string{"identity"}),
		overBudget: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egressd_dns_wildcard_budget_refused_total",
			Help: "New names under a wildcard rule refused (NXDOMAIN) because the identity spent its budget of distinct names (limits.dns_wildcard_names per hour): a DNS exfiltration signal.",
		}, []string{"identity"}),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.limits.flushed = s.logSuppressed
	if s.dial == nil {
		s.dial = (&net.Dialer{}).DialContext
	}
	s.up = &dnsclient.Client{Dial: s.dial, Timeout: c.Timeout}
	for _, r := range allResults {
		s.queries.WithLabelValues(r)
	}
	if c.Registerer != nil {
		for _, col := range []prometheus.Collector{s.queries, s.refused, s.overBudget} {
			if err := c.Registerer.Register(col); err != nil {
				return nil, fmt.Errorf("dnsfilter: register metrics: %w", err)
			}
		}
	}
	if s.budget == nil {
		s.budget = new(policy.NameBudget)
	}
	return s, nil
}

// entry is what one query's log line says.
type entry struct {
	client   netip.Addr
	identity string
	honey    *honeytoken.Token // a honeytoken in the name
	qname    string
	qtype    uint16
	result   string
	reason   string
	rule     string
	upstream netip.AddrPort
	rtt      time.Duration
	answers  int
	dropped  int
	quiet    bool // a refusal already reported once at warning: log at info
}

// ServeDNS answers one query. It implements dns.Handler.
func (s *Server) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	e := entry{client: clientAddr(w)}
	if len(r.Question) > 0 {
		e.qname, e.qtype = r.Question[0].Name, r.Question[0].Qtype
	}
	if r.Response {
		// Answering a response could start a loop between two servers.
		e.result = resultIgnored
		s.queries.WithLabelValues(e.result).Inc()
		return
	}
	p := s.policyFor(w)
	if p == nil { // no policy loaded yet: answer nothing
		e.result, e.reason = resultServFail, "no policy"
		s.reply(w, r, dns.RcodeServerFailure, nil)
		s.queries.WithLabelValues(e.result).Inc()
		s.logQuery(&e)
		return
	}
	e.identity = p.Identity(e.client)

	// Rate-limit next, so a flood costs no more than this check.
	if ok, logIt, skipped := s.limits.allow(e.client, p.Limits.DNSQueriesPerSec, time.Now()); !ok {
		// SERVFAIL, not a silent drop or REFUSED: SERVFAIL tells a bursty
		// tool "temporary failure" (EAI_AGAIN) at once, where a drop costs
		// it timeouts and retries that are more queries, and REFUSED would
		// read as a policy denial and make stubs try the next server. The
		// reply is the size of the query, so it amplifies nothing. Only one
		// line a second per client is logged, so a flood cannot flood the log.
		e.result = resultRateLimited
		s.reply(w, r, dns.RcodeServerFailure, nil)
		s.queries.WithLabelValues(e.result).Inc()
		if logIt {
			s.logQuery(&e, slog.Int(logSkipped, skipped))
		}
		return
	}
	s.serve(w, r, p, &e)
	s.queries.WithLabelValues(e.result).Inc()
	if e.result == resultNXDomain {
		// a flood of denials is aggregated per client and name
		if logIt, skipped := s.limits.denial(e.client, e.qname, time.Now()); logIt {
			s.logQuery(&e, slog.Int(logSkipped, skipped))
		}
		return
	}
	s.logQuery(&e)
}

func (s *Server) serve(w dns.ResponseWriter, r *dns.Msg, p *policy.Policy, e *entry) {
	switch {
	case r.Opcode != dns.OpcodeQuery:
		e.result, e.reason = resultNotImp, fmt.Sprintf("opcode %d", r.Opcode)
		s.reply(w, r, dns.RcodeNotImplemented, nil)
		return
	case len(r.Question) != 1:
		e.result, e.reason = resultFormErr, fmt.Sprintf("%d questions", len(r.Question))
		s.reply(w, r, dns.RcodeFormatError, nil)
		return
	}
	q := r.Question[0]
	if q.Qclass != dns.ClassINET {
		e.result, e.reason = resultNotImp, "class "+dns.Class(q.Qclass).String()
		s.reply(w, r, dns.RcodeNotImplemented, nil)
		return
	}
	name, bad := queryName(q.Name)
	if bad != "" {
		s.deny(w, r, e, bad)
		return
	}
	if t, ok := s.honey.ScanName(name); ok {
		// before any rule: a canary in a name is refused whatever allows it
		e.honey = &t
		s.deny(w, r, e, policy.ReasonHoneytoken.String())
		if s.onHoney != nil {
			id := e.identity
			if id == "" {
				id = addrString(e.client) // as the proxy names a source without an identity
			}
			s.onHoney(id, name, t)
		}
		return
	}
	rule := p.RuleForName(name)
	if rule == nil {
		reason := policy.ReasonNoRule.String()
		if p.HighRiskName(name) {
			reason = policy.ReasonHighRisk.String()
		}
		s.deny(w, r, e, reason)
		return
	}
	e.rule = rule.Name
	if reason, detail := s.gated(p, w); reason.Denies() {
		// SERVFAIL, not REFUSED: the name may well be allowed once the
		// policy is verified, and SERVFAIL says "try again" (EAI_AGAIN)
		// where REFUSED reads as a policy denial. It also fails closed in
		// the self-test: its canary probe counts REFUSED as a pass and
		// SERVFAIL as "cannot tell", so a probe that missed its exemption
		// fails the run instead of passing a leaky candidate.
		e.result, e.reason = resultNotReady, reason.String()+": "+detail
		s.reply(w, r, dns.RcodeServerFailure, nil)
		return
	}
	switch v, wildcard, first := s.budget.Allow(p, p.SourceIdentity(e.client), name, time.Now()); v {
	case policy.NameExactOnly:
		s.deny(w, r, e, policy.ReasonExactOnly.String())
		return
	case policy.NameOverBudget:
		s.overBudget.WithLabelValues(identityLabel(e.identity)).Inc()
		if first {
			s.log.Warn("dns wildcard budget spent: new names under this wildcard get NXDOMAIN for the rest of the hour",
				slog.String(logIdentity, e.identity), slog.String("wildcard", wildcard), slog.String(logRule, rule.Name),
				slog.Int("budget", p.Limits.DNSWildcardNames))
		}
		e.quiet = true // the warning above said it once
		s.deny(w, r, e, policy.ReasonWildcardBudget.String())
		return
	}
	if q.Qtype != dns.TypeA && q.Qtype != dns.TypeAAAA {
		// An allowed name gets an empty NOERROR for every other type (TXT,
		// MX, SRV, ANY, NULL, ...): no data comes back through records the
		// proxy never needs. HTTPS and SVCB (RFC 9460) get the same, so
		// clients fall back to plain A/AAAA lookups; their address hints
		// and ECH configs would bypass the address checks below.
		e.result, e.reason = resultNoData, "type-not-forwarded"
		s.reply(w, r, dns.RcodeSuccess, nil)
		return
	}

	ctx, cancel := context.WithTimeout(context.Background(), queryBudget)
	defer cancel()
	resp, up, rtt, err := s.resolve(ctx, p.Resolver.Upstreams, dns.Fqdn(name), q.Qtype)
	e.upstream, e.rtt = up, rtt
	if err != nil {
		e.result, e.reason = resultServFail, err.Error()
		s.reply(w, r, dns.RcodeServerFailure, nil)
		return
	}
	if resp.Rcode == dns.RcodeNameError {
		e.result, e.reason = resultAnswered, "upstream-nxdomain"
		s.reply(w, r, dns.RcodeNameError, nil)
		return
	}
	f := filterAnswer(p, rule, dns.Fqdn(name), q.Qtype, resp.Answer)
	e.result, e.dropped, e.reason = resultAnswered, f.dropped, f.why
	if f.dropped > 0 {
		e.result = resultFiltered
	}
	// When every address was dropped the answer is NOERROR with no
	// records (NODATA), not NXDOMAIN: the name exists and is allowed, and
	// NXDOMAIN would deny every type at and below the name (RFC 8020), so
	// a stub would drop the sibling A or AAAA answer and, under a wildcard
	// rule, the names below. NODATA only says "no address you may use";
	// getaddrinfo and Go both report it as "no such host" once both
	// families come back empty.
	if s.answered != nil {
		if addrs, ttl := answerAddrs(f.kept); len(addrs) > 0 {
			s.answered(e.client, addrs, ttl)
		}
	}
	s.reply(w, r, dns.RcodeSuccess, f.kept)
	e.answers = len(f.kept)
}

// answerAddrs are the addresses of the A and AAAA records of rrs and
// their shortest TTL.
func answerAddrs(rrs []dns.RR) ([]netip.Addr, time.Duration) {
	var addrs []netip.Addr
	var ttl uint32
	for _, rr := range rrs {
		var ip net.IP
		switch v := rr.(type) {
		case *dns.A:
			ip = v.A
		case *dns.AAAA:
			ip = v.AAAA
		default:
			continue
		}
		a, ok := netip.AddrFromSlice(ip)
		if !ok {
			continue
		}
		if len(addrs) == 0 || rr.Header().Ttl < ttl {
			ttl = rr.Header().Ttl
		}
		addrs = append(addrs, a.Unmap())
	}
	return addrs, time.Duration(ttl) * time.Second
}

// deny answers NXDOMAIN for a name the policy refuses and counts it
// against the client's identity. NXDOMAIN rather than REFUSED: stubs
// retry the next server on REFUSED and Go reports it as "server
// misbehaving", while NXDOMAIN is a final, clear "no such host".
func (s *Server) deny(w dns.ResponseWriter, r *dns.Msg, e *entry, reason string) {
	e.result, e.reason = resultNXDomain, reason
	s.refused.WithLabelValues(identityLabel(e.identity)).Inc()
	s.reply(w, r, dns.RcodeNameError, nil)
}

func identityLabel(id string) string {
	if id == "" {
		return "unknown"
	}
	return id
}

// reply writes a response to r with rcode and answer. Only the answer
// section is ever filled: nothing from an upstream's authority or
// additional sections reaches the client.
func (s *Server) reply(w dns.ResponseWriter, r *dns.Msg, rcode int, answer []dns.RR) {
	m := new(dns.Msg)
	m.SetRcode(r, rcode)
	if len(m.Question) == 1 {
		if _, ok := dns.IsDomainName(m.Question[0].Name); !ok {
			// A name that cannot be packed (over 255 bytes, or a label
			// over 63) never comes off the wire, but a caller of ServeDNS
			// may hand one in: leave it out so the reply can still be sent.
			m.Question = nil
		}
	}
	m.RecursionAvailable = true
	m.Answer = answer
	size := dns.MinMsgSize
	if opt := r.IsEdns0(); opt != nil {
		// A fresh OPT: the client's options (ECS, cookies, padding) are
		// neither echoed nor forwarded.
		m.SetEdns0(ednsSize, false)
		size = int(min(max(opt.UDPSize(), dns.MinMsgSize), ednsSize))
	}
	if _, ok := w.RemoteAddr().(*net.TCPAddr); ok {
		size = dns.MaxMsgSize
	}
	m.Truncate(size)
	// A failed write means the client went away; there is no one to tell.
	_ = w.WriteMsg(m)
}

// logSuppressed logs the refusals of client a that no line counted yet,
// once it has gone quiet (limiters.flushLater).
func (s *Server) logSuppressed(a netip.Addr, result string, n int) {
	s.log.LogAttrs(context.Background(), slog.LevelWarn, "dns queries not logged",
		slog.String(logClient, addrString(a)), slog.String(logResult, result), slog.Int(logSkipped, n))
}

func (s *Server) logQuery(e *entry, extra ...slog.Attr) {
	level := slog.LevelInfo
	switch e.result {
	case resultServFail:
		level = slog.LevelError
	case resultNXDomain, resultFiltered, resultRateLimited, resultFormErr, resultNotImp, resultIgnored:
		level = slog.LevelWarn
	}
	if e.quiet {
		level = slog.LevelInfo
	}
	if !s.log.Enabled(context.Background(), level) {
		return
	}
	qname := e.qname
	if len(qname) > maxLogName {
		qname = qname[:maxLogName] + "..."
	}
	attrs := append([]slog.Attr{
		slog.String(logClient, addrString(e.client)),
		slog.String(logIdentity, e.identity),
		slog.String(logQName, qname),
		slog.String(logQType, dns.Type(e.qtype).String()),
		slog.String(logResult, e.result),
	}, extra...)
	if e.reason != "" {
		attrs = append(attrs, slog.String(logReason, e.reason))
	}
	if e.rule != "" {
		attrs = append(attrs, slog.String(logRule, e.rule))
	}
	if e.honey != nil {
		attrs = append(attrs, slog.String(event.KeyHoneytoken, string(e.honey.Kind)), slog.String(event.KeyHoneytokenOf, e.honey.Identity),
			slog.String(event.KeyHoneytokenWhere, "dns name"))
	}
	if e.upstream.IsValid() {
		attrs = append(attrs, slog.String(logUpstream, e.upstream.String()), slog.Duration(logRTT, e.rtt))
	}
	if e.result == resultAnswered || e.result == resultFiltered {
		attrs = append(attrs, slog.Int(logAnswers, e.answers), slog.Int(logDropped, e.dropped))
	}
	s.log.LogAttrs(context.Background(), level, event.DNSMsg, attrs...)
}

func addrString(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

// clientAddr is the query's source address, or the zero Addr when the
// writer does not say.
func clientAddr(w dns.ResponseWriter) netip.Addr { return clientAddrPort(w).Addr() }

// clientAddrPort is the client's address (unmapped) and port; zero if unknown.
func clientAddrPort(w dns.ResponseWriter) netip.AddrPort {
	var ap netip.AddrPort
	switch a := w.RemoteAddr().(type) {
	case *net.UDPAddr:
		ap = a.AddrPort()
	case *net.TCPAddr:
		ap = a.AddrPort()
	case nil:
		return netip.AddrPort{}
	default:
		var err error
		if ap, err = netip.ParseAddrPort(a.String()); err != nil {
			return netip.AddrPort{}
		}
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// policyFor is the policy that decides for w's client: the candidate for
// the self-test's own probes (Exempt, over TCP) while one is verified.
func (s *Server) policyFor(w dns.ResponseWriter) *policy.Policy {
	if s.cand != nil {
		if c := s.cand(); c != nil && s.exempted(w) {
			return c
		}
	}
	return s.policy()
}

// exempted reports whether w's client is the self-test's own (Exempt):
// over TCP only, and asked for the connection (the client and this
// server's address it dialed).
func (s *Server) exempted(w dns.ResponseWriter) bool {
	if s.exempt == nil {
		return false
	}
	if _, tcp := w.RemoteAddr().(*net.TCPAddr); !tcp {
		return false
	}
	local, ok := w.LocalAddr().(*net.TCPAddr)
	if !ok {
		return false
	}
	ap := local.AddrPort()
	return s.exempt(clientAddrPort(w), netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()))
}

// gated applies Gate to an allowed name decided by p: ReasonAllowed lets it
// be answered. The self-test's own probes (Exempt) pass, over TCP only: a
// UDP source can be spoofed.
func (s *Server) gated(p *policy.Policy, w dns.ResponseWriter) (policy.Reason, string) {
	if s.gate == nil {
		return policy.ReasonAllowed, ""
	}
	reason, detail := s.gate(p)
	if reason.Denies() && s.exempted(w) {
		return policy.ReasonAllowed, ""
	}
	return reason, detail
}

// queryName checks the length caps on a question name and normalizes it
// the way the proxy normalizes hosts, so the DNS filter and the proxy
// agree on which names a rule covers. It returns the name, or the reason
// it is refused: too long, an address in any spelling, or malformed
// (escapes, spaces, empty labels). Long names and labels are the usual
// shape of DNS exfiltration, so they get their own reasons.
func queryName(qname string) (name, bad string) {
	n := strings.TrimSuffix(qname, ".")
	if len(n) > maxNameLen {
		return "", "long-name"
	}
	for l := range strings.SplitSeq(n, ".") {
		if len(l) > maxLabelLen {
			return "", "long-label"
		}
	}
	name, addr, err := policy.NormalizeHost(n)
	switch {
	case err != nil:
		return "", "bad-name"
	case addr.IsValid():
		return "", "address-name"
	}
	return name, ""
}
