package policy

// Per-identity rules, operator messages and credential injection: the
// rule keys identities, message and inject, and deny.message.

import (
	"fmt"
	"net"
	"net/textproto"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// view is whose rules a decision may use: one declared identity's (rules
// naming it, plus rules naming none), or every rule (any: the DNS filter,
// which cannot tell identities apart).
type view struct {
	name string
	any  bool
}

var anyView = view{any: true}

// viewOf is the view of a client that egressd identified as id; a client
// that is no declared identity sees only the rules naming none.
func (p *Policy) viewOf(id string) view {
	if id != "" && p.identitySet[id] {
		return view{name: id}
	}
	return view{}
}

func (v view) sees(r *Rule) bool {
	return v.any || len(r.Identities) == 0 || v.name != "" && slices.Contains(r.Identities, v.name)
}

// AppliesTo reports whether the rule applies to the declared identity id
// ("" or an undeclared name: only rules naming no identities apply).
func (r *Rule) AppliesTo(id string) bool {
	return len(r.Identities) == 0 || id != "" && slices.Contains(r.Identities, id)
}

// Message is the operator's text for a denial: the matched rule's message,
// or deny.message when no rule applied (the default deny). "" for an
// allow, a high-risk refusal, or when the operator wrote none.
func (p *Policy) Message(d *Decision) string {
	switch {
	case d.Allow || d.HighRisk:
		return ""
	case d.Rule != nil:
		return d.Rule.Message
	case d.Reason == ReasonNoRule || d.Reason == ReasonPort || d.Reason == ReasonSpecialAddr:
		return p.DenyMessage
	}
	return ""
}

// Inject is a credential egressd adds to requests under a rule, read from
// a file at request time: the sandbox never holds it.
type Inject struct {
	Header    string // canonical header name: Authorization unless set
	Prefix    string // put before the secret ("Bearer "); not with basic
	File      string // absolute path of the secret (header value, or basic password)
	BasicUser string // set: the header is Basic base64(BasicUser:secret)
	// PlainHTTP allows injecting into plain http:// requests, where the
	// credential crosses the network in the clear. Off: only requests
	// whose upstream leg is TLS (inspected tunnels, https URLs) get it.
	PlainHTTP bool
}

// InjectHeaders returns the header names that some inject rule sets for
// host: egressd removes a client's own values of them on every request to
// host that it sees, so a sandbox cannot bring its own credential.
func (p *Policy) InjectHeaders(host string) []string { return p.injectHeaders[host] }

// echoMethods reflect the request, headers included, in the response: an
// injected credential would come back to the sandbox.
var echoMethods = []string{"TRACE", "TRACK"}

type rawInject struct {
	Header    at[string] `yaml:"header"`
	Prefix    at[string] `yaml:"prefix"`
	ValueFrom at[string] `yaml:"value_from"`
	Basic     *rawBasic  `yaml:"basic"`
	PlainHTTP at[bool]   `yaml:"plain_http"`
}

type rawBasic struct {
	User         at[string] `yaml:"user"`
	PasswordFrom at[string] `yaml:"password_from"`
}

// maxMessage bounds a message: it goes into every 403 body.
const maxMessage = 1024

// adopt compiles the keys of this file; it runs after rules and identities
// are compiled (p.Rules[i] came from raw.Allow[i]).
func (c *compiler) adopt(p *Policy, raw *rawConfig) {
	p.identitySet = make(map[string]bool, len(p.Identities))
	for _, id := range p.Identities {
		p.identitySet[id.Name] = true
	}
	p.DenyMessage = c.message(raw.Deny.Message, "deny.message")
	c.upstreamProxy(p, raw.UpstreamProxy)
	for i := range raw.Allow {
		if i >= len(p.Rules) {
			break
		}
		rr, r := &raw.Allow[i], p.Rules[i]
		f := fmt.Sprintf("allow[%d]", i)
		for j, s := range rr.Identities {
			field := fmt.Sprintf("%s.identities[%d]", f, j)
			switch {
			case !p.identitySet[s.V]:
				c.errf(s.Line, field, "unknown identity %q: declare it under identities[] (name and cidrs or user)", s.V)
			case slices.Contains(r.Identities, s.V):
				c.errf(s.Line, field, "identity %q named twice", s.V)
			default:
				r.Identities = append(r.Identities, s.V)
			}
		}
		r.Message = c.message(rr.Message, f+".message")
		if rr.Inject != nil {
			r.Inject = c.inject(rr.Inject, r, f+".inject")
		}
	}
	for _, r := range p.Rules {
		if r.Inject == nil {
			continue
		}
		if p.injectHeaders == nil {
			p.injectHeaders = map[string][]string{}
		}
		for h := range r.Hosts.All() {
			if !slices.Contains(p.injectHeaders[h], r.Inject.Header) {
				p.injectHeaders[h] = append(p.injectHeaders[h], r.Inject.Header)
			}
		}
	}
}

func (c *compiler) message(v at[string], field string) string {
	s := strings.TrimSpace(v.V)
	if len(s) > maxMessage {
		c.errf(v.Line, field, "message longer than %d bytes", maxMessage)
		return ""
	}
	if strings.ContainsFunc(s, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }) {
		c.errf(v.Line, field, "message holds a control character or line break: one line of text")
		return ""
	}
	return s
}

