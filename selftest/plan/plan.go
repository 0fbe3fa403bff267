// Package plan derives the self-test catalog from a policy: the selftest
// keys' targets, a publish probe per mirror rule, the write pages a
// page-type rule refuses, a fronting (SNI) probe on a spliced host-only
// rule and the Host-header trick. The same plan serves egressd's own
// self-test and the in-sandbox `egressd probe`.
package plan

import (
	"cmp"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy"
	"github.com/egressd/egressd/selftest"
)

// Unlisted is a name no allow rule should cover: the CONNECT probe's
// target and the SNI a fronting probe offers. .invalid never resolves
// (RFC 6761), so even a leak reaches nobody.
const Unlisted = "egressd-selftest-unlisted.invalid"

// SilentAsk is the ClientHello deadline the silent-tunnel probe asks for
// on its own tunnel (proxy.HelloDeadlineHeader).
const SilentAsk = 250 * time.Millisecond

// MetadataNames are metadata host names the proxy must refuse.
var MetadataNames = []string{"metadata.google.internal"}

// TrustRoots verifies the positive controls: the system roots, the
// config's upstream_ca, and the PEM files given (egressd's own CA, for
// inspected rules). Files that cannot be read are skipped.
func TrustRoots(p *policy.Policy, extra ...string) *x509.CertPool {
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	for _, f := range append([]string{p.UpstreamCA}, extra...) {
		if f == "" {
			continue
		}
		if pem, err := os.ReadFile(f); err == nil {
			pool.AppendCertsFromPEM(pem)
		}
	}
	return pool
}

// Derive derives the catalog from the policy: the selftest keys, plus
// requests the policy refuses on each mirror and page-type rule, a
// fronting probe on a host-only rule, and the Host-header trick. The
// socket hooks and the proxy and resolver addresses are the caller's.
func Derive(p *policy.Policy, roots *x509.CertPool) selftest.Config {
	st := &p.Selftest
	c := selftest.Config{
		TCP: st.TCP, UDP: st.UDP, IPv6: st.IPv6, Resolvers: st.Resolvers,
		Metadata: st.Metadata, MetadataNames: MetadataNames,
		CanaryName: st.CanaryName, CanaryURL: st.CanaryURL, CanaryLog: st.CanaryLog,
		ExpectReachable: append(slices.Clip(st.ExpectReachable), parentControls(p)...), // parent.go
		RootCAs:         roots,
		Timeout:         st.Timeout,
	}
	seen := map[netip.Addr]bool{}
	for _, list := range [][]netip.AddrPort{st.TCP, st.UDP, st.IPv6, st.Resolvers} {
		for _, ap := range list {
			if a := ap.Addr().Unmap(); !seen[a] {
				seen[a] = true
				c.ICMP = append(c.ICMP, a)
			}
		}
	}
	if t, err := policy.ParseAuthority(Unlisted + ":443"); err == nil && !p.DecideTarget(&t).Allow {
		c.Unlisted = Unlisted + ":443"
		c.SNIName = Unlisted
	}
	c.SNIHost = sniHost(p)
	if c.SNIName == "" {
		c.SNIHost = ""
	}
	if u := hostTrickURL(p, c.SNIHost); u != "" {
		c.HostTrickURL = u
		c.HostTrickHost = Unlisted
		for _, a := range st.Metadata {
			if a.Is4() {
				c.HostTrickHost = a.String()
				break
			}
		}
	}
	for _, ts := range st.ToolServers {
		c.ToolServers = append(c.ToolServers, selftest.ToolServer{Name: ts.Name, URL: ts.URL, Tool: ts.Tool, Arg: ts.Arg})
	}
	c.Refused = refusedRequests(p)
	c.Own = ownListeners(p)
	c.InspectHost, c.HeadBytes = inspectHost(p), p.Limits.HeaderBytes
	c.SilentHost, c.SilentDeadline = cmp.Or(c.InspectHost, c.SNIHost), proxy.HelloTimeout
	// The silent-tunnel probe asks for a short deadline on its own tunnel
	// and sees it hold, rather than waiting HelloTimeout in every run
	// (docs/PROOF.md: "A proof in under two seconds").
	c.SilentAsk = SilentAsk
	// In transparent mode the walls send sandbox TCP 443 and 80 to
	// egressd: a direct probe there must find egressd refusing, not fail
	// for having connected.
	if p.Listen.Transparent != "" {
		c.Redirected = append(c.Redirected, 443)
	}
	if p.Listen.TransparentHTTP != "" {
		c.Redirected = append(c.Redirected, 80)
	}
	// ...but only destinations the policy could allow (the walls redirect
	// the rules' cidrs and DNS answers for allowed names, never high-risk
	// addresses nor IPv6: daemon.WallSpec); any other that connects leaks
	if len(c.Redirected) > 0 {
		for _, r := range p.Rules {
			for _, pr := range r.CIDRs {
				if pr.Addr().Is4() {
					c.RedirectedTo = append(c.RedirectedTo, pr)
				}
			}
		}
	}
	// every identity's canary token, for the canary-log probe
	if strings.Contains(st.CanaryName+st.CanaryURL, policy.CanaryToken) {
		c.CanaryTokens = map[string]string{policy.SelftestIdentity: CanaryToken(policy.SelftestIdentity)}
		for _, id := range p.Identities {
			c.CanaryTokens[id.Name] = CanaryToken(id.Name)
		}
	}
	return ForIdentity(c, policy.SelftestIdentity)
}

