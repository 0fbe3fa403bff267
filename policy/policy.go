package policy

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/netip"
	"slices"
	"time"

	"github.com/egressd/egressd/policy/hostlist"
)

// Policy is a compiled config: immutable once Parse returns it, safe for
// concurrent use, and never parses strings on the request path. Reload
// builds a new Policy and swaps the pointer.
type Policy struct {
	Source     string // file name the policy came from
	Listen     Listen
	Resolver   Resolver
	UpstreamCA string // PEM file of extra roots for upstream TLS (tests); empty = system roots only
	Sandbox    Sandbox
	Selftest   Selftest
	Limits     Limits
	Alerts     Alerts
	Audit      Audit
	// Honeytokens: egressd run places canary credentials in its sandbox
	// (honeytokens: true); any of them seen on the way out is refused.
	Honeytokens bool
	Tools       Tools // tools.go
	Identities  []Identity
	Rules       []*Rule

	// host index: exact names and wildcard suffixes to the rules naming them,
	// in rule order. A value >= 0 is one rule index; a value < 0 is
	// -(k+1), an index into multi, for keys named by several rules.
	exact    hostIndex
	suffix   hostIndex
	multi    [][]int32
	star     []int32 // rules with hosts: ["*"]
	cidrRule []int32 // rules with cidrs
	maxDepth int     // most labels in any suffix key, bounds the suffix walk

	denyExact  hostIndex // values unused
	denySuffix hostIndex
	denyCIDRs  []netip.Prefix
	denyLists  []*hostlist.Set // deny.hosts_files
	denyHosts  []string        // deny.hosts patterns as written, for Lints

	// UpstreamProxy is the parent proxy egressd reaches every upstream
	// through (HTTP CONNECT to the checked address); nil: direct.
	UpstreamProxy *UpstreamProxy
	// DenyMessage (deny.message) is what a client refused by the default
	// deny (no rule for it) reads in the 403 body; empty: generic advice.
	DenyMessage string
	// injectHeaders maps a host named by a rule with inject to the header
	// names egressd sets there: a client's own values are stripped on
	// every request to that host egressd sees.
	injectHeaders map[string][]string
	identitySet   map[string]bool // declared identity names
}

// Listen holds the listen addresses ("host:port"); empty means off.
type Listen struct {
	Proxy           string
	DNS             string
	Admin           string
	Transparent     string // transparent TLS: sandbox TCP 443 is redirected here
	TransparentHTTP string // transparent HTTP: sandbox TCP 80 is redirected here
}

// Resolver lists the DNS servers the proxy and DNS filter forward to; empty
// means the system resolver (pure Go).
type Resolver struct {
	Upstreams []netip.AddrPort
}

// Sandbox says how sandboxes are recognised and wired.
type Sandbox struct {
	InterfacePrefix string       // gateway-side interface name prefix of sandbox links
	Pool4           netip.Prefix // addresses for sandbox links
	Pool6           netip.Prefix
	UIDs            []uint32       // local users whose traffic is walled
	CIDRs           []netip.Prefix // sandbox source addresses (container networks)
}

// Selftest lists the probe targets: each must stay unreachable directly,
// except ExpectReachable, which must work through the proxy.
type Selftest struct {
	Interval        time.Duration
	Timeout         time.Duration
	TCP             []netip.AddrPort
	UDP             []netip.AddrPort
	IPv6            []netip.AddrPort
	Resolvers       []netip.AddrPort
	CanaryName      string
	CanaryURL       string
	CanaryLog       string
	Metadata        []netip.Addr
	ExpectReachable []string
	Webhook         string
	// ProbeEveryMax caps the schedule an in-sandbox probe claims (a
	// longer one would keep a silent sandbox from going overdue).
	ProbeEveryMax time.Duration
	// QuarantineOnProbeLeak quarantines an identity whose in-sandbox
	// probe reports a leak.
	QuarantineOnProbeLeak bool
	ToolServers           []ToolServer // tools.go
}

