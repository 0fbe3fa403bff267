package policy

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/egressd/egressd/policy/classify"
	"golang.org/x/net/publicsuffix"

	"github.com/egressd/egressd/policy/hostlist"
)

// compiler turns the raw schema into a Policy, collecting every error with
// its line rather than stopping at the first.
type compiler struct {
	file string
	errs ConfigErrors
	// names holds every rule's host names back to back, sized up front
	// (namesSize) so that the rules' lists fill it in place and index
	// shares it rather than copies it
	names []byte
}

func (c *compiler) errf(line int, field, format string, args ...any) {
	c.errs = append(c.errs, &ConfigError{File: c.file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// Defaults for keys the file leaves out.
const (
	defaultInterval         = 5 * time.Minute
	defaultAlertBatch       = 10 * time.Second
	defaultProbeTimeout     = 1500 * time.Millisecond
	defaultConnsPerIdentity = 512
	// clientConnsPerRequest: without client_conns_per_identity, an identity
	// may hold this many open client connections per request slot.
	clientConnsPerRequest  = 4
	defaultHeaderBytes     = 32 << 10
	defaultIdleTimeout     = 5 * time.Minute
	defaultDialTimeout     = 10 * time.Second
	defaultMirrorBodyBytes = 1 << 20
	// defaultReadHeadBytes: a browser's or API client's headers without
	// large cookies stay under 2 KiB.
	defaultReadHeadBytes = 4 << 10
	// defaultQueryBytes: search, paging and filter queries of real reads
	// stay well under 1 KiB (see policy/classify/testdata/corpus.txt).
	defaultQueryBytes = 2 << 10
	// defaultDNSWildcardNames: distinct names one identity may resolve
	// under one wildcard rule per hour (a CDN or docs site uses a handful).
	defaultDNSWildcardNames = 256
	defaultDNSQPS           = 50

	defaultRequestHeaderTimeout  = 10 * time.Second
	defaultResponseHeaderTimeout = 60 * time.Second
	defaultResponseHeaderBytes   = 256 << 10
	defaultResponseIdleTimeout   = 60 * time.Second
	defaultResponseTimeout       = time.Hour

	// defaultShutdownGrace: the drain a stop allows open tunnels; the
	// unit's TimeoutStopSec and the pod's terminationGracePeriodSeconds
	// leave room beyond it for closing, the last records and the seal.
	defaultShutdownGrace = 30 * time.Second
)

var defaultPorts = []portRange{{80, 80}, {443, 443}}

func (c *compiler) compile(raw *rawConfig) *Policy {
	p := &Policy{
		Source: c.file,
	}
	switch {
	case raw.Version == nil:
		c.errf(1, "version", "missing: add \"version: 1\" at the top")
	case raw.Version.V != 1:
		c.errf(raw.Version.Line, "version", "unsupported version %d: this egressd reads version 1", raw.Version.V)
	}
	p.Listen = Listen{
		Proxy:           c.hostPort(raw.Listen.Proxy, "listen.proxy", "127.0.0.1:3128"),
		DNS:             c.hostPort(raw.Listen.DNS, "listen.dns", ""),
		Admin:           c.hostPort(raw.Listen.Admin, "listen.admin", "127.0.0.1:9090"),
		Transparent:     c.hostPort(raw.Listen.Transparent, "listen.transparent", ""),
		TransparentHTTP: c.hostPort(raw.Listen.TransparentHTTP, "listen.transparent_http", ""),
	}
	c.distinctListeners(p.Listen, &raw.Listen)
	for i, u := range raw.Resolver.Upstreams {
		if ap, ok := c.addrPort(u, fmt.Sprintf("resolver.upstreams[%d]", i), 53); ok {
			p.Resolver.Upstreams = append(p.Resolver.Upstreams, ap)
		}
	}
	p.UpstreamCA = raw.UpstreamCA.V
	c.names = make([]byte, 0, c.namesSize(raw.Allow))
	for i := range raw.Allow {
		if r := c.rule(&raw.Allow[i], i); r != nil {
			p.Rules = append(p.Rules, r)
		}
	}
	c.uniqueNames(raw.Allow)
	c.basePaths(p.Rules, raw.Allow)
	c.index(p)
	c.deny(p, &raw.Deny)
	c.identities(p, raw.Identities)
	c.sandbox(p, &raw.Sandbox)
	c.selftest(p, &raw.Selftest)
	c.tools(p, &raw.Tools)
	c.limits(p, &raw.Limits)
	p.Alerts.Webhook = c.url(raw.Alerts.Webhook, "alerts.webhook")
	p.Alerts.Batch = c.duration(raw.Alerts.Batch, "alerts.batch", defaultAlertBatch)
	switch raw.Audit.OnError.V {
	case "", "deny":
	case "allow":
		p.Audit.OnErrorAllow = true
	default:
		c.errf(raw.Audit.OnError.Line, "audit.on_error", "%q: want deny (refuse what would be allowed while the audit log cannot be written) or allow", raw.Audit.OnError.V)
	}
	c.auditSigning(p, &raw.Audit)
	p.Honeytokens = raw.Honeytokens.V
	c.adopt(p, raw)
	return p
}

func (c *compiler) hostPort(v at[string], field, def string) string {
	if v.V == "" {
		return def
	}
	h, port, err := net.SplitHostPort(v.V)
	if err != nil {
		c.errf(v.Line, field, "%q: want host:port, e.g. 127.0.0.1:3128", v.V)
		return ""
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		c.errf(v.Line, field, "%q: port must be 0-65535", v.V)
	}
	if h != "" {
		if _, err := netip.ParseAddr(h); err != nil && h != "localhost" {
			c.errf(v.Line, field, "%q: listen on an address, not a name", v.V)
		}
	}
	return v.V
}

// distinctListeners refuses two listen addresses that would bind the same
// TCP port (every listener has a TCP socket: dns serves TCP too).
func (c *compiler) distinctListeners(l Listen, raw *rawListen) {
	type listener struct {
		addr  string // with the default applied
		line  int    // 0: the default
		field string
	}
	var seen []listener
	for _, cur := range []listener{{l.Proxy, raw.Proxy.Line, "listen.proxy"}, {l.DNS, raw.DNS.Line, "listen.dns"},
		{l.Admin, raw.Admin.Line, "listen.admin"}, {l.Transparent, raw.Transparent.Line, "listen.transparent"},
		{l.TransparentHTTP, raw.TransparentHTTP.Line, "listen.transparent_http"}} {
		h, port, err := net.SplitHostPort(cur.addr)
		if err != nil || port == "0" { // unset, or reported by hostPort; 0 picks a free port
			continue
		}
		for _, prev := range seen {
			ph, pport, _ := net.SplitHostPort(prev.addr)
			if pport == port && (ph == h || isWildcard(ph) || isWildcard(h)) {
				this, other := cur, prev
				if this.line == 0 { // name the line the user wrote
					this, other = prev, cur
				}
				c.errf(this.line, this.field, "%q: %s (%q) listens there too: give each listener its own address", this.addr, other.field, other.addr)
			}
		}
		seen = append(seen, cur)
	}
}

// isWildcard reports whether a listen host binds every address.
func isWildcard(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }

func (c *compiler) addrPort(v at[string], field string, defPort uint16) (netip.AddrPort, bool) {
	if a, err := netip.ParseAddr(v.V); err == nil && defPort != 0 {
		return netip.AddrPortFrom(a, defPort), true
	}
	ap, err := netip.ParseAddrPort(v.V)
	if err != nil {
		c.errf(v.Line, field, "%q: want an address and port, e.g. 198.51.100.1:53 or [2001:db8::1]:53", v.V)
		return netip.AddrPort{}, false
	}
	return ap, true
}

func (c *compiler) rule(rr *rawRule, i int) *Rule {
	f := fmt.Sprintf("allow[%d]", i)
	r := &Rule{Name: rr.Name.V, Index: i, TLS: true}
	if r.Name == "" {
		r.Name = fmt.Sprintf("allow-%d", i)
	}
	line := firstLine(rr)
	defer c.keepNames(r)
	r.Hosts.names = c.names[len(c.names):len(c.names)] // filled in place while the room lasts
	if len(rr.Hosts) == 0 && len(rr.CIDRs) == 0 && len(rr.HostsFiles) == 0 {
		c.errf(line, f, "rule %q names no hosts and no cidrs: it would match nothing", r.Name)
	}
	c.ruleTargets(r, rr, f)
	c.ruleRequests(r, rr, f)
	c.ruleMirror(r, rr, f)
	if rr.TLS != nil {
		r.TLS = rr.TLS.V
		if !r.TLS && !r.HostOnly() {
			c.errf(rr.TLS.Line, f+".tls", "tls: false tunnels raw TCP, where no page, method, path or mirror check is possible: add pages: [\"*\"] and drop methods, paths and mirror")
		}
	}
	c.ruleUpgrade(r, rr, f)
	return r
}

// ruleUpgrade compiles upgrade: the protocol switches a rule allows. Only
// websocket, and only on an inspected rule: the handshake is a request the
// rule's checks can see; on a host-only rule nothing is checked to begin
// with. h2c is never allowed: it would multiplex requests no check sees.
func (c *compiler) ruleUpgrade(r *Rule, rr *rawRule, f string) {
	for j, s := range rr.Upgrade {
		field := fmt.Sprintf("%s.upgrade[%d]", f, j)
		switch strings.ToLower(s.V) {
		case "websocket":
			if r.HostOnly() {
				c.errf(s.Line, field, "upgrade needs an inspected rule (pages, methods, paths or mirror): on a host-only rule the tunnel is spliced and no handshake is seen")
				continue
			}
			r.WebSocket = true
		case "h2c":
			c.errf(s.Line, field, "h2c is always refused: it would carry requests inside one connection that no check sees")
		default:
			c.errf(s.Line, field, "unknown upgrade %q: only websocket", s.V)
		}
	}
}

// ruleTargets compiles what a rule matches: hosts, host lists, cidrs and
// ports.
func (c *compiler) ruleTargets(r *Rule, rr *rawRule, f string) {
	nbytes := 0
	for _, h := range rr.Hosts {
		nbytes += len(h.V)
	}
	r.Hosts.grow(len(rr.Hosts), nbytes)
	r.inlineHosts = len(rr.Hosts)
	for j, h := range rr.Hosts {
		if pat, ok := c.hostPattern(h, fieldRef{f + ".hosts", j}, true); ok && !r.Hosts.add(pat) {
			c.errf(h.Line, fmt.Sprintf("%s.hosts[%d]", f, j), "rule %q holds more than 4 GiB of host names", r.Name)
		}
	}
	for j, v := range rr.HostsFiles {
		c.hostsFile(r, v, fmt.Sprintf("%s.hosts_files[%d]", f, j))
	}
	for j, s := range rr.CIDRs {
		if pr, ok := c.prefix(s, fmt.Sprintf("%s.cidrs[%d]", f, j)); ok {
			r.CIDRs = append(r.CIDRs, pr)
		}
	}
	if len(rr.Ports) == 0 {
		r.ports = defaultPorts
	}
	r.portsGiven = len(rr.Ports) > 0
	for j, s := range rr.Ports {
		if pr, ok := c.portRange(s, fmt.Sprintf("%s.ports[%d]", f, j)); ok {
			r.ports = append(r.ports, pr)
		}
	}
}

// ruleRequests compiles a rule's request checks: pages, methods, paths.
func (c *compiler) ruleRequests(r *Rule, rr *rawRule, f string) {
	if len(rr.Pages) == 0 {
		r.Pages = DefaultPages
	}
	for j, s := range rr.Pages {
		if s.V == "*" {
			r.AllPages = true
			continue
		}
		t, ok := ParsePageType(strings.ToLower(s.V))
		if !ok {
			c.errf(s.Line, fmt.Sprintf("%s.pages[%d]", f, j), "unknown page type %q: one of %s, or \"*\" for any", s.V, strings.Join(classify.PageTypeNames(), ", "))
			continue
		}
		r.Pages = r.Pages.With(t)
	}
	for j, s := range rr.Methods {
		m := strings.ToUpper(s.V)
		if m == "" || strings.IndexFunc(m, func(r rune) bool { return r < 'A' || r > 'Z' }) >= 0 {
			c.errf(s.Line, fmt.Sprintf("%s.methods[%d]", f, j), "%q is not an HTTP method", s.V)
			continue
		}
		r.Methods = append(r.Methods, m)
	}
	for j, s := range rr.Paths {
		if !strings.HasPrefix(s.V, "/") || strings.Contains(s.V[:max(len(s.V)-1, 0)], "*") {
			c.errf(s.Line, fmt.Sprintf("%s.paths[%d]", f, j), "%q: a path starts with / and may end with one *", s.V)
			continue
		}
		r.Paths = append(r.Paths, s.V)
	}
}

// ruleMirror compiles a rule's mirror grammar and what goes with it.
func (c *compiler) ruleMirror(r *Rule, rr *rawRule, f string) {
	if rr.Mirror.V != "" {
		m, ok := ParseMirror(rr.Mirror.V)
		if !ok {
			c.errf(rr.Mirror.Line, f+".mirror", "unknown mirror %q: one of %s", rr.Mirror.V, strings.Join(classify.MirrorNames(), ", "))
		}
		r.Mirror = m
		if len(rr.Pages)+len(rr.Methods)+len(rr.Paths) > 0 {
			c.errf(rr.Mirror.Line, f+".mirror", "a mirror rule takes no pages, methods or paths: its download grammar decides")
		}
	}
	if rr.BasePath.Line != 0 {
		switch why := classify.BasePathOK(rr.BasePath.V); {
		case r.Mirror == MirrorNone:
			c.errf(rr.BasePath.Line, f+".base_path", "base_path needs a mirror: it says where the repository sits on the host")
		case why != "":
			c.errf(rr.BasePath.Line, f+".base_path", "%q: %s", rr.BasePath.V, why)
		default:
			r.MirrorOp.BasePath = rr.BasePath.V
		}
	}
	for j, s := range rr.ModulePrefixes {
		if r.Mirror != MirrorGoProxy {
			c.errf(s.Line, fmt.Sprintf("%s.module_prefixes[%d]", f, j), "module_prefixes needs mirror: goproxy")
			break
		}
		r.MirrorOp.ModulePrefixes = append(r.MirrorOp.ModulePrefixes, s.V)
	}
	for j, s := range rr.ReadPosts {
		if !slices.Contains(classify.ReadPostNames(), s.V) {
			c.errf(s.Line, fmt.Sprintf("%s.read_posts[%d]", f, j), "unknown read-only POST %q: one of %s", s.V, strings.Join(classify.ReadPostNames(), ", "))
			continue
		}
		if r.Mirror != MirrorNone {
			c.errf(s.Line, fmt.Sprintf("%s.read_posts[%d]", f, j), "a mirror rule takes no read_posts: its grammar names the reads it allows")
			break
		}
		r.ReadPosts = append(r.ReadPosts, s.V)
	}
}

// namesSize is room for every rule's host names: the inline ones, and the
// size of each hosts file (more than its names: newlines and comments are
// not kept).
func (c *compiler) namesSize(rules []rawRule) int {
	n := 0
	for i := range rules {
		for _, h := range rules[i].Hosts {
			n += len(h.V)
		}
		for _, v := range rules[i].HostsFiles {
			if st, err := os.Stat(c.relative(v.V)); err == nil && st.Mode().IsRegular() {
				n += int(min(st.Size(), maxArena))
			}
		}
	}
	return min(n, maxArena)
}

// keepNames moves c.names past rule r's names if r's list filled it in
// place (it did not outgrow the room: a hosts file that grew while it was
// read); if not, index copies every rule's names into one arena.
func (c *compiler) keepNames(r *Rule) {
	n := len(r.Hosts.names)
	if n > 0 && cap(c.names)-len(c.names) >= n && &r.Hosts.names[0] == &c.names[len(c.names) : len(c.names)+1][0] {
		c.names = c.names[:len(c.names)+n]
	}
}

func firstLine(rr *rawRule) int {
	for _, l := range []int{rr.Name.Line, rr.Mirror.Line} {
		if l > 0 {
			return l
		}
	}
	for _, s := range [][]at[string]{rr.Hosts, rr.CIDRs, rr.Ports, rr.Pages, rr.Methods, rr.Paths} {
		if len(s) > 0 {
			return s[0].Line
		}
	}
	return 0
}

func (c *compiler) uniqueNames(rules []rawRule) {
	seen := map[string]bool{}
	for i, rr := range rules {
		if rr.Name.V == "" {
			continue
		}
		if seen[rr.Name.V] {
			c.errf(rr.Name.Line, fmt.Sprintf("allow[%d].name", i), "duplicate rule name %q: decisions name the rule, so names must be unique", rr.Name.V)
		}
		seen[rr.Name.V] = true
	}
}

// fieldRef names an entry of a list ("allow[0].hosts[7]"; index -1: the
// list's own name), spelled out only for an error: a million-host list
// would otherwise format a million names it never shows.
type fieldRef struct {
	list  string
	index int
}

func (f fieldRef) String() string {
	if f.index < 0 {
		return f.list
	}
	return f.list + "[" + strconv.Itoa(f.index) + "]"
}

// hostPattern validates an exact name, "*.suffix" or (when star is true) "*".
func (c *compiler) hostPattern(v at[string], fld fieldRef, star bool) (string, bool) {
	s := v.V
	if s == "*" {
		if !star {
			c.errf(v.Line, fld.String(), "\"*\" is not allowed here")
			return "", false
		}
		return s, true
	}
	// a URL or host:port has a ':' (the common case, a plain name, skips
	// the URL parse: it cost a million-host list a second)
	if strings.ContainsRune(s, ':') {
		if hint := hostHint(s); hint != "" {
			c.errf(v.Line, fld.String(), "%q: %s", s, hint)
			return "", false
		}
	}
	wild := strings.HasPrefix(s, "*.")
	name := strings.TrimPrefix(s, "*.")
	if strings.Contains(name, "*") {
		c.errf(v.Line, fld.String(), "%q: a wildcard is allowed only as the whole first label (\"*.example.com\")", s)
		return "", false
	}
	n, a, err := NormalizeHost(name)
	if err != nil {
		c.errf(v.Line, fld.String(), "%q: %v", s, trimBadTarget(err))
		return "", false
	}
	if a.IsValid() {
		c.errf(v.Line, fld.String(), "%q is an address: put addresses in cidrs (e.g. %s)", s, netip.PrefixFrom(a, a.BitLen()))
		return "", false
	}
	if wild {
		if _, err := publicsuffix.EffectiveTLDPlusOne(n); err != nil || !strings.Contains(n, ".") {
			c.errf(v.Line, fld.String(), "%q: a wildcard must cover a whole label under a registrable domain (e.g. \"*.example.com\")", s)
			return "", false
		}
		return "*." + n, true
	}
	return n, true
}

// hostHint explains a hosts entry written as a URL or with a port, the
// two ways people write a host that is not one; "" for anything else.
func hostHint(s string) string {
	if u, err := url.Parse(s); err == nil && u.Scheme != "" && u.Host != "" {
		hint := fmt.Sprintf("hosts take a host name, not a URL: write %q", u.Hostname())
		if u.Port() != "" {
			hint += fmt.Sprintf(" with ports: [%s]", u.Port())
		}
		if p := strings.TrimSuffix(u.Path, "/"); p != "" {
			hint += fmt.Sprintf(", and paths: [%q] to limit the path", p+"/*")
		}
		return hint
	}
	if h, port, err := net.SplitHostPort(s); err == nil && h != "" {
		if _, err := strconv.ParseUint(port, 10, 16); err == nil {
			return fmt.Sprintf("hosts take no port: write %q and ports: [%s]", h, port)
		}
	}
	return ""
}

// maxListErrors bounds the errors reported for one hosts file.
const maxListErrors = 20

// hostsFile adds the patterns of an allow rule's hosts file: one per line,
// as in hosts (exact or "*.example.com"; "*" is not allowed), blank lines
// and '#' comments skipped. A big allowlist belongs here: read line by
// line, it costs none of the YAML parse's memory and time (a million
// names load in about a second). Errors name the file and its line.
func (c *compiler) hostsFile(r *Rule, v at[string], field string) {
	path := c.relative(v.V)
	f, err := os.Open(path)
	if err != nil {
		c.errf(v.Line, field, "%v", err)
		return
	}
	defer f.Close()
	// Size the rule's list for the whole file first (a pass over bytes
	// the page cache holds): grown name by name, a million names were
	// copied again and again, five times their size in garbage.
	lines, size, err := countLines(f)
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		c.errf(v.Line, field, "read %s: %v", path, err)
		return
	}
	r.Hosts.grow(lines, size)
	defer r.Hosts.trim()
	lc := &compiler{file: path}
	br := bufio.NewReaderSize(f, 1<<20)
	for n := 1; len(lc.errs) < maxListErrors; n++ {
		b, err := br.ReadSlice('\n')
		if s := strings.TrimSpace(string(b)); s != "" && s[0] != '#' {
			if pat, ok := lc.hostPattern(at[string]{V: s, Line: n}, fieldRef{"hosts", -1}, false); ok && !r.Hosts.add(pat) {
				lc.errf(n, "hosts", "rule %q holds more than 4 GiB of host names", r.Name)
			}
		}
		if err == bufio.ErrBufferFull {
			lc.errf(n, "hosts", "line longer than 1 MiB")
			break
		}
		if err != nil {
			if err != io.EOF {
				c.errf(v.Line, field, "read %s: %v", path, err)
			}
			break
		}
	}
	c.errs = append(c.errs, lc.errs...)
}

// countLines returns how many lines r holds (a last line without a
// newline counts) and its size in bytes.
func countLines(r io.Reader) (lines, size int, err error) {
	buf := make([]byte, 256<<10)
	last := byte('\n')
	for {
		n, err := r.Read(buf)
		if n > 0 {
			lines += bytes.Count(buf[:n], []byte{'\n'})
			size += n
			last = buf[n-1]
		}
		if err == io.EOF {
			if last != '\n' {
				lines++
			}
			return lines, size, nil
		}
		if err != nil {
			return 0, 0, err
		}
	}
}

// relative resolves a file named in the config against the config's
// directory.
func (c *compiler) relative(path string) string {
	if path != "" && !filepath.IsAbs(path) && c.file != "" {
		return filepath.Join(filepath.Dir(c.file), path)
	}
	return path
}

func trimBadTarget(err error) string {
	return strings.TrimPrefix(err.Error(), ErrBadTarget.Error()+": ")
}

func (c *compiler) prefix(v at[string], field string) (netip.Prefix, bool) {
	s := v.V
	if !strings.Contains(s, "/") {
		if a, err := netip.ParseAddr(s); err == nil {
			return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), true
		}
	}
	pr, err := netip.ParsePrefix(s)
	if err != nil {
		c.errf(v.Line, field, "%q: want a CIDR such as 10.1.2.0/24 or 2001:db8::/32", s)
		return netip.Prefix{}, false
	}
	if pr.Addr().Is4In6() {
		c.errf(v.Line, field, "%q: write IPv4-mapped prefixes as IPv4", s)
		return netip.Prefix{}, false
	}
	if pr.Masked() != pr {
		c.errf(v.Line, field, "%q has host bits set: did you mean %s?", s, pr.Masked())
		return netip.Prefix{}, false
	}
	return pr, true
}

func (c *compiler) portRange(v at[string], field string) (portRange, bool) {
	lo, hi, isRange := strings.Cut(v.V, "-")
	if !isRange {
		hi = lo
	}
	a, err1 := strconv.ParseUint(strings.TrimSpace(lo), 10, 16)
	b, err2 := strconv.ParseUint(strings.TrimSpace(hi), 10, 16)
	if err1 != nil || err2 != nil || a == 0 || a > b {
		c.errf(v.Line, field, "%q: want a port (443) or a range (8000-8100) within 1-65535", v.V)
		return portRange{}, false
	}
	return portRange{uint16(a), uint16(b)}, true
}

// index builds the host lookup tables from the compiled rules. The rules'
// host lists filled one arena (compiler.names), which both tables refer
// into: each name is stored once (a million names were stored twice, 22
// MiB of the 84 a 1M-host policy kept), and the tables are built from the
// arena's bytes with one probe per name. A list that could not fill it in
// place, or an arena mostly left empty (hosts files of comments), is
// copied into one its names' size.
func (c *compiler) index(p *Policy) {
	arena, shared := c.names, true
	starts := make([]uint32, len(p.Rules))
	total := 0
	var exact, suffix int
	for i, r := range p.Rules {
		n := len(r.Hosts.names)
		if n > 0 && (total+n > len(arena) || &r.Hosts.names[0] != &arena[total]) {
			shared = false
		}
		starts[i] = uint32(min(total, maxArena))
		total += n
		for j := range r.Hosts.Len() {
			switch h := r.Hosts.bytesAt(j); {
			case bytes.HasPrefix(h, []byte("*.")):
				suffix++
			case string(h) != "*":
				exact++
			}
		}
	}
	if total > maxArena {
		c.errf(1, "allow", "more than 4 GiB of host names: split the policy")
		return
	}
	if !shared || total != len(arena) || cap(arena)-len(arena) > len(arena)/4+4096 {
		// not filled in place, or mostly room left unused (comments): copy
		arena = make([]byte, 0, total)
		for _, r := range p.Rules {
			arena = append(arena, r.Hosts.names...)
		}
	}
	arena = arena[:len(arena):len(arena)] // full: an append copies
	for i, r := range p.Rules {
		r.Hosts.names = arena[starts[i] : int(starts[i])+len(r.Hosts.names) : int(starts[i])+len(r.Hosts.names)]
	}
	p.exact.share(arena, exact)
	p.suffix.share(arena, suffix)
	exactRefs := make([]hostRef, 0, exact)
	suffixRefs := make([]hostRef, 0, suffix)
	for i, r := range p.Rules {
		idx := int32(i)
		off := starts[i]
		for j := range r.Hosts.Len() {
			h := r.Hosts.bytesAt(j)
			n := uint32(len(h))
			switch s, wild := bytes.CutPrefix(h, []byte("*.")); {
			case string(h) == "*":
				p.star = append(p.star, idx)
			case wild:
				suffixRefs = append(suffixRefs, hostRef{p.suffix.hashBytes(s), off + 2, n - 2, idx})
				p.maxDepth = max(p.maxDepth, bytes.Count(s, []byte("."))+1)
			default:
				exactRefs = append(exactRefs, hostRef{p.exact.hashBytes(h), off, n, idx})
			}
			off += n
		}
		if len(r.CIDRs) > 0 {
			p.cidrRule = append(p.cidrRule, idx)
		}
	}
	// one table after the other: the exact names' refs are garbage while
	// the wildcards fill theirs
	fillTable(p, &p.exact, exactRefs)
	fillTable(p, &p.suffix, suffixRefs)
}

// fillTable adds refs to the table x of p, in slot order.
func fillTable(p *Policy, x *hostIndex, refs []hostRef) {
	for _, ref := range x.slotOrder(refs) {
		switch v, added := x.putShared(ref.off, ref.n, ref.h); {
		case added:
			*v = ref.rule
		case *v >= 0:
			if *v == ref.rule {
				continue
			}
			p.multi = append(p.multi, []int32{*v, ref.rule})
			*v = -int32(len(p.multi))
		default:
			l := p.multi[-*v-1]
			if l[len(l)-1] != ref.rule {
				p.multi[-*v-1] = append(l, ref.rule)
			}
		}
	}
}

func (c *compiler) deny(p *Policy, d *rawDeny) {
	full := false
	for _, n := range builtinHighRiskNames {
		p.denyExact.set(n, 0)
	}
	for _, n := range builtinHighRiskSuffixes {
		p.denySuffix.set(n, 0)
	}
	for j, h := range d.Hosts {
		pat, ok := c.hostPattern(h, fieldRef{"deny.hosts", j}, false)
		if !ok {
			continue
		}
		p.denyHosts = append(p.denyHosts, pat)
		if s, wild := strings.CutPrefix(pat, "*."); wild {
			full = full || !p.denySuffix.set(s, 0)
		} else {
			full = full || !p.denyExact.set(pat, 0)
		}
	}
	if full {
		c.errf(1, "deny.hosts", "more than 4 GiB of host names: split the policy")
	}
	for j, v := range d.HostsFiles {
		l, err := hostlist.Load(c.relative(v.V))
		if err != nil {
			c.errf(v.Line, fmt.Sprintf("deny.hosts_files[%d]", j), "%v", err)
			continue
		}
		p.denyLists = append(p.denyLists, l)
	}
	for j, s := range d.CIDRs {
		if pr, ok := c.prefix(s, fmt.Sprintf("deny.cidrs[%d]", j)); ok {
			p.denyCIDRs = append(p.denyCIDRs, pr)
		}
	}
}

func (c *compiler) identities(p *Policy, ids []rawIdentity) {
	seen := map[string]bool{}
	for i, ri := range ids {
		f := fmt.Sprintf("identities[%d]", i)
		id := Identity{Name: ri.Name.V, User: ri.User.V, Evaluation: ri.Evaluation != nil && ri.Evaluation.V}
		if id.Name == "" {
			c.errf(ri.Name.Line, f+".name", "an identity needs a name")
			continue
		}
		if seen[id.Name] {
			c.errf(ri.Name.Line, f+".name", "duplicate identity %q", id.Name)
		}
		seen[id.Name] = true
		for j, s := range ri.CIDRs {
			if pr, ok := c.prefix(s, fmt.Sprintf("%s.cidrs[%d]", f, j)); ok {
				id.CIDRs = append(id.CIDRs, pr)
			}
		}
		if len(id.CIDRs) == 0 && id.User == "" {
			c.errf(ri.Name.Line, f, "identity %q needs cidrs or a user", id.Name)
		}
		switch tok := ri.TokenSHA256.V; {
		case id.User == "" && tok != "":
			c.errf(ri.TokenSHA256.Line, f+".token_sha256", "a token needs a user")
		case id.User != "":
			b, err := hex.DecodeString(tok)
			if err != nil || len(b) != sha256.Size {
				c.errf(ri.User.Line, f+".token_sha256", "identity %q: a user needs token_sha256, the hex SHA-256 of its Proxy-Authorization password (a user name alone is a label anyone can send, not a secret)", id.Name)
				break
			}
			copy(id.TokenSHA256[:], b)
		}
		p.Identities = append(p.Identities, id)
	}
}

func (c *compiler) sandbox(p *Policy, s *rawSandbox) {
	p.Sandbox.InterfacePrefix = s.InterfacePrefix.V
	if p.Sandbox.InterfacePrefix == "" {
		p.Sandbox.InterfacePrefix = "egsbx"
	}
	if n := len(p.Sandbox.InterfacePrefix); n > 10 {
		c.errf(s.InterfacePrefix.Line, "sandbox.interface_prefix", "%q: at most 10 characters (interface names are 15, the rest numbers the links)", p.Sandbox.InterfacePrefix)
	}
	def4, def6 := "10.237.0.0/16", "fd00:e9e5::/64"
	if s.Pool4.V == "" {
		s.Pool4.V = def4
	}
	if s.Pool6.V == "" {
		s.Pool6.V = def6
	}
	p.Sandbox.Pool4, _ = c.prefix(s.Pool4, "sandbox.pool4")
	p.Sandbox.Pool6, _ = c.prefix(s.Pool6, "sandbox.pool6")
	if p.Sandbox.Pool4.IsValid() && (!p.Sandbox.Pool4.Addr().Is4() || p.Sandbox.Pool4.Bits() > 30) {
		c.errf(s.Pool4.Line, "sandbox.pool4", "%q: want an IPv4 prefix of /30 or wider", s.Pool4.V)
	}
	if p.Sandbox.Pool6.IsValid() && (!p.Sandbox.Pool6.Addr().Is6() || p.Sandbox.Pool6.Bits() > 120) {
		c.errf(s.Pool6.Line, "sandbox.pool6", "%q: want an IPv6 prefix of /120 or wider", s.Pool6.V)
	}
	for _, u := range s.UIDs {
		p.Sandbox.UIDs = append(p.Sandbox.UIDs, u.V)
	}
	for j, v := range s.CIDRs {
		if pr, ok := c.prefix(v, fmt.Sprintf("sandbox.cidrs[%d]", j)); ok {
			p.Sandbox.CIDRs = append(p.Sandbox.CIDRs, pr)
		}
	}
}

func (c *compiler) duration(v at[string], field string, def time.Duration) time.Duration {
	if v.V == "" {
		return def
	}
	d, err := time.ParseDuration(v.V)
	if err != nil || d <= 0 {
		c.errf(v.Line, field, "%q: want a positive duration such as 30s or 5m", v.V)
		return def
	}
	return d
}

func (c *compiler) selftest(p *Policy, s *rawSelftest) {
	st := &p.Selftest
	st.Interval = c.duration(s.Interval, "selftest.interval", defaultInterval)
	st.Timeout = c.duration(s.Timeout, "selftest.timeout", defaultProbeTimeout)
	st.ProbeEveryMax = c.duration(s.ProbeEveryMax, "selftest.probe_every_max", DefaultProbeEveryMax)
	st.QuarantineOnProbeLeak = s.QuarantineOnProbeLeak.V
	list := func(vs []at[string], field string, want6 bool) []netip.AddrPort {
		var out []netip.AddrPort
		for j, v := range vs {
			ap, ok := c.addrPort(v, fmt.Sprintf("%s[%d]", field, j), 0)
			if !ok {
				continue
			}
			if want6 && !ap.Addr().Is6() {
				c.errf(v.Line, fmt.Sprintf("%s[%d]", field, j), "%q: ipv6 probes need an IPv6 address in brackets", v.V)
				continue
			}
			out = append(out, ap)
		}
		return out
	}
	st.TCP = list(s.TCP, "selftest.tcp", false)
	st.UDP = list(s.UDP, "selftest.udp", false)
	st.IPv6 = list(s.IPv6, "selftest.ipv6", true)
	for j, v := range s.Resolvers {
		if ap, ok := c.addrPort(v, fmt.Sprintf("selftest.resolvers[%d]", j), 53); ok {
			st.Resolvers = append(st.Resolvers, ap)
		}
	}
	if s.CanaryName.V != "" {
		// {token}: each identity's canary token (selftest/plan), so a hit
		// in the canary's log names the sandbox that leaked
		v := strings.ReplaceAll(s.CanaryName.V, CanaryToken, "egressd-token")
		n, a, err := NormalizeHost(v)
		if err != nil || a.IsValid() {
			c.errf(s.CanaryName.Line, "selftest.canary_name", "%q: want a DNS name", s.CanaryName.V)
		}
		st.CanaryName = strings.ReplaceAll(n, "egressd-token", CanaryToken)
	}
	canaryURL := s.CanaryURL
	canaryURL.V = strings.ReplaceAll(canaryURL.V, CanaryToken, "egressd-token")
	st.CanaryURL = strings.ReplaceAll(c.url(canaryURL, "selftest.canary_url"), "egressd-token", CanaryToken)
	st.CanaryLog = c.url(s.CanaryLog, "selftest.canary_log")
	st.Webhook = c.url(s.Webhook, "selftest.webhook")
	c.toolServers(st, s.ToolServers)
	for j, v := range s.Metadata {
		a, err := netip.ParseAddr(v.V)
		if err != nil {
			c.errf(v.Line, fmt.Sprintf("selftest.metadata[%d]", j), "%q: want an address", v.V)
			continue
		}
		st.Metadata = append(st.Metadata, a)
	}
	for j, v := range s.ExpectReachable {
		if u := c.url(v, fmt.Sprintf("selftest.expect_reachable[%d]", j)); u != "" {
			st.ExpectReachable = append(st.ExpectReachable, u)
		}
	}
}

func (c *compiler) url(v at[string], field string) string {
	if v.V == "" {
		return ""
	}
	u, err := url.Parse(v.V)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		c.errf(v.Line, field, "%q: want an http:// or https:// URL", v.V)
		return ""
	}
	return v.V
}

