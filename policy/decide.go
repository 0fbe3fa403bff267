package policy

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/egressd/egressd/policy/classify"
)

// Decision is the outcome for one target or request. It is a value: the
// policy never logs and never touches the network.
type Decision struct {
	Allow      bool
	Reason     Reason
	Detail     string // what fired: the page signal or mirror trap; may be empty
	Rule       *Rule  // the matching rule; nil when none matched
	Host       string // normalized host (name, or address in canonical form)
	Addr       netip.Addr
	HighRisk   bool
	PageType   PageType
	PageSignal string
	Inspect    bool  // CONNECT: TLS must be terminated to check pages, methods, paths or mirror grammar
	BodyCap    int64 // mirror or read-only POST: read at most this much body and call CheckBody
	ReadPost   bool  // allowed as a read-only POST the rule opted in to: the body must pass CheckBody
	// View is the declared identity whose view of the rules applied; ""
	// when the client is no declared identity (only rules naming no
	// identities can allow it).
	View string
}

// RuleName is the matched rule's name, or "" when none matched.
func (d *Decision) RuleName() string {
	if d.Rule == nil {
		return ""
	}
	return d.Rule.Name
}

func deny(d Decision, r Reason) Decision {
	d.Allow = false
	d.Reason = r
	return d
}

// DecideTarget decides a target on host, port and address alone: the
// decision for a CONNECT. An allowed decision under a rule that is not
// host-only has Inspect set, and each request inside the tunnel must then
// pass DecideRequest.
func (p *Policy) DecideTarget(t *Target) Decision {
	return p.DecideTargetAs(t, "")
}

// DecideTargetAs is DecideTarget in the view of identity: only rules that
// apply to it (rules naming no identities apply to all) can allow.
func (p *Policy) DecideTargetAs(t *Target, identity string) Decision {
	v := p.viewOf(identity)
	d := Decision{Host: t.Host(), Addr: t.Addr, View: v.name}
	if t.Addr.IsValid() {
		return p.decideAddr(d, t.Addr, t.Port, v)
	}
	if p.HighRiskName(t.Name) {
		d.HighRisk = true
		return deny(d, ReasonHighRisk)
	}
	r, portMiss := p.matchName(t.Name, t.Port, v)
	if r == nil {
		if portMiss {
			return deny(d, ReasonPort)
		}
		return deny(d, ReasonNoRule)
	}
	d.Rule = r
	d.Allow = true
	d.Inspect = !r.HostOnly()
	return d
}

func (p *Policy) decideAddr(d Decision, a netip.Addr, port uint16, v view) Decision {
	info := ClassifyAddr(a)
	if info.Class == ClassHighRisk || p.deniedAddr(a) {
		d.HighRisk = true
		return deny(d, ReasonHighRisk)
	}
	var portMiss bool
	for _, i := range p.cidrRule {
		r := p.Rules[i]
		if !v.sees(r) || !r.coversAddr(a) {
			continue
		}
		if !r.AllowsPort(port) {
			portMiss = true
			continue
		}
		if info.Class != ClassPublic && !r.unlocks(a, info) {
			continue
		}
		d.Rule = r
		d.Allow = true
		d.Inspect = !r.HostOnly()
		return d
	}
	switch {
	case info.Class != ClassPublic:
		return deny(d, ReasonSpecialAddr)
	case portMiss:
		return deny(d, ReasonPort)
	}
	return deny(d, ReasonNoRule)
}

func (r *Rule) coversAddr(a netip.Addr) bool {
	a = a.Unmap()
	for _, c := range r.CIDRs {
		if c.Contains(a) {
			return true
		}
	}
	return false
}

// unlocks reports whether one of the rule's cidrs lies inside the special-use
// block of a and contains a: 127.0.0.0/8 unlocks loopback, 0.0.0.0/0 unlocks
// nothing special. Addresses that reach a special IPv4 address through an
// IPv6 embedding are never unlocked: name the IPv4 address instead.
func (r *Rule) unlocks(a netip.Addr, info AddrInfo) bool {
	if info.Class == ClassHighRisk || info.Embedded.IsValid() || !info.Block.IsValid() {
		return false
	}
	a = a.Unmap()
	for _, c := range r.CIDRs {
		if c.Contains(a) && c.Bits() >= info.Block.Bits() && info.Block.Contains(c.Addr()) {
			return true
		}
	}
	return false
}

