// Package selftest is egressd's proof: escape probes that try, from inside a
// sandbox-like network namespace, every way out that the walls are meant to
// close, and a few ways through the proxy that the policy is meant to refuse.
// A probe that gets through is a leak, reported loudly; positive controls
// check that the allowlisted targets still work, so a broken network cannot
// pass for a sealed one.
//
// The package imports nothing of egressd's. It talks to the proxy and the DNS
// filter only over the network, as an attacker in a sandbox would, so it can
// also check a sandbox that egressd did not build. Everything it needs comes
// in a plain Config: the probe targets, the proxy and resolver addresses as
// seen from the probe namespace, the requests the policy must refuse, and the
// socket hooks that create every socket inside that namespace.
//
//	rep, err := selftest.Run(ctx, selftest.Config{
//		TCP:   []netip.AddrPort{netip.MustParseAddrPort("1.1.1.1:443")},
//		Proxy: netip.MustParseAddrPort("10.237.0.1:3128"),
//		Dial:  probeDialer.DialContext, // creates sockets in the probe namespace
//		...
//	})
//	rep.WriteTable(os.Stdout)
//	if !rep.Sealed() { ... }
//
// What counts as a leak is decided per probe and written in its Expected
// column. A refusal that comes back from the target itself (a TCP reset, an
// ICMP port-unreachable) is a leak: the packet got there. egressd's walls
// answer with ICMP administratively prohibited (or drop), never a reset. UDP, ICMP and DNS probes see a leak only if the target answers, so
// their targets must be hosts that answer (public resolvers, NTP servers, or a
// canary of your own); a probe to a silent host proves nothing either way.
package selftest

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"sync"
	"time"
)