// CanaryToken is identity's canary token: a short hash, stable across
// runs and restarts, so the canary server's log names the sandbox whose
// canary got out without carrying the identity's name out with it.
func CanaryToken(identity string) string {
	h := sha256.Sum256([]byte("egressd-canary\x00" + identity))
	return hex.EncodeToString(h[:6])
}

// ForIdentity fills the {token} of the canary name and URL with
// identity's canary token.
func ForIdentity(c selftest.Config, identity string) selftest.Config {
	tok := CanaryToken(identity)
	c.CanaryName = strings.ReplaceAll(c.CanaryName, policy.CanaryToken, tok)
	c.CanaryURL = strings.ReplaceAll(c.CanaryURL, policy.CanaryToken, tok)
	return c
}

// sniHost picks host:port of a spliced (host-only, TLS) tunnel: an
// expect_reachable https URL if one is, else the first exact host of a
// host-only rule on 443. "" when the policy has none: then no tunnel can
// be fronted.
func sniHost(p *policy.Policy) string {
	spliced := func(hp string) bool {
		t, err := policy.ParseAuthority(hp)
		if err != nil || t.Addr.IsValid() {
			return false
		}
		d := p.DecideTarget(&t)
		return d.Allow && !d.Inspect && d.Rule.TLS
	}
	for _, s := range p.Selftest.ExpectReachable {
		u, err := url.Parse(s)
		if err != nil || u.Scheme != "https" {
			continue
		}
		hp := net.JoinHostPort(u.Hostname(), cmp.Or(u.Port(), "443"))
		if spliced(hp) {
			return hp
		}
	}
	for _, r := range p.Rules {
		if h := ruleHost(r); h != "" && r.HostOnly() && r.TLS && r.AllowsPort(443) && spliced(h+":443") {
			return h + ":443"
		}
	}
	return ""
}

// hostTrickURL is an absolute http URL to an allowed host: the first
// expect_reachable target, else the fronting probe's host.
func hostTrickURL(p *policy.Policy, sni string) string {
	for _, s := range p.Selftest.ExpectReachable {
		if u, err := url.Parse(s); err == nil {
			port := u.Port()
			if port == "" {
				port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
			}
			return "http://" + net.JoinHostPort(u.Hostname(), port) + "/"
		}
	}
	if sni != "" {
		return "http://" + sni + "/"
	}
	return ""
}

// ruleHost is a concrete host a rule covers: its first exact name, or a
// name under its first wildcard; "" for "*" and cidrs-only rules.
func ruleHost(r *policy.Rule) string {
	for h := range r.Hosts.All() {
		if h != "*" && !strings.HasPrefix(h, "*.") {
			return h
		}
	}
	for h := range r.Hosts.All() {
		if s, ok := strings.CutPrefix(h, "*."); ok {
			return "egressd-selftest." + s
		}
	}
	return ""
}

// pageProbes are the write pages a page-type rule must refuse unless it
// allows that page type.
var pageProbes = []struct {
	page                      policy.PageType
	method, path, ctype, body string
}{
	{policy.PageLogin, "POST", "/login", "application/x-www-form-urlencoded", "username=egressd-selftest&password=egressd-selftest"},
	{policy.PageUpload, "POST", "/upload", "multipart/form-data; boundary=egressd", "--egressd\r\nContent-Disposition: form-data; name=\"file\"; filename=\"egressd-selftest.txt\"\r\n\r\negressd-selftest\r\n--egressd--\r\n"},
	{policy.PagePosting, "POST", "/comments", "application/x-www-form-urlencoded", "comment=egressd-selftest"},
}