// CheckAddr is the dial-time check: may a connection decided under rule r
// go to address a (a resolved answer, or the literal)? Public addresses pass
// unless denied; special-use ones only when r's cidrs unlock them; high-risk
// never. It returns the class for logging.
func (p *Policy) CheckAddr(r *Rule, a netip.Addr) (bool, AddrInfo) {
	info := ClassifyAddr(a)
	if info.Class == ClassHighRisk || p.deniedAddr(a) {
		info.Class = ClassHighRisk
		return false, info
	}
	if info.Class == ClassPublic {
		return true, info
	}
	return r != nil && r.unlocks(a, info), info
}

func (p *Policy) deniedAddr(a netip.Addr) bool {
	if len(p.denyCIDRs) == 0 {
		return false
	}
	a = a.Unmap()
	emb, hasEmb := embeddedV4(a)
	for _, c := range p.denyCIDRs {
		if c.Contains(a) || hasEmb && c.Contains(emb) {
			return true
		}
	}
	return false
}

// HighRiskName reports whether a normalized name is on the built-in
// high-risk list or the config's deny.hosts, exactly or under a denied
// suffix.
func (p *Policy) HighRiskName(name string) bool {
	if p.denyExact.has(name) {
		return true
	}
	for _, l := range p.denyLists {
		if l.Covers(name) {
			return true
		}
	}
	for s := name; ; {
		if p.denySuffix.has(s) {
			return true
		}
		i := strings.IndexByte(s, '.')
		if i < 0 {
			return false
		}
		s = s[i+1:]
	}
}

// RuleForName returns the first rule whose hosts cover name on any port (the
// DNS filter's question: may this name be resolved at all?), or nil.
func (p *Policy) RuleForName(name string) *Rule {
	if p.HighRiskName(name) {
		return nil
	}
	r, _ := p.matchName(name, 0, anyView)
	return r
}

// matchName finds the first rule (lowest index) whose hosts cover name and
// whose ports cover port (port 0: any). portMiss reports that some rule
// covered the name but not the port.
func (p *Policy) matchName(name string, port uint16, v view) (r *Rule, portMiss bool) {
	best := int32(len(p.Rules))
	p.eachNameRule(name, func(idx int32, named bool) {
		if idx >= best || !v.sees(p.Rules[idx]) {
			return
		}
		if port != 0 && !p.Rules[idx].AllowsPort(port) {
			portMiss = portMiss || named // a "*" rule's ports say nothing about this host
			return
		}
		best = idx
	})
	if best == int32(len(p.Rules)) {
		return nil, portMiss
	}
	return p.Rules[best], false
}

// eachNameRule calls consider with the index of every rule whose hosts
// cover name, in no particular order; named is false for "*" rules.
func (p *Policy) eachNameRule(name string, consider func(idx int32, named bool)) {
	list := func(v int32) {
		if v >= 0 {
			consider(v, true)
			return
		}
		for _, idx := range p.multi[-v-1] {
			consider(idx, true)
		}
	}
	if v, ok := p.exact.get(name); ok {
		list(v)
	}
	if p.suffix.Len() > 0 {
		// walk the parents of name: a.b.example.com → b.example.com → example.com → com
		s := name
		for depth := strings.Count(name, "."); depth > 0; depth-- {
			s = s[strings.IndexByte(s, '.')+1:]
			if depth > p.maxDepth {
				continue
			}
			if v, ok := p.suffix.get(s); ok {
				list(v)
			}
		}
	}
	for _, idx := range p.star {
		consider(idx, false)
	}
}

// DecideRequest decides one HTTP request (absolute-form, or inside an
// inspected tunnel): the target decision, then method, path, page type and
// mirror grammar under the matched rule. method is used exactly as sent
// (HTTP methods are case-sensitive: "get" is not GET, and is a write to the
// classifier), by the proxy and by egressd check alike. Every request is
// classified, denied or not, so PageType always says what it was.
func (p *Policy) DecideRequest(t *Target, method, contentType string, contentLength int64) Decision {
	return p.DecideRequestAs(t, "", method, contentType, contentLength)
}