// DialFunc opens a connection; network is tcp, tcp4, tcp6, udp, udp4 or
// udp6 and addr an IP literal with a port.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Config is everything a run needs. Zero-valued target lists skip their
// probes; the socket hooks decide where the probes run.
type Config struct {
	// Redirected are the TCP ports the walls redirect to egressd's
	// transparent listeners (80 and 443 in transparent mode): a direct
	// connection to them reaches egressd, not the target, so it passes
	// when egressd refuses what is sent over it (an HTTP request to port
	// 80 gets X-Egressd-Deny; a TLS handshake without SNI to 443 fails),
	// and leaks when the target answers.
	Redirected []uint16
	// RedirectedTo are the destinations the walls redirect on the
	// Redirected ports: only those the policy could allow (egressd: its
	// rules' cidrs; DNS answers for allowed names are no probe target). A
	// direct connection to any other destination that completes is a leak
	// even on a Redirected port: interception where no decision is
	// possible looks open to every probe a user writes.
	RedirectedTo []netip.Prefix
	// TCP targets must not accept a direct connection (any public address
	// and port: 443, 53, 80, 22, 25, high ports).
	TCP []netip.AddrPort
	// UDP targets must not answer a direct datagram. Port 53 gets a DNS
	// query, port 123 an NTP request, any other port a short text. A
	// target that never answers anyone cannot show a leak.
	UDP []netip.AddrPort
	// ICMP addresses must not answer an echo request sent directly.
	ICMP []netip.Addr
	// IPv6 targets must not accept a direct TCP connection.
	IPv6 []netip.AddrPort
	// Resolvers are public DNS servers that must not answer a query sent
	// directly, over UDP or TCP.
	Resolvers []netip.AddrPort
	// Metadata addresses (cloud instance metadata) must not accept a
	// direct TCP connection on port 80, and the proxy must refuse them as
	// high-risk in every spelling: decimal, hex, octal, short and
	// IPv6-mapped for IPv4 addresses.
	Metadata []netip.Addr
	// MetadataNames are host names of a metadata service
	// (metadata.google.internal); the proxy must refuse them.
	MetadataNames []string

	// DNS is the sandbox's resolver (egressd's DNS filter) as the probe
	// namespace sees it; the zero value skips the resolver probe.
	DNS netip.AddrPort
	// CanaryName must not resolve through DNS: any answer is a leak. Also
	// the question of the direct resolver probes; empty: "example.com".
	CanaryName string

	// Proxy is egressd's proxy as the probe namespace sees it; the zero
	// value skips every probe through the proxy.
	Proxy netip.AddrPort
	// CanaryURL must be refused by the proxy. A random token is added to
	// its query, for CanaryLog to look for.
	CanaryURL string
	// CanaryLog, if set, is fetched after the canary probe (with LogDial,
	// not through the proxy); a body that contains the canary token means
	// the request arrived: a leak.
	CanaryLog string
	// CanaryTokens are every identity's canary token (identity → token),
	// when the canary name or URL carries one: the canary-log probe
	// reports a leak naming each identity whose token the log holds.
	CanaryTokens map[string]string
	// Unlisted is a host:port no rule covers; a CONNECT to it must be
	// refused. Empty: the probe is skipped.
	Unlisted string
	// SNIHost is host:port of a host-only (spliced) rule, and SNIName an
	// unlisted name: a TLS handshake with SNI SNIName in a tunnel to
	// SNIHost must be cut off by the proxy. Either empty: skipped.
	SNIHost, SNIName string
	// HostTrickURL is an absolute http:// URL to an allowed host, sent with
	// the Host header HostTrickHost (an unlisted or metadata host): the
	// proxy must refuse it rather than forward it. Either empty: skipped.
	HostTrickURL, HostTrickHost string
	// Own lists egressd's own listeners (admin endpoint, DNS) as host:port
	// the proxy would dial: a request and a CONNECT to each through the
	// proxy must be refused, whatever rule unlocks the address (egressd
	// answers proxy-loop). Empty: skipped.
	Own []string
	// InspectHost is host:port of an inspected rule, and HeadBytes the
	// proxy's limits.header_bytes: a request head of HeadBytes plus 64 KiB
	// inside a tunnel to InspectHost must be refused (431). Either zero:
	// skipped.
	InspectHost string
	HeadBytes   int
	// SilentHost is host:port of an allowed rule: a tunnel to it that
	// never sends a byte must be closed by the proxy within
	// SilentDeadline (its handshake deadline). Either zero: skipped.
	SilentHost     string
	SilentDeadline time.Duration
	// SilentAsk, if set, is the shorter deadline the silent-tunnel probe
	// asks egressd for on its tunnel (X-Egressd-Hello-Deadline): when
	// egressd's 200 says it applies, the probe holds the tunnel to it and
	// takes a fraction of a second, not SilentDeadline.
	SilentAsk time.Duration
	// Refused are requests the policy refuses (publish and upload on each
	// mirror rule, login, upload and posting on each page-type rule): each
	// must get egressd's refusal.
	Refused []Request
	// ExpectReachable URLs are the positive controls: each must be
	// reachable through the proxy. A failure fails the run.
	ExpectReachable []string
	// RootCAs verifies the positive controls' TLS: the upstream roots and,
	// for inspected rules, egressd's CA. Nil: the system roots.
	RootCAs *x509.CertPool

	// UserAgent of every request through the proxy; "": egressd-selftest.
	// `egressd probe` sends egressd-probe/TOKEN, the run token of its plan,
	// so egressd counts its requests as probe traffic.
	UserAgent string

	// Timeout bounds each probe; zero means 1.5 s. Blocked probes wait the
	// whole timeout (silence is what a wall looks like), so a run takes
	// about this long. Positive controls get twice as long.
	Timeout time.Duration

	// Dial creates a socket inside the probe namespace. Required.
	Dial DialFunc
	// ProxyDial reaches the proxy; nil means Dial. (A proxy listening on
	// loopback is reached from egressd's own namespace.)
	ProxyDial DialFunc
	// ResolverDial reaches the sandbox resolver (DNS); nil means Dial.
	ResolverDial DialFunc
	// ResolverTCP asks the sandbox resolver over TCP rather than UDP:
	// egressd's own self-test, whose resolver lets only TCP probes past its
	// readiness gate (a UDP source address can be spoofed).
	ResolverTCP bool
	// LogDial fetches CanaryLog; nil means a plain net.Dialer in the
	// caller's namespace.
	LogDial DialFunc
	// ListenICMP opens an ICMP socket ("ip4:icmp" or "ip6:ipv6-icmp")
	// inside the probe namespace; nil reports the ICMP probes as not run.
	ListenICMP func(network string) (net.PacketConn, error)
	// HostSockets are unix socket paths of host daemons to try (see
	// HostSocketPaths): only where the probes run in the sandbox's own file
	// system view (`egressd probe` inside the sandbox), not from egressd's.
	HostSockets []string
	// Vsock adds the vsock probe: whether an AF_VSOCK socket opens on a
	// virtual machine (only where the probes run as the sandbox does:
	// `egressd probe`; egressd's own process is no sandbox).
	Vsock bool
	// ToolServers are MCP servers whose fetch-like tool must refuse what
	// the policy refuses (toolserver.go); ToolDial reaches them, nil: a
	// plain net.Dialer in the caller's namespace (tracked by egressd's own
	// self-test, whose calls to egressd's endpoint pass its readiness
	// gate).
	ToolServers []ToolServer
	ToolDial    DialFunc
	// SkipDirect, if set, reports every direct-route probe as not run with
	// this reason (for example "needs root"), and runs only the probes
	// through the proxy and the resolver.
	SkipDirect string
	// ControlsOnly runs only the positive controls (the targets that must
	// be reachable): what egressd retries during an outage until they
	// pass, before one full run confirms. Such a run proves no wall.
	ControlsOnly bool
}