// DefaultHelloTimeout is how long the checkpoint waits for a tunnel's
// ClientHello (and an inspected handshake) after its 200: the longest a
// silent tunnel stays open. The proxy applies it; the self-test's
// silent-tunnel probe holds egressd to it.
const DefaultHelloTimeout = 5 * time.Second

// DefaultProbeEveryMax is selftest.probe_every_max's default.
const DefaultProbeEveryMax = time.Hour

// Limits bound what one client can make the proxy do.
type Limits struct {
	ConnsPerIdentity int
	// ClientConns bounds the client connections an identity (its source's)
	// holds open to egressd at once, idle keep-alive ones and DNS over TCP
	// included: ConnsPerIdentity counts only requests and tunnels in
	// flight, so idle connections were bounded by nothing but the
	// descriptor limit, whose reserve then shed every other client.
	ClientConns      int
	HeaderBytes      int
	IdleTimeout      time.Duration
	DialTimeout      time.Duration
	MirrorBodyBytes  int64
	DNSQueriesPerSec int
	// ReadHeadBytes bounds the request headers (names and values) an
	// inspected rule with page types forwards; QueryBytes bounds its query
	// string. Mirror rules forward only their ecosystem's headers.
	ReadHeadBytes int
	QueryBytes    int
	// DNSWildcardNames bounds, per identity and wildcard rule, the distinct
	// names under the wildcard the DNS filter and the proxy resolve; 0 is
	// no budget. DNSExactOnly resolves only names a rule lists exactly.
	DNSWildcardNames int
	DNSExactOnly     bool

	// The upstream side: a client's request head must arrive within
	// RequestHeaderTimeout; an origin's response head within
	// ResponseHeaderTimeout and ResponseHeaderBytes; its body may pause
	// at most ResponseIdleTimeout between bytes and last at most
	// ResponseTimeout in all. A response cut by one of them, or whose
	// client left, releases its upstream socket at once.
	RequestHeaderTimeout  time.Duration
	ResponseHeaderTimeout time.Duration
	ResponseHeaderBytes   int
	ResponseIdleTimeout   time.Duration
	ResponseTimeout       time.Duration

	// ShutdownGrace is how long a stopping egressd keeps its open tunnels
	// and requests (it accepts no new ones) before it closes them, waits
	// for their records and seals the audit log.
	ShutdownGrace time.Duration
}

// Audit says what egressd does when its audit log (serve --audit-log)
// cannot be written.
type Audit struct {
	// OnErrorAllow lets allowed traffic through unaudited (audit.on_error:
	// allow); false (deny, the default) refuses it with 503
	// audit-unavailable until writes succeed again.
	OnErrorAllow bool
	// SignKey is the file of the Ed25519 key that signs audit checkpoints
	// (audit.sign_key: file:/path); "" signs nothing. SignKeyPrevious is
	// the key being rotated away from (audit.sign_key_previous).
	SignKey, SignKeyPrevious string
	// CheckpointRecords and CheckpointInterval: a checkpoint at most every
	// so many lines and so long after the first unsigned one.
	CheckpointRecords  int
	CheckpointInterval time.Duration
}

// Identity names a client by source CIDRs, or refines a source by a
// Proxy-Authorization user whose password hashes to TokenSHA256.
type Identity struct {
	Name        string
	CIDRs       []netip.Prefix
	User        string
	TokenSHA256 [sha256.Size]byte // set whenever User is
	// Evaluation marks a sandbox under evaluation: any outbound attempt
	// by it is an alert.
	Evaluation bool
}

// Evaluation reports whether the identity named name is marked
// evaluation: true.
func (p *Policy) Evaluation(name string) bool {
	for i := range p.Identities {
		if p.Identities[i].Name == name {
			return p.Identities[i].Evaluation
		}
	}
	return false
}