// DecideRequestAs is DecideRequest in the view of identity (see
// DecideTargetAs). A denied request still carries its page type: the log
// shows what it would have done, and `egressd suggest` proposes pages
// from it.
func (p *Policy) DecideRequestAs(t *Target, identity, method, contentType string, contentLength int64) Decision {
	d := p.DecideTargetAs(t, identity)
	req := Request{Method: method, Host: d.Host, Port: t.Port, Path: t.Path, Query: t.Query, ContentType: contentType, ContentLength: contentLength}
	if d.Rule != nil {
		req.ReadPosts = d.Rule.readPosts()
	}
	d.PageType, d.PageSignal = ClassifyPage(&req)
	if !d.Allow {
		return d
	}
	d.Inspect = false
	r := d.Rule
	if r.MirrorOp.BasePath != "" {
		if r = p.routeBase(t, p.viewOf(identity), t.Path); r == nil {
			d.Detail = p.baseDetail(t, p.viewOf(identity))
			return deny(d, ReasonMirror)
		}
		d.Rule = r
	}
	if r.Inject != nil && contains(echoMethods, method) {
		d.Detail = method + " echoes the request, with the injected credential, back to the client"
		return deny(d, ReasonMethod)
	}
	if r.Mirror != MirrorNone {
		v := CheckMirror(r.Mirror, &req, &r.MirrorOp)
		if !v.Allow {
			d.Detail = v.Reason
			return deny(d, ReasonMirror)
		}
		d.BodyCap = v.BodyCap
		return d
	}
	if len(r.Methods) > 0 && !contains(r.Methods, method) {
		d.Detail = method
		return deny(d, ReasonMethod)
	}
	if len(r.Paths) > 0 && !r.allowsPath(t.Path) {
		return deny(d, ReasonPath)
	}
	if !r.AllPages && !r.Pages.Has(d.PageType) {
		d.Detail = d.PageSignal
		return deny(d, ReasonPageType)
	}
	if !r.AllPages && len(t.Query) > p.Limits.QueryBytes {
		d.Detail = fmt.Sprintf("query of %d bytes, budget %d", len(t.Query), p.Limits.QueryBytes)
		return deny(d, ReasonQueryBudget)
	}
	if strings.HasPrefix(d.PageSignal, "readpost:") {
		d.BodyCap = classify.ReadPostBodyCap(d.PageSignal)
		d.ReadPost = true
	}
	return d
}

// gitReadPosts is what mirror: git implies: its grammar allows
// git-upload-pack and checks the body itself.
var gitReadPosts = []string{"git-upload-pack"}

func (r *Rule) readPosts() []string {
	if r.Mirror == MirrorGit {
		return gitReadPosts
	}
	return r.ReadPosts
}

// CheckBody checks a buffered request body that DecideRequest allowed with
// BodyCap > 0: a mirror protocol read made with POST, or a read-only POST
// the rule opted in to. It returns the deny reason to use when not ok.
func (p *Policy) CheckBody(d *Decision, t *Target, method, contentType string, body []byte) (bool, string) {
	switch {
	case d.Rule == nil:
		return false, "no rule"
	case d.Rule.Mirror != MirrorNone:
		req := Request{Method: method, Host: d.Host, Port: t.Port, Path: t.Path, Query: t.Query, ContentType: contentType, ContentLength: int64(len(body))}
		return CheckMirrorBody(d.Rule.Mirror, &req, body)
	case d.ReadPost:
		return classify.CheckReadPostBody(d.PageSignal, body)
	}
	return false, "no body check for this request"
}

// BodyReason is the reason a body CheckBody refused is denied with.
func (d *Decision) BodyReason() Reason {
	if d.Rule != nil && d.Rule.Mirror != MirrorNone {
		return ReasonMirror
	}
	return ReasonBody
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// allowsPath matches the raw path against the rule's patterns. A path that
// could mean two things (escaped slash or dot, dot-segments, empty
// segments) never matches: a server might route it somewhere the pattern
// did not mean.
func (r *Rule) allowsPath(path string) bool {
	if ambiguousPath(path) {
		return false
	}
	for _, pat := range r.Paths {
		if prefix, ok := strings.CutSuffix(pat, "*"); ok {
			if strings.HasPrefix(path, prefix) {
				return true
			}
		} else if path == pat {
			return true
		}
	}
	return false
}

func ambiguousPath(path string) bool {
	for i := 0; i < len(path); i++ {
		switch path[i] {
		case '%':
			if i+2 < len(path) {
				e := strings.ToLower(path[i+1 : i+3])
				if e == "2f" || e == "2e" || e == "5c" || e == "00" || e == "25" {
					return true
				}
			}
		case '/':
			if strings.HasPrefix(path[i:], "//") || strings.HasPrefix(path[i:], "/./") || strings.HasPrefix(path[i:], "/../") ||
				path[i:] == "/." || path[i:] == "/.." {
				return true
			}
		case ';', '\\':
			return true
		}
	}
	return false
}

// HighRiskPrefixes returns the built-in high-risk blocks plus deny.cidrs:
// what the kernel walls drop by a rule of their own.
func (p *Policy) HighRiskPrefixes() []netip.Prefix {
	out := make([]netip.Prefix, 0, len(builtinHighRiskCIDRs)+len(p.denyCIDRs))
	out = append(out, builtinHighRiskCIDRs...)
	return append(out, p.denyCIDRs...)
}