func (c *compiler) limits(p *Policy, l *rawLimits) {
	pos := func(v at[int], field string, def int) int {
		if v.Line == 0 {
			return def
		}
		if v.V <= 0 {
			c.errf(v.Line, field, "%d: must be positive", v.V)
			return def
		}
		return v.V
	}
	p.Limits = Limits{
		ConnsPerIdentity: pos(l.ConnsPerIdentity, "limits.conns_per_identity", defaultConnsPerIdentity),
		HeaderBytes:      pos(l.HeaderBytes, "limits.header_bytes", defaultHeaderBytes),
		IdleTimeout:      c.duration(l.IdleTimeout, "limits.idle_timeout", defaultIdleTimeout),
		DialTimeout:      c.duration(l.DialTimeout, "limits.dial_timeout", defaultDialTimeout),
		MirrorBodyBytes:  defaultMirrorBodyBytes,
		DNSQueriesPerSec: pos(l.DNSQueriesPerSec, "limits.dns_queries_per_second", defaultDNSQPS),
		ReadHeadBytes:    pos(l.ReadHeadBytes, "limits.read_head_bytes", defaultReadHeadBytes),
		QueryBytes:       pos(l.QueryBytes, "limits.query_bytes", defaultQueryBytes),
		DNSWildcardNames: defaultDNSWildcardNames,
		DNSExactOnly:     l.DNSExactOnly.V,

		RequestHeaderTimeout:  c.duration(l.RequestHeaderTimeout, "limits.request_header_timeout", defaultRequestHeaderTimeout),
		ResponseHeaderTimeout: c.duration(l.ResponseHeaderTimeout, "limits.response_header_timeout", defaultResponseHeaderTimeout),
		ResponseHeaderBytes:   pos(l.ResponseHeaderBytes, "limits.response_header_bytes", defaultResponseHeaderBytes),
		ResponseIdleTimeout:   c.duration(l.ResponseIdleTimeout, "limits.response_idle_timeout", defaultResponseIdleTimeout),
		ResponseTimeout:       c.duration(l.ResponseTimeout, "limits.response_timeout", defaultResponseTimeout),

		ShutdownGrace: c.duration(l.ShutdownGrace, "limits.shutdown_grace", defaultShutdownGrace),
	}
	if l.DNSWildcardNames.Line != 0 {
		if l.DNSWildcardNames.V < 0 {
			c.errf(l.DNSWildcardNames.Line, "limits.dns_wildcard_names", "%d: must be 0 (no budget) or positive", l.DNSWildcardNames.V)
		} else {
			p.Limits.DNSWildcardNames = l.DNSWildcardNames.V
		}
	}
	p.Limits.ClientConns = pos(l.ClientConns, "limits.client_conns_per_identity", clientConnsPerRequest*p.Limits.ConnsPerIdentity)
	if l.MirrorBodyBytes.Line != 0 {
		if l.MirrorBodyBytes.V <= 0 {
			c.errf(l.MirrorBodyBytes.Line, "limits.mirror_body_bytes", "%d: must be positive", l.MirrorBodyBytes.V)
		} else {
			p.Limits.MirrorBodyBytes = l.MirrorBodyBytes.V
		}
	}
}