// headersNeverInjected are hop-by-hop, framing and proxy headers: setting
// them would change how the request is routed or framed, not authorize it.
var headersNeverInjected = []string{"Host", "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive", "Te", "Trailer", "Upgrade", "Expect", "Proxy-Authorization", "Proxy-Connection", "Proxy-Authenticate"}

// inject validates an inject block. Injection is refused where egressd
// cannot tell exactly which host gets the credential: rules with "*" or
// wildcard hosts, rules naming no host, and raw TCP tunnels (tls: false).
// A rule's cidrs only unlock the special-use addresses its names resolve
// to: a request to an address literal never gets the credential
// (Decision.InjectFor).
func (c *compiler) inject(ri *rawInject, r *Rule, f string) *Inject {
	line := max(ri.ValueFrom.Line, ri.Header.Line)
	if ri.Basic != nil {
		line = max(line, ri.Basic.User.Line, ri.Basic.PasswordFrom.Line)
	}
	in := &Inject{Header: "Authorization", PlainHTTP: ri.PlainHTTP.V}
	if ri.Header.V != "" {
		h, ok := c.injectHeader(ri.Header, f)
		if !ok {
			return nil
		}
		in.Header = h
	}
	if !c.injectSecret(ri, in, f) {
		return nil
	}
	c.injectTarget(r, line, f)
	return in
}

// injectHeader checks the header an inject block sets and returns its
// canonical name: no hop-by-hop, framing or proxy header.
func (c *compiler) injectHeader(v at[string], f string) (string, bool) {
	h := v.V
	if strings.ContainsFunc(h, func(r rune) bool { return r <= ' ' || r >= 0x7f || strings.ContainsRune("()<>@,;:\\\"/[]?={}", r) }) {
		c.errf(v.Line, f+".header", "%q is not a header name", h)
		return "", false
	}
	h = textproto.CanonicalMIMEHeaderKey(h)
	if slices.Contains(headersNeverInjected, h) || strings.HasPrefix(h, "Proxy-") {
		c.errf(v.Line, f+".header", "%s is a hop-by-hop, framing or proxy header: it cannot carry a credential", h)
		return "", false
	}
	return h, true
}