// Request is one request the proxy must refuse.
type Request struct {
	// ID names the probe in reports ("mirror-publish/pypi"); unique.
	ID string
	// Route says which rule and what kind of request ("proxy: mirror
	// publish (rule pypi)").
	Route       string
	Method      string
	URL         string // absolute http:// or https:// URL
	ContentType string
	Body        string
	// Header holds extra request headers the probe sends (a header-budget
	// probe's oversized header).
	Header map[string]string
	// Reason, if set, is the X-Egressd-Deny value the refusal must carry.
	Reason string
	// InTunnel: the policy allows the tunnel (the CONNECT to the URL's
	// host) and refuses only this request inside it, with Reason; set by
	// whoever decided that offline (selftest/plan). A CONNECT that egressd
	// answers 502/504 upstream-* then leaves the request untested live,
	// not leaked: it is reported Untestable ("the policy denies it").
	// Unset, such a 502 is a leak: the proxy tried to reach a target it
	// must refuse.
	InTunnel bool
	// ProxyUser, if set, is the Proxy-Authorization user the probe sends:
	// it speaks for that identity (a rule of another identity must refuse
	// it).
	ProxyUser string
}

const defaultTimeout = 1500 * time.Millisecond

// ErrConfig is wrapped by Run's error for a Config it cannot run.
var ErrConfig = errors.New("selftest: invalid config")

// Run runs every probe of c at once and returns the report. The error is
// non-nil only for an unusable Config; probes that cannot run are in the
// report as not run or error.
func Run(ctx context.Context, c Config) (*Report, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if c.Timeout <= 0 {
		c.Timeout = defaultTimeout
	}
	if c.ProxyDial == nil {
		c.ProxyDial = c.Dial
	}
	if c.ResolverDial == nil {
		c.ResolverDial = c.Dial
	}
	if c.LogDial == nil {
		var d net.Dialer
		c.LogDial = d.DialContext
	}
	if c.ToolDial == nil {
		var d net.Dialer
		c.ToolDial = d.DialContext
	}
	token := make([]byte, 12)
	rand.Read(token)
	r := &runner{c: c, token: "egressd-selftest-" + hex.EncodeToString(token)}
	probes := r.catalog()
	if c.ControlsOnly {
		probes = slices.DeleteFunc(probes, func(p probe) bool { return !p.control() })
	}
	rep := &Report{Start: time.Now().UTC(), Results: make([]Result, len(probes))}
	// Two rounds: the late probes (the canary log) check what the first
	// round may have let out.
	for _, late := range []bool{false, true} {
		var wg sync.WaitGroup
		for i, p := range probes {
			if p.late == late {
				wg.Go(func() { rep.Results[i] = r.run(ctx, p) })
			}
		}
		wg.Wait()
		r.secondLook(ctx, probes, rep.Results, late)
	}
	rep.Duration = time.Since(rep.Start)
	return rep, nil
}

// secondLookFactor stretches a probe's timeout for its second look.
const secondLookFactor = 3

// secondLook runs once more, with secondLookFactor times its timeout, each
// probe of the round that could not tell (status Error: no answer in time
// where an answer was expected, as on a loaded machine), before the run is
// called incomplete, and keeps the second result. A leak or a pass is
// evidence and is never asked again. It runs before the late round, so the
// canary log still sees what a second look let out.
func (r *runner) secondLook(ctx context.Context, probes []probe, results []Result, late bool) {
	var wg sync.WaitGroup
	for i, p := range probes {
		if p.late != late || results[i].Status != Error || ctx.Err() != nil {
			continue
		}
		d := p.timeout
		if d == 0 {
			d = r.c.Timeout
		}
		p.timeout = d * secondLookFactor
		wg.Go(func() { results[i] = r.run(ctx, p) })
	}
	wg.Wait()
}

func (c *Config) check() error {
	var errs []error
	if c.Dial == nil {
		errs = append(errs, errors.New("selftest: Options.Dial is required"))
	}
	for _, u := range append(slices.Clip(c.ExpectReachable), c.CanaryURL, c.CanaryLog, c.HostTrickURL) {
		if u == "" {
			continue
		}
		pu, err := url.Parse(u)
		if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			errs = append(errs, fmt.Errorf("%q: want an absolute http:// or https:// URL", u))
		}
	}
	errs = append(errs, checkToolServers(c.ToolServers)...)
	seen := map[string]bool{}
	for _, q := range c.Refused {
		if q.ID == "" || seen[q.ID] {
			errs = append(errs, fmt.Errorf("refused request %q: want a unique, non-empty ID", q.ID))
		}
		seen[q.ID] = true
		if pu, err := url.Parse(q.URL); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			errs = append(errs, fmt.Errorf("refused request %s: %q: want an absolute http:// or https:// URL", q.ID, q.URL))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrConfig, errors.Join(errs...))
	}
	return nil
}