// Audit checkpoint defaults (audit.checkpoint_records, .checkpoint_interval).
const (
	defaultCheckpointRecords  = 1000
	defaultCheckpointInterval = time.Minute
)

// auditSigning compiles the audit log's signing keys and checkpoint pace.
func (c *compiler) auditSigning(p *Policy, a *rawAudit) {
	if a.SignKey.V != "" {
		p.Audit.SignKey = c.secretFile(a.SignKey, "audit.sign_key")
	}
	if a.SignKeyPrevious.V != "" {
		if a.SignKey.V == "" {
			c.errf(a.SignKeyPrevious.Line, "audit.sign_key_previous", "set without audit.sign_key: it only announces the new key")
		}
		p.Audit.SignKeyPrevious = c.secretFile(a.SignKeyPrevious, "audit.sign_key_previous")
	}
	p.Audit.CheckpointRecords = defaultCheckpointRecords
	if a.CheckpointRecords.Line != 0 {
		if a.CheckpointRecords.V <= 0 {
			c.errf(a.CheckpointRecords.Line, "audit.checkpoint_records", "%d: must be positive", a.CheckpointRecords.V)
		} else {
			p.Audit.CheckpointRecords = a.CheckpointRecords.V
		}
	}
	p.Audit.CheckpointInterval = c.duration(a.CheckpointInterval, "audit.checkpoint_interval", defaultCheckpointInterval)
}