// injectSecret fills in where the credential comes from: basic (user and
// password file, in Authorization) or value_from with an optional prefix.
// It returns false when the block names both.
func (c *compiler) injectSecret(ri *rawInject, in *Inject, f string) bool {
	switch {
	case ri.Basic != nil && ri.ValueFrom.V != "":
		c.errf(ri.ValueFrom.Line, f, "value_from and basic exclude each other")
		return false
	case ri.Basic != nil:
		b := ri.Basic
		in.Header = "Authorization"
		if ri.Header.V != "" && !strings.EqualFold(ri.Header.V, "Authorization") {
			c.errf(ri.Header.Line, f+".header", "basic auth goes in Authorization")
		}
		if ri.Prefix.V != "" {
			c.errf(ri.Prefix.Line, f+".prefix", "basic takes no prefix")
		}
		if b.User.V == "" || strings.ContainsFunc(b.User.V, func(r rune) bool { return r < ' ' || r == ':' || r == 0x7f }) {
			c.errf(b.User.Line, f+".basic.user", "%q: want a user name without ':' or control characters", b.User.V)
		}
		in.BasicUser = b.User.V
		in.File = c.secretFile(b.PasswordFrom, f+".basic.password_from")
	default:
		in.File = c.secretFile(ri.ValueFrom, f+".value_from")
		if strings.ContainsFunc(ri.Prefix.V, func(r rune) bool { return r < ' ' || r == 0x7f }) {
			c.errf(ri.Prefix.Line, f+".prefix", "prefix holds a control character")
		}
		in.Prefix = ri.Prefix.V
	}
	return true
}

// secretFile returns the path of a file:/absolute/path secret reference.
func (c *compiler) secretFile(v at[string], field string) string {
	path, ok := strings.CutPrefix(v.V, "file:")
	if !ok || !filepath.IsAbs(path) || filepath.Clean(path) != path {
		c.errf(v.Line, field, "%q: want file:/absolute/path of the secret (the secret itself never goes in the config)", v.V)
		return ""
	}
	return path
}

// injectTarget refuses a rule whose credential could reach a host not
// named exactly: no hosts, a wildcard host, or a raw TCP tunnel.
func (c *compiler) injectTarget(r *Rule, line int, f string) {
	if r.Hosts.Len() == 0 {
		c.errf(line, f, "rule %q names no hosts: a credential goes only to hosts named exactly, never to addresses", r.Name)
	}
	for h := range r.Hosts.All() {
		if h == "*" || strings.HasPrefix(h, "*.") {
			c.errf(line, f, "rule %q names host %q: a credential goes only to hosts named exactly, never to a wildcard", r.Name, h)
			break
		}
	}
	if !r.TLS {
		c.errf(line, f, "rule %q has tls: false: a raw TCP tunnel cannot carry an injected header", r.Name)
	}
}

// InjectFor is the credential to add to the request d allowed: the rule's
// inject block when the target is a name the rule names exactly; nil for
// an address literal (matched by the rule's cidrs) or no inject rule.
func (d *Decision) InjectFor() *Inject {
	if !d.Allow || d.Rule == nil || d.Rule.Inject == nil || d.Addr.IsValid() {
		return nil
	}
	for h := range d.Rule.Hosts.All() {
		if h == d.Host {
			return d.Rule.Inject
		}
	}
	return nil
}

// UpstreamProxy is a parent (corporate) proxy. egressd still resolves every
// name and checks every address itself, and asks the parent to CONNECT to
// the checked address, never to a name the parent would resolve on its own.
type UpstreamProxy struct {
	Addr     string // host:port of the parent proxy
	AuthFile string // file holding "user:password" for Proxy-Authorization; "" for none
}

type rawUpstreamProxy struct {
	Address  at[string] `yaml:"address"`
	AuthFrom at[string] `yaml:"auth_from"`
}

func (c *compiler) upstreamProxy(p *Policy, r *rawUpstreamProxy) {
	if r == nil {
		return
	}
	h, port, err := net.SplitHostPort(r.Address.V)
	if n, perr := strconv.Atoi(port); err != nil || h == "" || perr != nil || n < 1 || n > 65535 {
		c.errf(r.Address.Line, "upstream_proxy.address", "%q: want host:port of the parent proxy, e.g. 10.0.0.1:8080", r.Address.V)
		return
	}
	up := &UpstreamProxy{Addr: r.Address.V}
	if r.AuthFrom.V != "" {
		path, ok := strings.CutPrefix(r.AuthFrom.V, "file:")
		if !ok || !filepath.IsAbs(path) || filepath.Clean(path) != path {
			c.errf(r.AuthFrom.Line, "upstream_proxy.auth_from", "%q: want file:/absolute/path of a file holding user:password", r.AuthFrom.V)
			return
		}
		up.AuthFile = path
	}
	p.UpstreamProxy = up
}
