package selftest

import (
	"context"
	"fmt"
	"net/netip"
	"time"
)

// probe is one entry of the catalog.
type probe struct {
	id, route, target, expected string
	direct                      bool          // a direct route: not run under SkipDirect
	timeout                     time.Duration // zero: Config.Timeout
	late                        bool          // run after all others (the canary log)
	notRun                      string        // set: report as not run with this reason
	run                         func(ctx context.Context) outcome
}

// outcome is what a probe found.
type outcome struct {
	status Status
	result string
	detail string
}

// control reports whether p is a positive control: a target that must be
// reachable (through the proxy, or a tool server), whose failure is
// control-failed, not a leak.
func (p probe) control() bool { return p.expected == expReachable || p.expected == expToolContent }

func pass(result string) outcome { return outcome{status: Pass, result: result} }

func leak(result, detail string) outcome {
	return outcome{status: Leak, result: result, detail: detail}
}

func failed(result, detail string) outcome {
	return outcome{status: Failed, result: result, detail: "positive control failed: " + detail}
}

func errored(result, detail string) outcome {
	return outcome{status: Error, result: result, detail: detail}
}

func untestable(result, detail string) outcome {
	return outcome{status: Untestable, result: result, detail: detail}
}

func notRun(detail string) outcome { return outcome{status: NotRun, result: "not run", detail: detail} }

// Expectations, as the report's Expected column states them.
const (
	expNoConn    = "no connection"
	expNoReply   = "no reply"
	expNoEcho    = "no echo reply"
	expNoAnswer  = "no answer"
	expNXDomain  = "NXDOMAIN or REFUSED"
	expRefused   = "refused by egressd"
	expHighRisk  = "403 high-risk"
	expClosed    = "tunnel cut off"
	expNoToken   = "token absent"
	expReachable = "reachable"
)

type runner struct {
	c     Config
	token string
}

// catalog lists every probe the config asks for, in report order: the
// direct probes first, then those through the proxy.
func (r *runner) catalog() []probe {
	return append(append(r.directProbes(), r.proxiedProbes()...), r.toolServerProbes()...)
}

// directProbes are the probes that go around the proxy: walls, DNS,
// metadata.
func (r *runner) directProbes() []probe {
	c := &r.c
	var ps []probe
	add := func(p probe) { ps = append(ps, p) }

	for _, ap := range c.TCP {
		add(probe{id: "tcp/" + ap.String(), route: "direct tcp", target: ap.String(), expected: expNoConn, direct: true,
			run: func(ctx context.Context) outcome { return r.tcp(ctx, ap) }})
	}
	for _, ap := range c.UDP {
		add(probe{id: "udp/" + ap.String(), route: "direct udp", target: ap.String(), expected: expNoReply, direct: true,
			run: func(ctx context.Context) outcome { return r.udp(ctx, ap) }})
	}
	for _, a := range c.ICMP {
		p := probe{id: "icmp/" + a.String(), route: "direct icmp", target: a.String(), expected: expNoEcho, direct: true,
			run: func(ctx context.Context) outcome { return r.icmp(ctx, a) }}
		if c.ListenICMP == nil {
			p.notRun = "no ICMP socket hook (ListenICMP) for the probe namespace"
		}
		add(p)
	}
	for _, ap := range c.IPv6 {
		add(probe{id: "ipv6/" + ap.String(), route: "direct ipv6 tcp", target: ap.String(), expected: expNoConn, direct: true,
			run: func(ctx context.Context) outcome { return r.tcp(ctx, ap) }})
	}
	for _, ap := range c.Resolvers {
		add(probe{id: "dns-direct-udp/" + ap.String(), route: "direct dns (udp)", target: ap.String(), expected: expNoAnswer, direct: true,
			run: func(ctx context.Context) outcome { return r.dnsDirect(ctx, "udp", ap) }})
		add(probe{id: "dns-direct-tcp/" + ap.String(), route: "direct dns (tcp)", target: ap.String(), expected: expNoAnswer, direct: true,
			run: func(ctx context.Context) outcome { return r.dnsDirect(ctx, "tcp", ap) }})
	}
	if c.CanaryName != "" {
		p := probe{id: "dns-canary/" + c.CanaryName, route: "sandbox resolver", target: c.CanaryName + " via " + c.DNS.String(), expected: expNXDomain,
			run: func(ctx context.Context) outcome { return r.dnsCanary(ctx) }}
		if !c.DNS.IsValid() {
			p.target = c.CanaryName
			p.notRun = "no sandbox resolver configured (listen.dns)"
		}
		add(p)
	}
	if c.Vsock {
		add(probe{id: "vsock/host", route: "AF_VSOCK (not IP: no wall sees it)", target: "CID 2 (the hypervisor's host)", expected: "no vsock socket", direct: true,
			run: func(ctx context.Context) outcome { return r.vsock(ctx) }})
	}
	for _, path := range c.HostSockets {
		add(probe{id: "host-socket/" + path, route: "unix socket", target: path, expected: "no daemon outside the sandbox", direct: true,
			run: func(ctx context.Context) outcome { return r.hostSocket(ctx, path) }})
	}
	for _, a := range c.Metadata {
		ap := netip.AddrPortFrom(a, 80)
		add(probe{id: "metadata-direct/" + ap.String(), route: "direct tcp to metadata", target: ap.String(), expected: expNoConn, direct: true,
			run: func(ctx context.Context) outcome { return r.tcp(ctx, ap) }})
	}
	return ps
}