// refusedRequests derives, per mirror rule, a publish request to one of its
// hosts and, per page-type rule, a login, an upload and a posting request
// for each of those page types the rule does not allow. Each is checked
// offline against the policy: only requests the policy itself refuses
// become probes, with the reason the refusal must carry.
func refusedRequests(p *policy.Policy) []selftest.Request {
	var out []selftest.Request
	add := func(id, route, base, method, path, ctype, body string) {
		raw := base + path
		t, err := policy.ParseURL(raw)
		if err != nil {
			return
		}
		d := p.DecideRequest(&t, method, ctype, int64(len(body)))
		if d.Allow {
			return
		}
		out = append(out, selftest.Request{ID: id, Route: route, Method: method, URL: raw, ContentType: ctype, Body: body, Reason: d.Reason.String(), InTunnel: inTunnel(p, raw)})
	}
	for _, r := range p.Rules {
		host := ruleHost(r)
		if host == "" {
			continue
		}
		var base string
		switch {
		case r.AllowsPort(443):
			base = "https://" + host
		case r.AllowsPort(80):
			base = "http://" + host
		default:
			continue
		}
		if r.Mirror != policy.MirrorNone {
			// Each ecosystem declares its publish probe (policy/classify).
			if q, ok := policy.PublishProbe(r.Mirror); ok {
				if bp := r.MirrorOp.BasePath; bp != "/" {
					base += bp // where the repository is: its grammar must refuse
				}
				add("mirror-publish/"+r.Name, fmt.Sprintf("proxy: %s publish on mirror rule %s", r.Mirror, r.Name), base, q.Method, q.Path, q.ContentType, q.Body)
			}
			continue
		}
		if r.AllPages {
			continue
		}
		// A read carrying data in its query: over limits.query_bytes it
		// must be refused (query-budget), whatever the page type.
		add("query-budget/"+r.Name, fmt.Sprintf("proxy: query over limits.query_bytes on rule %s", r.Name), base, "GET",
			"/egressd-selftest?q="+strings.Repeat("a", p.Limits.QueryBytes), "", "")
		// A read carrying data in a header: over limits.read_head_bytes it
		// must be refused (header-budget).
		if q, ok := headerBudgetProbe(p, r, base); ok {
			out = append(out, q)
		}
		for _, q := range pageProbes {
			if !r.Pages.Has(q.page) {
				add(fmt.Sprintf("page-%s/%s", q.page, r.Name), fmt.Sprintf("proxy: %s page on rule %s", q.page, r.Name), base, q.method, q.path, q.ctype, q.body)
			}
		}
	}
	return append(out, identityProbes(p)...)
}

// headerBudgetProbe is a read on rule r carrying one header as large as
// limits.read_head_bytes, if the policy refuses it (header-budget).
func headerBudgetProbe(p *policy.Policy, r *policy.Rule, base string) (selftest.Request, bool) {
	raw := base + "/egressd-selftest"
	t, err := policy.ParseURL(raw)
	if err != nil {
		return selftest.Request{}, false
	}
	d := p.DecideRequest(&t, "GET", "", 0)
	hdr := map[string]string{"X-Egressd-Selftest": strings.Repeat("a", p.Limits.ReadHeadBytes)}
	h := http.Header{}
	for k, v := range hdr {
		h.Set(k, v)
	}
	if !d.Allow || d.Rule != r {
		return selftest.Request{}, false
	}
	if _, ok, _ := p.CheckHead(&d, h); ok {
		return selftest.Request{}, false
	}
	return selftest.Request{ID: "header-budget/" + r.Name, Route: fmt.Sprintf("proxy: headers over limits.read_head_bytes on rule %s", r.Name),
		Method: "GET", URL: raw, Header: hdr, Reason: policy.ReasonHeaderBudget.String(), InTunnel: inTunnel(p, raw)}, true
}

// inTunnel says whether raw is an https URL whose tunnel (the CONNECT to
// its host) the policy allows: the request it refuses is then decided
// inside the tunnel, and a tunnel an upstream outage keeps closed leaves it
// untested live rather than leaked (selftest.Request.InTunnel).
func inTunnel(p *policy.Policy, raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" {
		return false
	}
	t, err := policy.ParseAuthority(net.JoinHostPort(u.Hostname(), cmp.Or(u.Port(), "443")))
	return err == nil && p.DecideTarget(&t).Allow
}

// ownListeners are egressd's admin and DNS listeners as the proxy would
// dial them (an unspecified bind: loopback): none may be reachable through
// the proxy.
func ownListeners(p *policy.Policy) []string {
	var out []string
	for _, a := range []string{p.Listen.Admin, p.Listen.DNS} {
		h, port, err := net.SplitHostPort(a)
		if err != nil || port == "0" {
			continue
		}
		if ip := net.ParseIP(h); h == "" || ip != nil && ip.IsUnspecified() {
			h = "127.0.0.1"
		}
		out = append(out, net.JoinHostPort(h, port))
	}
	return out
}

// inspectHost picks host:port of an inspected rule on 443 (the first exact
// host), for the inner head-limit probe; "" when the policy has none.
func inspectHost(p *policy.Policy) string {
	for _, r := range p.Rules {
		h := ruleHost(r)
		if h == "" || !r.AllowsPort(443) {
			continue
		}
		t, err := policy.ParseAuthority(h + ":443")
		if err != nil {
			continue
		}
		if d := p.DecideTarget(&t); d.Allow && d.Inspect {
			return h + ":443"
		}
	}
	return ""
}