// Alerts is where attempts worth a same-day look are sent: every
// high-risk attempt by a sandbox, and every attempt by an evaluation
// identity.
type Alerts struct {
	Webhook string        // "" : log line and counter only
	Batch   time.Duration // attempts within this window go in one POST
}

// Rule is one compiled allow rule.
type Rule struct {
	Name     string
	Index    int
	Hosts    HostList // normalized patterns, in config order
	ports    []portRange
	CIDRs    []netip.Prefix
	Pages    PageSet
	AllPages bool // pages: ["*"]: no page-type check
	Methods  []string
	Paths    []string // patterns; a trailing '*' matches any rest
	Mirror   Mirror
	MirrorOp MirrorOptions
	// ReadPosts names the read-only POSTs this rule allows as reads
	// (read_posts: [jira-search]); mirror: git implies git-upload-pack.
	ReadPosts []string
	TLS       bool // false: raw TCP tunnel, no ClientHello expected
	// WebSocket (upgrade: [websocket]) lets a WebSocket handshake that
	// passes the rule's checks switch protocols: a two-way channel to the
	// host that no later check sees. Only on inspected rules; h2c is never
	// allowed.
	WebSocket bool

	// Identities the rule applies to; empty: every client.
	Identities []string
	// Message is what a client denied under this rule reads in the 403
	// body; empty: the generic advice only.
	Message string
	// Inject is the credential egressd adds to requests under this rule;
	// nil: none. A rule with Inject is never host-only: it is inspected.
	Inject *Inject

	inlineHosts int  // hosts written in the YAML, not in hosts_files (Warnings)
	portsGiven  bool // the rule lists its ports (not the default 80 and 443)
}

// PortsGiven reports whether the rule lists its ports: a port it names is
// one its clients use, where the default [80, 443] may be only half used.
func (r *Rule) PortsGiven() bool { return r.portsGiven }

type portRange struct{ lo, hi uint16 }

// AllowsPort reports whether the rule covers port.
func (r *Rule) AllowsPort(port uint16) bool {
	for _, pr := range r.ports {
		if pr.lo <= port && port <= pr.hi {
			return true
		}
	}
	return false
}

// HostOnly reports whether the rule decides on host and port alone, so a
// CONNECT under it is spliced rather than inspected.
func (r *Rule) HostOnly() bool {
	return r.Mirror == MirrorNone && r.AllPages && len(r.Methods) == 0 && len(r.Paths) == 0 && r.Inject == nil
}

// Identity returns the name of the identity whose cidrs hold the source
// address src; "" when none does. The source address is authoritative:
// a proxy user name never chooses the identity on its own (see Refine).
func (p *Policy) Identity(src netip.Addr) string {
	src = src.Unmap()
	for i := range p.Identities {
		if p.Identities[i].User != "" {
			continue // a token identity: its cidrs say where the token counts
		}
		for _, c := range p.Identities[i].CIDRs {
			if c.Contains(src) {
				return p.Identities[i].Name
			}
		}
	}
	return ""
}

// Refine returns the identity a client at src proves it is with a
// Proxy-Authorization user and secret: one whose user matches, whose
// token_sha256 is the SHA-256 of secret (compared in constant time), and
// whose cidrs, if it has any, hold src. "" when none does: an unknown or
// unproven label names nothing.
func (p *Policy) Refine(src netip.Addr, user, secret string) string {
	if user == "" {
		return ""
	}
	src = src.Unmap()
	sum := sha256.Sum256([]byte(secret))
	for i := range p.Identities {
		id := &p.Identities[i]
		if id.User != user || subtle.ConstantTimeCompare(sum[:], id.TokenSHA256[:]) != 1 {
			continue
		}
		if len(id.CIDRs) == 0 || slices.ContainsFunc(id.CIDRs, func(c netip.Prefix) bool { return c.Contains(src) }) {
			return id.Name
		}
	}
	return ""
}