// proxiedProbes are the probes sent through the proxy; each is not run
// when no proxy address is configured.
func (r *runner) proxiedProbes() []probe {
	c := &r.c
	var ps []probe
	add := func(p probe) { ps = append(ps, p) }
	proxied := func(p probe) {
		if !c.Proxy.IsValid() {
			p.notRun = "no proxy address configured"
		}
		add(p)
	}
	if c.CanaryURL != "" {
		proxied(probe{id: "http-canary", route: "proxy http", target: c.CanaryURL, expected: expRefused,
			run: func(ctx context.Context) outcome { return r.refusedRequest(ctx, r.canaryRequest(), "") }})
		if c.CanaryLog != "" {
			p := probe{id: "canary-log", route: "canary log", target: c.CanaryLog, expected: expNoToken, late: true,
				run: func(ctx context.Context) outcome { return r.canaryLog(ctx) }}
			if !c.Proxy.IsValid() {
				p.notRun = "the canary request was not sent: no proxy address configured"
			}
			add(p)
		}
	}
	if c.Unlisted != "" {
		proxied(probe{id: "connect-unlisted/" + c.Unlisted, route: "proxy connect", target: c.Unlisted, expected: expRefused,
			run: func(ctx context.Context) outcome { return r.connectRefused(ctx, c.Unlisted) }})
	}
	for _, a := range c.Metadata {
		for _, s := range metadataSpellings(a) {
			proxied(probe{id: "metadata-proxy-" + s.name + "/" + a.String(), route: "proxy http, " + s.name + " spelling", target: s.host, expected: expHighRisk,
				run: func(ctx context.Context) outcome { return r.metadataProxy(ctx, s.host) }})
		}
	}
	for _, n := range c.MetadataNames {
		proxied(probe{id: "metadata-proxy-name/" + n, route: "proxy http, name", target: n, expected: expRefused,
			run: func(ctx context.Context) outcome { return r.rawRefused(ctx, "http://"+n+"/latest/meta-data/", n, "") }})
	}
	for _, q := range c.Refused {
		proxied(probe{id: q.ID, route: q.Route, target: q.Method + " " + q.URL, expected: expectedFor(q.Reason),
			run: func(ctx context.Context) outcome { return r.refusedRequest(ctx, q, q.Reason) }})
	}
	if c.SNIHost != "" && c.SNIName != "" {
		proxied(probe{id: "sni-mismatch/" + c.SNIHost, route: "proxy connect, tls sni", target: fmt.Sprintf("%s with SNI %s", c.SNIHost, c.SNIName), expected: expClosed,
			run: func(ctx context.Context) outcome { return r.sniMismatch(ctx) }})
	}
	if c.HostTrickURL != "" && c.HostTrickHost != "" {
		proxied(probe{id: "host-trick", route: "proxy http, host header", target: fmt.Sprintf("%s with Host: %s", c.HostTrickURL, c.HostTrickHost), expected: "400/403 from egressd",
			run: func(ctx context.Context) outcome { return r.hostTrick(ctx) }})
	}
	for _, own := range c.Own {
		proxied(probe{id: "proxy-loop-http/" + own, route: "proxy http to egressd's own listener", target: own, expected: expRefused,
			run: func(ctx context.Context) outcome { return r.rawRefused(ctx, "http://"+own+"/metrics", own, "") }})
		proxied(probe{id: "proxy-loop-connect/" + own, route: "proxy connect to egressd's own listener", target: own, expected: expRefused,
			run: func(ctx context.Context) outcome { return r.connectRefused(ctx, own) }})
	}
	if c.InspectHost != "" && c.HeadBytes > 0 {
		proxied(probe{id: "inner-head-limit/" + c.InspectHost, route: "proxy connect, inspected, oversized head", target: fmt.Sprintf("%s with a %d-byte head", c.InspectHost, c.HeadBytes+oversize), expected: "431 from egressd",
			run: func(ctx context.Context) outcome { return r.innerHeadLimit(ctx) }})
	}
	if c.InspectHost != "" {
		proxied(probe{id: "h2c-upgrade/" + c.InspectHost, route: "proxy connect, inspected, Upgrade: h2c", target: c.InspectHost, expected: "403 upgrade",
			run: func(ctx context.Context) outcome { return r.h2cUpgrade(ctx) }})
	}
	if c.SilentHost != "" && c.SilentDeadline > 0 {
		proxied(probe{id: "silent-tunnel/" + c.SilentHost, route: "proxy connect, silent client", target: c.SilentHost, expected: fmt.Sprintf("closed within %s", c.SilentDeadline),
			timeout: c.SilentDeadline + silentSlack,
			run:     func(ctx context.Context) outcome { return r.silentTunnel(ctx) }})
	}
	for _, u := range c.ExpectReachable {
		proxied(probe{id: "expect/" + u, route: "positive control via proxy", target: u, expected: expReachable, timeout: 2 * c.Timeout,
			run: func(ctx context.Context) outcome { return r.reachable(ctx, u) }})
	}
	return ps
}

func expectedFor(reason string) string {
	if reason == "" {
		return expRefused
	}
	return "403 " + reason
}

// run runs one probe with its timeout and turns the outcome into a Result.
func (r *runner) run(ctx context.Context, p probe) Result {
	res := Result{ID: p.id, Route: p.route, Target: p.target, Expected: p.expected}
	var o outcome
	switch {
	case p.direct && r.c.SkipDirect != "":
		o = notRun(r.c.SkipDirect)
	case p.notRun != "":
		o = notRun(p.notRun)
	default:
		d := p.timeout
		if d == 0 {
			d = r.c.Timeout
		}
		pctx, cancel := context.WithTimeout(ctx, d)
		start := time.Now()
		o = p.run(pctx)
		res.Duration = time.Since(start)
		cancel()
		if ctx.Err() != nil && o.status == Pass {
			// The run was cancelled: silence proves nothing.
			o = errored("cancelled", "the run was cancelled: "+ctx.Err().Error())
		}
	}
	res.Status, res.Result, res.Detail = o.status, o.result, o.detail
	res.Leak = o.status == Leak || o.status == Failed
	return res
}
