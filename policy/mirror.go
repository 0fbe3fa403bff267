package policy

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"strings"
)

// Download-only mirror grammars (DESIGN.md step 4). A mirror rule lets a
// package client fetch and nothing else: GET and HEAD only, except the reads
// a protocol makes with POST (git-upload-pack, an LFS batch download); the
// path must fit the ecosystem's download grammar; query strings are denied
// except the few forms a client sends; URL and query length are capped. The
// grammars and their traps are in shared/research/MIRRORS-PAGETYPES.md part A;
// comments below cite its sections (A.1 ... A.12).
//
// Paths are checked as sent on the wire: percent-escapes are decoded once and
// the decoded path is what the grammar sees. An escape that decodes to '/',
// '%', '\', or a control byte is denied (the one exception: npm's "@scope%2f"),
// as are dot-segments, empty segments and ';' (A.12).

// MirrorOptions tunes a mirror rule; the zero value means the defaults.
type MirrorOptions struct {
	// ModulePrefixes limits a goproxy rule to these module paths, written as
	// in go.mod ("github.com/BurntSushi"), matched on whole path elements; a
	// prefix also allows every module below it. Empty allows any module. It
	// bounds /<module>/@v/..., /<module>/@latest and checksum-database
	// lookups: on a cache miss the proxy and the sumdb fetch the module
	// from its own origin, which would carry the path to that host (A.6).
	// An empty entry matches nothing.
	ModulePrefixes []string
	// MaxURL caps len(Path)+len(Query); 0 means 1024 (A.12: real download
	// paths stay under about 250 bytes; npm's longest scoped tarball path is
	// about 450).
	MaxURL int
	// MaxQuery caps len(Query) for the query forms a grammar names
	// (git's service=git-upload-pack, OCI token, tags/list and referrers,
	// RubyGems dependencies); 0 means the ecosystem's default. Grammars with
	// no query form deny any query whatever MaxQuery says. For generic,
	// MaxQuery > 0 allows any query of URL-safe bytes up to that length
	// (for signed CDN redirect targets, A.8); 0 allows none.
	MaxQuery int
}

// MirrorVerdict is the outcome of checking a request against a mirror grammar.
type MirrorVerdict struct {
	Allow bool
	// Reason is short and names the trap ("npm publish: PUT /<pkg>");
	// empty when allowed.
	Reason string
	// BodyCap is > 0 when the request may carry a body (a protocol read made
	// with POST): the proxy reads at most this many bytes, then calls
	// CheckMirrorBody. It is 0 for every GET and HEAD.
	BodyCap int64
}

const (
	defaultMirrorMaxURL = 1024
	// maxMirrorSegs bounds path depth; the deepest real paths are Maven
	// groupIds and Go module paths, well under this.
	maxMirrorSegs = 32

	// uploadPackBodyCap bounds a git-upload-pack request: negotiation
	// bodies are KB to low MB (A.9). uploadPackInflatedCap bounds the same
	// body after gzip, which git applies to bodies over 1 KiB.
	uploadPackBodyCap     = 1 << 20
	uploadPackInflatedCap = 4 << 20
	// lfsBatchBodyCap bounds an LFS batch request: git-lfs sends at most
	// 100 objects per batch, about 110 bytes each.
	lfsBatchBodyCap = 64 << 10
	// maxPktLine bounds one pkt-line payload of an upload-pack request:
	// want/have lines are under 100 bytes, the first want with its
	// capabilities a few hundred.
	maxPktLine = 1024

	uploadPackType = "application/x-git-upload-pack-request"
	lfsType        = "application/vnd.git-lfs+json"
)

// defaultMirrorQuery is each ecosystem's query cap when MaxQuery is 0.
var defaultMirrorQuery = [numMirrors]int{
	MirrorRubyGems: 1024, // /api/v1/dependencies?gems=a,b,...: Bundler asks for 50 names at a time
	MirrorOCI:      512,  // token scope/service, tags/list n/last, referrers artifactType
	MirrorGit:      len("service=git-upload-pack"),
}

// Reasons shared by every grammar. Ecosystem-specific ones are inline.
const (
	rURLTooLong   = "mirror: URL too long"
	rQueryTooLong = "mirror: query too long"
	rNoQuery      = "mirror: query string not allowed"
	rBodyOnRead   = "mirror: body on GET/HEAD"
	rBadMirror    = "mirror: unknown ecosystem"
	rNoBody       = "mirror: no request body allowed here"
)

// mirrorCheck is the state one CheckMirror call passes to a grammar. It lives
// on the caller's stack: grammars only slice p.seg, never keep it.
type mirrorCheck struct {
	r    *Request
	o    *MirrorOptions
	read bool // GET or HEAD
	p    mirrorPath
}

// mirrorPath is a decoded path split into segments.
type mirrorPath struct {
	seg [maxMirrorSegs]string
	n   int
	dir bool // ends in '/'
}

func (c *mirrorCheck) segs() []string { return c.p.seg[:c.p.n] }

func mdeny(reason string) MirrorVerdict { return MirrorVerdict{Reason: reason} }

var mallow = MirrorVerdict{Allow: true}

// CheckMirror checks r against the download grammar of m. o may be nil. It
// never allocates for an unescaped path, and fails closed: anything outside
// the grammar is denied with a reason.
func CheckMirror(m Mirror, r *Request, o *MirrorOptions) MirrorVerdict {
	if r == nil {
		return mdeny("mirror: no request")
	}
	maxURL := defaultMirrorMaxURL
	if o != nil && o.MaxURL > 0 {
		maxURL = o.MaxURL
	}
	if len(r.Path)+len(r.Query) > maxURL {
		return mdeny(rURLTooLong)
	}
	if m <= MirrorNone || m >= numMirrors {
		return mdeny(rBadMirror)
	}
	c := mirrorCheck{r: r, o: o}
	if r.Method == "GET" || r.Method == "HEAD" {
		c.read = true
		// A read has no body; one would be a channel the grammar never sees.
		if r.ContentLength != 0 {
			return mdeny(rBodyOnRead)
		}
	}
	if reason := c.p.parse(r.Path, m == MirrorNPM); reason != "" {
		return mdeny(reason)
	}
	if r.Query != "" {
		if reason := checkQueryBytes(r.Query); reason != "" {
			return mdeny(reason)
		}
	}
	var v MirrorVerdict
	switch m {
	case MirrorPyPI:
		v = checkPyPI(&c)
	case MirrorNPM:
		v = checkNPM(&c)
	case MirrorCrates:
		v = checkCrates(&c)
	case MirrorRubyGems:
		v = checkRubyGems(&c)
	case MirrorMaven:
		v = checkMaven(&c)
	case MirrorGoProxy:
		v = checkGoProxy(&c)
	case MirrorApt:
		v = checkApt(&c)
	case MirrorOCI:
		v = checkOCI(&c)
	case MirrorGit:
		v = checkGit(&c)
	case MirrorGeneric:
		v = checkGeneric(&c)
	}
	// Grammars with no query form have denied any query already; this caps
	// the named forms.
	if v.Allow && len(r.Query) > queryCap(m, o) {
		return mdeny(rQueryTooLong)
	}
	return v
}

func queryCap(m Mirror, o *MirrorOptions) int {
	if o != nil && o.MaxQuery > 0 {
		return o.MaxQuery
	}
	return defaultMirrorQuery[m]
}

// methodReason names a method a grammar does not allow, without allocating.
func methodReason(method string) string {
	switch method {
	case "POST":
		return "mirror: method POST not allowed"
	case "PUT":
		return "mirror: method PUT not allowed"
	case "PATCH":
		return "mirror: method PATCH not allowed"
	case "DELETE":
		return "mirror: method DELETE not allowed"
	case "OPTIONS":
		return "mirror: method OPTIONS not allowed"
	case "MKCOL":
		return "mirror: method MKCOL not allowed"
	}
	return "mirror: method not allowed"
}

// Path parsing.

// pathChars are the bytes a decoded path may hold: RFC 3986 pchar without
// escapes, minus ';' (path parameters: Tomcat-style "..;/" tricks).
var pathChars = mkCharset("A-Za-z0-9-._~!$&'()*+,=:@/")

// queryChars are the bytes a raw query may hold; escapes are checked apart.
var queryChars = mkCharset("A-Za-z0-9-._~!$&'()*+,=:@/?%")

// parse decodes and splits raw into p. npmScope lets one escaped slash
// separate scope and name in "/@scope%2fname" and
// "/-/package/@scope%2fname" (A.2).
func (p *mirrorPath) parse(raw string, npmScope bool) string {
	if raw == "" || raw[0] != '/' {
		return "mirror: path must start with /"
	}
	s := raw
	if strings.IndexByte(raw, '%') >= 0 {
		var reason string
		if s, reason = unescapePath(raw, npmScope); reason != "" {
			return reason
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case pathChars[c]:
		case c == '\\':
			return "mirror: backslash in path"
		case c < 0x20 || c == 0x7f:
			return "mirror: control character in path"
		case c >= 0x80:
			return "mirror: non-ASCII byte in path"
		case c == ';':
			return "mirror: ';' in path"
		default:
			return "mirror: disallowed character in path"
		}
	}
	s = s[1:]
	for {
		i := strings.IndexByte(s, '/')
		seg := s
		if i >= 0 {
			seg = s[:i]
		}
		switch {
		case seg == "" && i < 0:
			p.dir = true
			return ""
		case seg == "":
			return "mirror: empty path segment"
		case seg == "." || seg == "..":
			return "mirror: dot-segment in path"
		case p.n == maxMirrorSegs:
			return "mirror: too many path segments"
		}
		p.seg[p.n] = seg
		p.n++
		if i < 0 {
			return ""
		}
		s = s[i+1:]
	}
}

// unescapePath decodes every escape in raw once. It denies escapes that
// would change the path's structure or hide bytes a server might treat
// specially (A.12): '/', '\', '%' (double encoding) and controls.
func unescapePath(raw string, npmScope bool) (string, string) {
	var b strings.Builder
	b.Grow(len(raw))
	// scopeAt is where the npm scope segment starts, -1 if none.
	scopeAt := -1
	switch {
	case !npmScope:
	case strings.HasPrefix(raw, "/@"):
		scopeAt = 1
	case strings.HasPrefix(raw, "/-/package/@"):
		scopeAt = len("/-/package/")
	}
	scope := false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c == '/' {
			scope = i+1 == scopeAt // in the scope segment until the next '/'
		}
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(raw) || unhex(raw[i+1]) < 0 || unhex(raw[i+2]) < 0 {
			return "", "mirror: malformed percent-escape in path"
		}
		d := byte(unhex(raw[i+1])<<4 | unhex(raw[i+2]))
		i += 2
		switch {
		case d == '/' && scope:
			scope, scopeAt = false, -1
		case d == '/':
			return "", "mirror: escaped slash in path"
		case d == '%':
			return "", "mirror: double-encoded escape in path"
		case d == '\\':
			return "", "mirror: escaped backslash in path"
		case d < 0x20 || d == 0x7f:
			return "", "mirror: escaped control character in path"
		}
		b.WriteByte(d)
	}
	return b.String(), ""
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

func checkQueryBytes(q string) string {
	for i := 0; i < len(q); i++ {
		c := q[i]
		if !queryChars[c] {
			return "mirror: disallowed character in query"
		}
		if c == '%' && (i+2 >= len(q) || unhex(q[i+1]) < 0 || unhex(q[i+2]) < 0) {
			return "mirror: malformed percent-escape in query"
		}
	}
	return ""
}

// cutParam splits the first key=value pair off a raw query.
func cutParam(q string) (key, val, rest string) {
	pair, rest, _ := strings.Cut(q, "&")
	key, val, _ = strings.Cut(pair, "=")
	return key, val, rest
}

// queryValue decodes a form-encoded query value; it allocates only when
// the value holds an escape or '+'. Keys are never decoded: an escaped
// key is an unknown key, and unknown keys are denied.
func queryValue(v string) string {
	if strings.IndexByte(v, '%') < 0 && strings.IndexByte(v, '+') < 0 {
		return v
	}
	b := make([]byte, 0, len(v))
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c == '+':
			b = append(b, ' ')
		case c == '%' && i+2 < len(v) && unhex(v[i+1]) >= 0 && unhex(v[i+2]) >= 0:
			b = append(b, byte(unhex(v[i+1])<<4|unhex(v[i+2])))
			i += 2
		default:
			b = append(b, c)
		}
	}
	return string(b)
}

// Character classes.

type charset [256]bool

// mkCharset builds a set from single bytes and a-b ranges; a '-' that ends
// the spec is literal.
func mkCharset(spec string) *charset {
	var cs charset
	for i := 0; i < len(spec); i++ {
		if i+2 < len(spec) && spec[i+1] == '-' {
			for b := int(spec[i]); b <= int(spec[i+2]); b++ {
				cs[b] = true
			}
			i += 2
			continue
		}
		cs[spec[i]] = true
	}
	return &cs
}

// span reports whether s is 1..max bytes long, all in cs.
func (cs *charset) span(s string, max int) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !cs[s[i]] {
			return false
		}
	}
	return true
}

var (
	csLowerAlnum = mkCharset("a-z0-9")
	csDigit      = mkCharset("0-9")
	csLowerHex   = mkCharset("0-9a-f")
	csPyName     = mkCharset("A-Za-z0-9._-")
	csPyVer      = mkCharset("A-Za-z0-9._!+-")
	csPyFile     = mkCharset("A-Za-z0-9._+!-")
	csNPMName    = mkCharset("A-Za-z0-9._~-")
	csNPMVer     = mkCharset("A-Za-z0-9._+-")
	csCrate      = mkCharset("A-Za-z0-9_-")
	csCrateIdx   = mkCharset("a-z0-9_-")
	csSemverTail = mkCharset("A-Za-z0-9.+-")
	csGem        = mkCharset("A-Za-z0-9._-")
	csMaven      = mkCharset("A-Za-z0-9_.-")
	csMavenVer   = mkCharset("A-Za-z0-9_.+-")
	csMavenExt   = mkCharset("a-z0-9.")
	csGoHost     = mkCharset("a-z0-9.-")
	csGoElem     = mkCharset("a-z0-9._~!-")
	csGoVerTail  = mkCharset("a-z0-9.+!-")
	csAptRoot    = mkCharset("a-z0-9._-")
	csApt        = mkCharset("A-Za-z0-9._+~-")
	csAptFile    = mkCharset("A-Za-z0-9._+~:-")
	csAptSource  = mkCharset("a-z0-9.+-")
	csOCITag     = mkCharset("A-Za-z0-9._-")
	csOCIMedia   = mkCharset("A-Za-z0-9.+/_-")
	csOCIWord    = mkCharset("A-Za-z0-9._@:-")
	csGitSeg     = mkCharset("A-Za-z0-9._~-")
	csPrintable  = mkCharset("!-~")
)

// isLowerHex reports whether s is exactly n lower-case hex digits.
func isLowerHex(s string, n int) bool { return len(s) == n && csLowerHex.span(s, n) }

// isSemver reports whether s is N.N.N followed by pre-release/build text.
func isSemver(s string, tail *charset) bool {
	for dots := 0; dots < 3; dots++ {
		i := 0
		for i < len(s) && csDigit[s[i]] {
			i++
		}
		if i == 0 || i > 20 {
			return false
		}
		s = s[i:]
		if dots < 2 {
			if s == "" || s[0] != '.' {
				return false
			}
			s = s[1:]
		}
	}
	return s == "" || tail.span(s, 128)
}

// PyPI (A.1): /simple/ and /simple/<normalized>/, the JSON API, and
// files.pythonhosted.org/packages/<2hex>/<2hex>/<60hex>/<file>. Grammars
// do not look at Host: one rule may cover both hosts, and a /packages/ path
// sent to pypi.org is merely a 404.

func checkPyPI(c *mirrorCheck) MirrorVerdict {
	s := c.segs()
	n := len(s)
	if n > 0 {
		switch s[0] {
		case "legacy":
			return mdeny("pypi upload: POST /legacy/")
		case "_":
			return mdeny("pypi trusted-publishing token: /_/oidc/")
		case "account", "manage":
			return mdeny("pypi account: /account/ and /manage/ pages")
		}
	}
	if !c.read {
		if n == 1 && s[0] == "pypi" {
			return mdeny("pypi xml-rpc: POST /pypi")
		}
		return mdeny(methodReason(c.r.Method))
	}
	if c.r.Query != "" {
		return mdeny(rNoQuery)
	}
	if n > 0 {
		switch s[0] {
		case "simple":
			if n == 1 && c.p.dir || n == 2 && isPEP503(s[1]) {
				return mallow
			}
		case "pypi":
			if !c.p.dir && n >= 3 && csPyName.span(s[1], 128) &&
				(n == 3 && s[2] == "json" || n == 4 && csPyVer.span(s[2], 64) && s[3] == "json") {
				return mallow
			}
		case "packages":
			if n == 5 && !c.p.dir && csPyFile.span(s[4], 200) && pypiFileDirs(s[1], s[2], s[3]) {
				return mallow
			}
		}
	}
	return mdeny("pypi: path outside download grammar")
}

// isPEP503 reports whether s is a normalized project name: [a-z0-9]+(-[a-z0-9]+)*.
func isPEP503(s string) bool {
	if len(s) == 0 || len(s) > 128 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !csLowerAlnum[s[i]] && (s[i] != '-' || s[i-1] == '-') {
			return false
		}
	}
	return true
}

// pypiFileDirs accepts the blake2b directories (2/2/60 hex) or the legacy
// /packages/<pyver or "source">/<c>/<name>/ form, where <c> is the name's
// first character.
func pypiFileDirs(a, b, h string) bool {
	if isLowerHex(a, 2) && isLowerHex(b, 2) && isLowerHex(h, 60) {
		return true
	}
	return csPyName.span(a, 16) && len(b) == 1 && csPyName.span(h, 128) && h[0] == b[0]
}

// npm (A.2): packuments, version manifests, tarballs whose file name repeats
// the package name, and the dist-tags read. Every other /-/ endpoint is a
// login, token, audit or admin call.

func checkNPM(c *mirrorCheck) MirrorVerdict {
	s := c.segs()
	if len(s) == 0 {
		return mdeny("npm: path outside download grammar")
	}
	if s[0] == "-" {
		return checkNPMDash(c, s)
	}
	// The npm CLI sends ?write=true only before it PUTs the document back
	// (publish retry, deprecate, owner, dist-tag): A.0(3).
	for q := c.r.Query; q != ""; {
		var k string
		k, _, q = cutParam(q)
		if k == "write" {
			return mdeny("npm write fetch: ?write=true")
		}
	}
	name, rest, ok := npmPackage(s)
	if !ok {
		return mdeny("npm: path outside download grammar")
	}
	for _, x := range rest {
		if x == "-rev" {
			return mdeny("npm unpublish/owner change: /<pkg>/-rev/<rev>")
		}
	}
	if !c.read {
		if len(rest) == 0 {
			switch c.r.Method {
			case "PUT":
				return mdeny("npm publish: PUT /<pkg>")
			case "DELETE":
				return mdeny("npm unpublish: DELETE /<pkg>")
			}
		}
		return mdeny(methodReason(c.r.Method))
	}
	if c.r.Query != "" {
		return mdeny(rNoQuery)
	}
	if !c.p.dir {
		switch len(rest) {
		case 0:
			return mallow
		case 1:
			if rest[0][0] != '-' && csNPMVer.span(rest[0], 64) {
				return mallow
			}
		case 2:
			if rest[0] == "-" && npmTarball(rest[1], name) {
				return mallow
			}
		}
	}
	return mdeny("npm: path outside download grammar")
}

func checkNPMDash(c *mirrorCheck, s []string) MirrorVerdict {
	if len(s) < 2 {
		return mdeny("npm: /-/ endpoint outside download grammar")
	}
	switch s[1] {
	case "package":
		_, rest, ok := npmPackage(s[2:])
		if ok && len(rest) > 0 && rest[0] == "dist-tags" {
			if len(rest) == 1 && c.read && c.r.Query == "" && !c.p.dir {
				return mallow
			}
			return mdeny("npm dist-tag: /-/package/<pkg>/dist-tags/<tag>")
		}
		return mdeny("npm access/trust change: /-/package/<pkg>/...")
	case "user":
		return mdeny("npm login/adduser: /-/user/")
	case "whoami":
		return mdeny("npm whoami: /-/whoami")
	case "v1":
		if len(s) > 2 && s[2] == "login" {
			return mdeny("npm login: /-/v1/login")
		}
	case "npm":
		if len(s) > 3 && s[2] == "v1" {
			switch s[3] {
			case "tokens":
				return mdeny("npm token: /-/npm/v1/tokens")
			case "security":
				return mdeny("npm audit: /-/npm/v1/security/")
			case "oidc":
				return mdeny("npm trusted-publishing token: /-/npm/v1/oidc/")
			case "user":
				return mdeny("npm profile: /-/npm/v1/user")
			}
		}
	case "org", "team":
		return mdeny("npm admin: /-/org/, /-/team/")
	}
	return mdeny("npm: /-/ endpoint outside download grammar")
}

// npmPackage splits a (scoped) package name off s and returns the name
// without its scope and the segments after it.
func npmPackage(s []string) (name string, rest []string, ok bool) {
	if len(s) == 0 {
		return "", nil, false
	}
	if s[0][0] != '@' {
		return s[0], s[1:], isNPMName(s[0], 214)
	}
	scope := s[0][1:]
	if len(s) < 2 || !isNPMName(scope, 213) || !isNPMName(s[1], 213) || len(s[0])+1+len(s[1]) > 214 {
		return "", nil, false
	}
	return s[1], s[2:], true
}

// isNPMName accepts [A-Za-z0-9~-][A-Za-z0-9._~-]*. A.2 allows lower case
// only; legacy names such as JSONStream still carry capitals.
func isNPMName(s string, max int) bool {
	return csNPMName.span(s, max) && s[0] != '.' && s[0] != '_'
}

// npmTarball checks <name>-<version>.tgz for the package <name> (A.12:
// the file name adds no free text).
func npmTarball(file, name string) bool {
	v, ok := strings.CutPrefix(file, name)
	if !ok || len(v) < 2 || v[0] != '-' {
		return false
	}
	v, ok = strings.CutSuffix(v[1:], ".tgz")
	return ok && v != "" && csDigit[v[0]] && csNPMVer.span(v, 64)
}

// crates.io (A.3): the sparse index with prefix directories that must match
// the name, static.crates.io files (/crates/<name>/<version>/download is
// what cargo fetches; <name>-<version>.crate is the documented file), and
// the API download redirect.

func checkCrates(c *mirrorCheck) MirrorVerdict {
	s := c.segs()
	n := len(s)
	if n >= 3 && s[0] == "api" && s[1] == "v1" {
		switch {
		case s[2] == "me":
			return mdeny("crates token/account: /api/v1/me/")
		case s[2] == "trusted_publishing":
			return mdeny("crates trusted-publishing token: /api/v1/trusted_publishing/")
		case s[2] == "crates" && n == 4 && s[3] == "new":
			return mdeny("crates publish: PUT /api/v1/crates/new")
		case s[2] == "crates" && n == 6 && s[5] == "yank":
			return mdeny("crates yank: DELETE /api/v1/crates/<name>/<version>/yank")
		case s[2] == "crates" && n == 6 && s[5] == "unyank":
			return mdeny("crates unyank: PUT /api/v1/crates/<name>/<version>/unyank")
		case s[2] == "crates" && n == 5 && s[4] == "owners" && !c.read:
			return mdeny("crates owner change: /api/v1/crates/<name>/owners")
		}
	}
	if !c.read {
		return mdeny(methodReason(c.r.Method))
	}
	if c.r.Query != "" {
		return mdeny(rNoQuery)
	}
	if !c.p.dir && n > 0 {
		switch {
		case n == 1 && s[0] == "config.json":
			return mallow
		case n == 2 && s[0] == "1" && len(s[1]) == 1 && csCrateIdx.span(s[1], 1),
			n == 2 && s[0] == "2" && len(s[1]) == 2 && csCrateIdx.span(s[1], 2):
			return mallow
		case n == 3 && s[0] == "3" && len(s[1]) == 1 && len(s[2]) == 3 && s[2][0] == s[1][0] && csCrateIdx.span(s[2], 3):
			return mallow
		case n == 3 && len(s[0]) == 2 && len(s[1]) == 2 && len(s[2]) >= 4 &&
			s[2][:2] == s[0] && s[2][2:4] == s[1] && csCrateIdx.span(s[2], 64):
			return mallow
		case n == 3 && s[0] == "crates" && isCrateName(s[1]) && crateFile(s[2], s[1]):
			return mallow
		case n == 4 && s[0] == "crates" && isCrateName(s[1]) && isSemver(s[2], csSemverTail) && s[3] == "download":
			// crates.io's config.json "dl" has no {crate} marker, so cargo
			// appends /{crate}/{version}/download (Cargo registry index docs).
			return mallow
		case n == 6 && s[0] == "api" && s[1] == "v1" && s[2] == "crates" && isCrateName(s[3]) &&
			isSemver(s[4], csSemverTail) && s[5] == "download":
			return mallow
		}
	}
	return mdeny("crates: path outside download grammar")
}

func isCrateName(s string) bool { return csCrate.span(s, 64) }

// crateFile checks <name>-<semver>.crate.
func crateFile(file, name string) bool {
	v, ok := strings.CutPrefix(file, name)
	if !ok || v == "" || v[0] != '-' {
		return false
	}
	v, ok = strings.CutSuffix(v[1:], ".crate")
	return ok && isSemver(v, csSemverTail)
}

// RubyGems (A.4): compact index, gem files, the legacy full index and the
// Bundler dependency API. GET /api/v1/api_key returns the account's key.

func checkRubyGems(c *mirrorCheck) MirrorVerdict {
	s := c.segs()
	n := len(s)
	if n >= 3 && s[0] == "api" && s[1] == "v1" {
		switch {
		case s[2] == "api_key" || strings.HasPrefix(s[2], "api_key."):
			return mdeny("rubygems api_key fetch: GET /api/v1/api_key")
		case s[2] == "gems" && n == 3 && !c.read:
			return mdeny("rubygems push: POST /api/v1/gems")
		case s[2] == "gems" && n == 4 && s[3] == "yank":
			return mdeny("rubygems yank: DELETE /api/v1/gems/yank")
		case s[2] == "gems" && n == 5 && strings.HasPrefix(s[4], "owners"):
			return mdeny("rubygems owner change: /api/v1/gems/<name>/owners")
		case s[2] == "web_hooks":
			return mdeny("rubygems webhook: /api/v1/web_hooks")
		case s[2] == "oidc":
			return mdeny("rubygems trusted-publishing token: /api/v1/oidc/")
		}
	}
	if !c.read {
		return mdeny(methodReason(c.r.Method))
	}
	if n == 3 && s[0] == "api" && s[1] == "v1" && (s[2] == "dependencies" || s[2] == "dependencies.json") && !c.p.dir {
		if gemsQuery(c.r.Query) {
			return mallow
		}
		return mdeny("rubygems dependencies: query must be gems=<name>,...")
	}
	if c.r.Query != "" {
		return mdeny(rNoQuery)
	}
	if !c.p.dir {
		switch {
		case n == 1:
			switch s[0] {
			case "versions", "names",
				"specs.4.8", "specs.4.8.gz", "latest_specs.4.8", "latest_specs.4.8.gz",
				"prerelease_specs.4.8", "prerelease_specs.4.8.gz":
				return mallow
			}
		case n == 2 && s[0] == "info" && csGem.span(s[1], 100):
			return mallow
		case n == 2 && s[0] == "gems":
			if g, ok := strings.CutSuffix(s[1], ".gem"); ok && csGem.span(g, 150) {
				return mallow
			}
		case n == 3 && s[0] == "quick" && s[1] == "Marshal.4.8":
			if g, ok := strings.CutSuffix(s[2], ".gemspec.rz"); ok && csGem.span(g, 150) {
				return mallow
			}
		}
	}
	return mdeny("rubygems: path outside download grammar")
}

// gemsQuery accepts an empty query (Bundler's probe) or one gems= list.
func gemsQuery(q string) bool {
	if q == "" {
		return true
	}
	k, v, rest := cutParam(q)
	if k != "gems" || rest != "" || strings.Contains(q, "&") {
		return false
	}
	v = queryValue(v)
	for v != "" {
		var g string
		g, v, _ = strings.Cut(v, ",")
		if !csGem.span(g, 100) {
			return false
		}
	}
	return true
}

// Maven (A.5): <group path>/<artifact>/<version>/<artifact>-<version>[-<classifier>].<ext>
// and maven-metadata.xml with checksums. Deploy PUTs to the very same paths,
// so the method is the only difference. The repository root ("/maven2/",
// "/repository/releases/") is part of the group path as far as the grammar
// can tell.

func checkMaven(c *mirrorCheck) MirrorVerdict {
	s := c.segs()
	n := len(s)
	for i := 0; i+1 < n; i++ {
		if s[i] == "service" && s[i+1] == "local" {
			return mdeny("maven staging deploy: /service/local/")
		}
	}
	if n >= 3 && s[0] == "api" && s[1] == "v1" && s[2] == "publisher" {
		return mdeny("maven central publish: /api/v1/publisher/")
	}
	if !c.read {
		switch c.r.Method {
		case "PUT":
			return mdeny("maven deploy: PUT to a repository path")
		case "MKCOL":
			return mdeny("maven deploy: MKCOL")
		}
		return mdeny(methodReason(c.r.Method))
	}
	if c.r.Query != "" {
		return mdeny(rNoQuery)
	}
	if c.p.dir || n < 3 {
		return mdeny("maven: path outside download grammar")
	}
	for _, x := range s[:n-1] {
		if !csMavenVer.span(x, 128) {
			return mdeny("maven: path outside download grammar")
		}
	}
	if isMavenMetadata(s[n-1]) || n >= 4 && mavenFile(s[n-1], s[n-3], s[n-2]) {
		return mallow
	}
	return mdeny("maven: path outside download grammar")
}

func isMavenMetadata(f string) bool {
	switch f {
	case "maven-metadata.xml", "maven-metadata.xml.sha1", "maven-metadata.xml.md5",
		"maven-metadata.xml.sha256", "maven-metadata.xml.sha512":
		return true
	}
	return false
}

// mavenFile checks that file is <a>-<v>[-<classifier>].<ext>; for a
// -SNAPSHOT version the file may carry a timestamp instead
// (a-1.0-20240101.123456-7.jar).
func mavenFile(file, a, v string) bool {
	if !csMaven.span(a, 128) || !csMavenVer.span(v, 128) || !csMaven.span(file, 255) {
		return false
	}
	rest, ok := strings.CutPrefix(file, a)
	if !ok || rest == "" || rest[0] != '-' {
		return false
	}
	rest = rest[1:]
	if r, ok := strings.CutPrefix(rest, v); ok {
		rest = r
	} else if base, snap := strings.CutSuffix(v, "SNAPSHOT"); snap && strings.HasPrefix(rest, base) {
		if rest, ok = cutSnapshotStamp(rest[len(base):]); !ok {
			return false
		}
	} else {
		return false
	}
	if rest == "" {
		return false
	}
	if rest[0] == '-' { // classifier
		cls, ext, ok := strings.Cut(rest[1:], ".")
		return ok && cls != "" && mavenExt(ext)
	}
	return rest[0] == '.' && mavenExt(rest[1:])
}

// mavenExt accepts jar, pom, tar.gz, jar.sha1, jar.asc.sha256 ...
func mavenExt(ext string) bool {
	return csMavenExt.span(ext, 20) && ext[0] != '.' && ext[len(ext)-1] != '.' && !strings.Contains(ext, "..")
}

// cutSnapshotStamp cuts yyyyMMdd.HHmmss-N off s.
func cutSnapshotStamp(s string) (string, bool) {
	if len(s) < 17 || !csDigit.span(s[:8], 8) || s[8] != '.' || !csDigit.span(s[9:15], 6) || s[15] != '-' {
		return "", false
	}
	i := 16
	for i < len(s) && i < 26 && csDigit[s[i]] {
		i++
	}
	if i == 16 {
		return "", false
	}
	return s[i:], true
}

// Go module proxy (A.6): /<module>/@v/list, /@v/<version>.info|.mod|.zip,
// /@latest, and the checksum database, direct or under /sumdb/<host>/.
// Paths are case-encoded ("!b" for "B"), so only lower case is valid. The
// protocol has no query and no write.

func checkGoProxy(c *mirrorCheck) MirrorVerdict {
	if !c.read {
		return mdeny(methodReason(c.r.Method))
	}
	if c.r.Query != "" {
		return mdeny(rNoQuery)
	}
	s := c.segs()
	n := len(s)
	if c.p.dir || n == 0 {
		return mdeny("goproxy: path outside download grammar")
	}
	switch s[0] {
	case "sumdb":
		// A proxy that forwarded other sumdb hosts would fetch from
		// any host the path names.
		if n < 3 || s[1] != "sum.golang.org" {
			return mdeny("goproxy: sumdb host must be sum.golang.org")
		}
		if n == 3 && s[2] == "supported" {
			return mallow
		}
		return checkSumDB(c, 2)
	case "lookup", "tile", "latest":
		return checkSumDB(c, 0)
	}
	k := 0
	for k < n && s[k][0] != '@' {
		k++
	}
	if k == 0 || k == n || !isGoModule(s[:k]) {
		return mdeny("goproxy: path outside download grammar")
	}
	switch {
	case s[k] == "@latest" && n == k+1:
	case s[k] == "@v" && n == k+2 && s[k+1] == "list":
	case s[k] == "@v" && n == k+2 && isGoVersionFile(s[k+1]):
	default:
		return mdeny("goproxy: path outside download grammar")
	}
	if !c.modulePrefixOK(s[:k]) {
		return mdeny("goproxy: module outside module-prefixes")
	}
	return mallow
}

// checkSumDB checks /latest, /lookup/<module>@<version> and
// /tile/<H>/<L|data>/(x<NNN>/)*<NNN>[.p/<W>] starting at segment i.
func checkSumDB(c *mirrorCheck, i int) MirrorVerdict {
	s := c.segs()[i:]
	n := len(s)
	switch s[0] {
	case "latest":
		if n == 1 {
			return mallow
		}
	case "lookup":
		if n < 2 {
			break
		}
		mod, ver, ok := strings.Cut(s[n-1], "@")
		if !ok || !isGoVersion(ver) {
			break
		}
		// Reuse the segment array: the module is s[1:n-1] plus mod.
		s[n-1] = mod
		m := s[1:]
		if !isGoModule(m) {
			break
		}
		if !c.modulePrefixOK(m) {
			return mdeny("goproxy: module outside module-prefixes")
		}
		return mallow
	case "tile":
		if isSumDBTile(s[1:]) {
			return mallow
		}
	}
	return mdeny("goproxy: sumdb path outside download grammar")
}

func isSumDBTile(s []string) bool {
	if len(s) < 3 || !csDigit.span(s[0], 2) || s[1] != "data" && !csDigit.span(s[1], 2) {
		return false
	}
	s = s[2:]
	for len(s) > 1 && len(s[0]) == 4 && s[0][0] == 'x' && csDigit.span(s[0][1:], 3) {
		s = s[1:]
	}
	switch {
	case len(s) == 1:
		return len(s[0]) == 3 && csDigit.span(s[0], 3)
	case len(s) == 2:
		return len(s[0]) == 5 && csDigit.span(s[0][:3], 3) && s[0][3:] == ".p" && csDigit.span(s[1], 3)
	}
	return false
}

// isGoModule checks a case-encoded module path: the first element is a host
// name with a dot and an alphabetic top-level label, the rest are
// [a-z0-9._~-] with "!x" for an upper-case X.
func isGoModule(m []string) bool {
	h := m[0]
	dot := strings.LastIndexByte(h, '.')
	if !csGoHost.span(h, 128) || dot <= 0 || h[0] == '-' || len(h)-dot < 3 {
		return false
	}
	for i := dot + 1; i < len(h); i++ {
		if h[i] < 'a' || h[i] > 'z' {
			return false
		}
	}
	total := len(h)
	for _, e := range m[1:] {
		if !csGoElem.span(e, 128) || !goBangsOK(e) {
			return false
		}
		total += 1 + len(e)
	}
	return total <= 300
}

// goBangsOK reports whether every '!' in s starts a case-encoded letter.
func goBangsOK(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '!' && (i+1 == len(s) || s[i+1] < 'a' || s[i+1] > 'z') {
			return false
		}
	}
	return true
}

// isGoVersion accepts v<semver> with a case-encoded tail. Branch and commit
// queries (@v/master.info) are denied: A.6 keeps the version free of text.
func isGoVersion(v string) bool {
	if len(v) < 6 || v[0] != 'v' || len(v) > 128 {
		return false
	}
	return isSemver(v[1:], csGoVerTail) && goBangsOK(v)
}

func isGoVersionFile(f string) bool {
	for _, ext := range [...]string{".info", ".mod", ".zip"} {
		if v, ok := strings.CutSuffix(f, ext); ok {
			return isGoVersion(v)
		}
	}
	return false
}

// modulePrefixOK reports whether the case-encoded module m lies under one of
// the configured prefixes, compared element by element.
func (c *mirrorCheck) modulePrefixOK(m []string) bool {
	if c.o == nil || len(c.o.ModulePrefixes) == 0 {
		return true
	}
	for _, p := range c.o.ModulePrefixes {
		if modulePrefixMatch(m, p) {
			return true
		}
	}
	return false
}

func modulePrefixMatch(m []string, prefix string) bool {
	if prefix == "" {
		return false
	}
	for i := 0; ; i++ {
		e, rest, more := strings.Cut(prefix, "/")
		if i == len(m) || !encodedEqual(m[i], e) {
			return false
		}
		if !more {
			return true
		}
		prefix = rest
	}
}

// encodedEqual reports whether enc is the case encoding of plain.
func encodedEqual(enc, plain string) bool {
	if plain == "" {
		return false
	}
	j := 0
	for i := 0; i < len(plain); i++ {
		c := plain[i]
		if 'A' <= c && c <= 'Z' {
			if j+1 >= len(enc) || enc[j] != '!' || enc[j+1] != c+('a'-'A') {
				return false
			}
			j += 2
			continue
		}
		if j >= len(enc) || enc[j] != c {
			return false
		}
		j++
	}
	return j == len(enc)
}

// apt (A.7): <root>/dists/<suite>/... and <root>/pool/<component>/<prefix>/<source>/<file>.
// The root is up to three segments (debian, ubuntu, debian-security,
// ubuntu-ports ...). apt sends no query and no write.

func checkApt(c *mirrorCheck) MirrorVerdict {
	if !c.read {
		return mdeny(methodReason(c.r.Method))
	}
	if c.r.Query != "" {
		return mdeny(rNoQuery)
	}
	s := c.segs()
	if !c.p.dir {
		for k := 0; k < len(s) && k <= 3; k++ {
			switch s[k] {
			case "dists":
				if aptDists(s[k+1:]) {
					return mallow
				}
				return mdeny("apt: path outside download grammar")
			case "pool":
				if aptPool(s[k+1:]) {
					return mallow
				}
				return mdeny("apt: path outside download grammar")
			}
			if !csAptRoot.span(s[k], 64) {
				break
			}
		}
	}
	return mdeny("apt: path outside download grammar")
}

// aptDists accepts <suite>[/<dir>...]/<file>, 2 to 7 segments, with
// by-hash/<algo>/<hex> checked exactly.
func aptDists(s []string) bool {
	n := len(s)
	if n < 2 || n > 7 {
		return false
	}
	for i, x := range s {
		if !csApt.span(x, 64) {
			return false
		}
		if x == "by-hash" {
			if i != n-3 {
				return false
			}
			want := 0
			switch s[n-2] {
			case "MD5Sum":
				want = 32
			case "SHA1":
				want = 40
			case "SHA256":
				want = 64
			case "SHA512":
				want = 128
			}
			return want > 0 && isLowerHex(s[n-1], want)
		}
	}
	return true
}

// aptPool accepts <component>[/<component>]/<prefix>/<source>/<file>, where
// prefix is the source's first letter or "lib" plus one (A.7).
func aptPool(s []string) bool {
	n := len(s)
	if n < 4 || n > 5 {
		return false
	}
	for _, x := range s[:n-3] {
		if !csAptRoot.span(x, 32) {
			return false
		}
	}
	prefix, src, file := s[n-3], s[n-2], s[n-1]
	if !csAptSource.span(src, 100) || !csLowerAlnum[src[0]] {
		return false
	}
	if prefix != src[:1] && !(len(src) > 3 && strings.HasPrefix(src, "lib") && prefix == src[:4]) {
		return false
	}
	if !csAptFile.span(file, 200) {
		return false
	}
	for _, ext := range [...]string{".deb", ".udeb", ".ddeb", ".dsc", ".diff.gz",
		".tar.gz", ".tar.xz", ".tar.bz2", ".tar.zst", ".tar.lzma",
		".tar.gz.asc", ".tar.xz.asc", ".tar.bz2.asc"} {
		if len(file) > len(ext) && strings.HasSuffix(file, ext) {
			return true
		}
	}
	return false
}

// OCI distribution (A.8): /v2/ ping, manifests and blobs by reference,
// tags/list, referrers, and the token endpoint with pull-only scope. Writes
// are named after the spec's endpoint table (end-4 ... end-13).

func checkOCI(c *mirrorCheck) MirrorVerdict {
	s := c.segs()
	n := len(s)
	if n == 1 && s[0] == "token" || n == 2 && s[0] == "v2" && s[1] == "token" {
		return checkOCIToken(c)
	}
	if n == 0 || s[0] != "v2" {
		return mdeny("oci: path outside download grammar")
	}
	if n >= 3 && s[n-2] == "blobs" && s[n-1] == "uploads" {
		return mdeny("oci blob upload: POST /v2/<name>/blobs/uploads/")
	}
	if n >= 4 && s[n-3] == "blobs" && s[n-2] == "uploads" {
		if c.read {
			// end-13: reading an upload's status is part of a push.
			return mdeny("oci blob upload status: GET /v2/<name>/blobs/uploads/<ref>")
		}
		return mdeny("oci blob upload: PATCH/PUT /v2/<name>/blobs/uploads/<ref>")
	}
	if !c.read {
		if n >= 4 && s[n-2] == "manifests" && c.r.Method == "PUT" {
			return mdeny("oci manifest push: PUT /v2/<name>/manifests/<ref>")
		}
		if n >= 4 && (s[n-2] == "manifests" || s[n-2] == "blobs") && c.r.Method == "DELETE" {
			return mdeny("oci delete: DELETE /v2/<name>/...")
		}
		return mdeny(methodReason(c.r.Method))
	}
	if n == 1 && c.p.dir {
		if c.r.Query != "" {
			return mdeny(rNoQuery)
		}
		return mallow
	}
	if n < 4 || c.p.dir || !isOCIName(s[1:n-2]) {
		return mdeny("oci: path outside download grammar")
	}
	ref, q := s[n-1], c.r.Query
	switch s[n-2] {
	case "manifests":
		if q == "" && (isOCIDigest(ref) || isOCITag(ref)) {
			return mallow
		}
	case "blobs":
		if q == "" && isOCIDigest(ref) {
			return mallow
		}
	case "tags":
		if ref == "list" && ociTagsQuery(q) {
			return mallow
		}
	case "referrers":
		if isOCIDigest(ref) && ociReferrersQuery(q) {
			return mallow
		}
	}
	if q != "" {
		return mdeny(rNoQuery)
	}
	return mdeny("oci: path outside download grammar")
}

// checkOCIToken allows GET /token with pull-only scopes (A.0(3), A.8): a
// push scope or offline_token asks for a credential a pull never needs.
func checkOCIToken(c *mirrorCheck) MirrorVerdict {
	if !c.read {
		return mdeny("oci token: POST /token (credential grant)")
	}
	scopes := 0
	for q := c.r.Query; q != ""; {
		var k, v string
		k, v, q = cutParam(q)
		v = queryValue(v)
		switch k {
		case "scope":
			for v != "" {
				var sc string
				sc, v, _ = strings.Cut(v, " ")
				if reason := ociScope(sc); reason != "" {
					return mdeny(reason)
				}
				scopes++
			}
		case "service", "account", "client_id":
			if !csOCIWord.span(v, 128) {
				return mdeny("oci token: bad " + k)
			}
		case "offline_token":
			return mdeny("oci token: offline_token asks for a refresh token")
		default:
			return mdeny("oci token: unexpected query parameter")
		}
	}
	if scopes == 0 {
		// docker login checks credentials with a scope-less token request.
		return mdeny("oci token: scope must be repository:<name>:pull")
	}
	return mallow
}

func ociScope(sc string) string {
	name, ok := strings.CutPrefix(sc, "repository:")
	i := strings.LastIndexByte(name, ':')
	if !ok || i < 0 {
		return "oci token: scope must be repository:<name>:pull"
	}
	name, actions := name[:i], name[i+1:]
	if actions != "pull" {
		return "oci token: push-scoped token (scope must be :pull)"
	}
	if !isOCINamePath(name) {
		return "oci token: scope must be repository:<name>:pull"
	}
	return ""
}

func ociTagsQuery(q string) bool {
	for q != "" {
		var k, v string
		k, v, q = cutParam(q)
		switch k {
		case "n":
			if !csDigit.span(v, 5) {
				return false
			}
		case "last":
			if !isOCITag(queryValue(v)) {
				return false
			}
		default:
			return false
		}
	}
	return true
}

func ociReferrersQuery(q string) bool {
	if q == "" {
		return true
	}
	k, v, rest := cutParam(q)
	return k == "artifactType" && rest == "" && !strings.Contains(q, "&") && csOCIMedia.span(queryValue(v), 255)
}

// isOCINamePath checks a slash-separated repository name.
func isOCINamePath(name string) bool {
	if name == "" || len(name) > 255 {
		return false
	}
	for name != "" {
		var comp string
		comp, name, _ = strings.Cut(name, "/")
		if !isOCIComponent(comp) {
			return false
		}
	}
	return true
}

func isOCIName(comps []string) bool {
	total := -1
	for _, x := range comps {
		if !isOCIComponent(x) {
			return false
		}
		total += 1 + len(x)
	}
	return len(comps) > 0 && total <= 255
}

// isOCIComponent checks [a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*.
func isOCIComponent(s string) bool {
	if s == "" || !csLowerAlnum[s[0]] || !csLowerAlnum[s[len(s)-1]] {
		return false
	}
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '.':
			if !csLowerAlnum[s[i+1]] {
				return false
			}
		case '_':
			if s[i+1] == '_' {
				i++
			}
			if !csLowerAlnum[s[i+1]] {
				return false
			}
		case '-':
			for s[i+1] == '-' {
				i++
			}
			if !csLowerAlnum[s[i+1]] {
				return false
			}
		default:
			if !csLowerAlnum[s[i]] {
				return false
			}
		}
	}
	return true
}

func isOCITag(s string) bool {
	return csOCITag.span(s, 128) && s[0] != '.' && s[0] != '-'
}

func isOCIDigest(s string) bool {
	if h, ok := strings.CutPrefix(s, "sha256:"); ok {
		return isLowerHex(h, 64)
	}
	if h, ok := strings.CutPrefix(s, "sha512:"); ok {
		return isLowerHex(h, 128)
	}
	return false
}

// Git smart HTTP and LFS (A.9). The repository path is free (owner/repo,
// GitLab subgroups); what follows it decides.

func checkGit(c *mirrorCheck) MirrorVerdict {
	s := c.segs()
	n := len(s)
	for i, x := range s {
		if x == "git-receive-pack" {
			return mdeny("git push: git-receive-pack")
		}
		if x == "lfs" && i+1 < n && s[i+1] == "locks" {
			return mdeny("git lfs locks: info/lfs/locks")
		}
	}
	if c.p.dir || n < 2 {
		return mdeny("git: path outside download grammar")
	}
	var repo []string
	switch {
	case n >= 3 && s[n-2] == "info" && s[n-1] == "refs":
		repo = s[:n-2]
		if reason := gitRefsQuery(c.r.Query); reason != "" {
			return mdeny(reason)
		}
		if !c.read {
			return mdeny(methodReason(c.r.Method))
		}
	case s[n-1] == "git-upload-pack":
		repo = s[:n-1]
		if v := gitPost(c, uploadPackType, uploadPackBodyCap); !v.Allow {
			return v
		}
	case n >= 5 && s[n-4] == "info" && s[n-3] == "lfs" && s[n-2] == "objects" && s[n-1] == "batch":
		repo = s[:n-4]
		if v := gitPost(c, lfsType, lfsBatchBodyCap); !v.Allow {
			return v
		}
	case n >= 5 && s[n-4] == "info" && s[n-3] == "lfs" && s[n-2] == "objects" && isLowerHex(s[n-1], 64),
		n >= 4 && s[n-3] == "gitlab-lfs" && s[n-2] == "objects" && isLowerHex(s[n-1], 64):
		if !c.read {
			return mdeny("git lfs upload: PUT object")
		}
		if c.r.Query != "" {
			return mdeny(rNoQuery)
		}
		repo = s[:n-3]
		if s[n-3] == "lfs" {
			repo = s[:n-4]
		}
	default:
		return mdeny("git: path outside download grammar")
	}
	if len(repo) == 0 || len(repo) > 8 {
		return mdeny("git: path outside download grammar")
	}
	for _, x := range repo {
		if !csGitSeg.span(x, 100) {
			return mdeny("git: path outside download grammar")
		}
	}
	if c.read {
		return mallow
	}
	if s[n-1] == "batch" {
		return MirrorVerdict{Allow: true, BodyCap: lfsBatchBodyCap}
	}
	return MirrorVerdict{Allow: true, BodyCap: uploadPackBodyCap}
}

// gitRefsQuery allows exactly service=git-upload-pack. The same GET with
// service=git-receive-pack is the first request of every push (A.0(3)).
func gitRefsQuery(q string) string {
	if q == "service=git-upload-pack" {
		return ""
	}
	for q != "" {
		var k, v string
		k, v, q = cutParam(q)
		if k == "service" && strings.Contains(queryValue(v), "receive-pack") {
			return "git push discovery: service=git-receive-pack"
		}
	}
	return "git info/refs: query must be service=git-upload-pack"
}

// gitPost checks the POST of a protocol read: exact content type, no
// query, declared length within cap (unknown length is fine: the proxy
// reads at most BodyCap).
func gitPost(c *mirrorCheck, ctype string, bodyCap int64) MirrorVerdict {
	switch {
	case c.r.Method != "POST":
		return mdeny("git: " + ctype + " endpoint takes POST")
	case c.r.Query != "":
		return mdeny(rNoQuery)
	case mediaType(c.r.ContentType) != ctype:
		return mdeny("git: content type must be " + ctype)
	case c.r.ContentLength < -1:
		return mdeny("git: bad content length")
	case c.r.ContentLength > bodyCap:
		return mdeny("git: request body over cap")
	}
	return mallow
}

// mediaType returns the lower-cased media type without parameters.
func mediaType(ct string) string {
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	ct = strings.TrimSpace(ct)
	for i := 0; i < len(ct); i++ {
		if 'A' <= ct[i] && ct[i] <= 'Z' {
			return strings.ToLower(ct)
		}
	}
	return ct
}

// Generic: GET/HEAD, the path filter every grammar shares, no query unless
// MaxQuery allows one, no body.

func checkGeneric(c *mirrorCheck) MirrorVerdict {
	if !c.read {
		return mdeny(methodReason(c.r.Method))
	}
	if c.r.Query != "" && queryCap(MirrorGeneric, c.o) == 0 {
		return mdeny(rNoQuery)
	}
	for _, x := range c.segs() {
		if len(x) > 255 {
			return mdeny("generic: path segment too long")
		}
	}
	return mallow
}

// CheckMirrorBody checks a buffered body for the requests CheckMirror allowed
// with BodyCap > 0: a git-upload-pack body must be pkt-lines of a fetch,
// ls-refs or object-info request; an LFS batch must say
// "operation":"download" (A.9: the URL is the same both ways, the body
// decides).
func CheckMirrorBody(m Mirror, r *Request, body []byte) (ok bool, reason string) {
	if m != MirrorGit || r == nil || r.Method != "POST" {
		return false, rNoBody
	}
	switch {
	case strings.HasSuffix(r.Path, "/git-upload-pack") && mediaType(r.ContentType) == uploadPackType:
		if len(body) > uploadPackBodyCap {
			return false, "git-upload-pack body: over cap"
		}
		return checkUploadPackBody(body)
	case strings.HasSuffix(r.Path, "/info/lfs/objects/batch") && mediaType(r.ContentType) == lfsType:
		if len(body) > lfsBatchBodyCap {
			return false, "lfs batch body: over cap"
		}
		return checkLFSBatch(body)
	}
	return false, rNoBody
}

// checkUploadPackBody accepts the pkt-lines git sends to upload-pack in
// protocol v0/v1 (want/have/done) and v2 (command=..., capabilities,
// arguments); object ids must be hex, so the free text left is a few
// capability and ref-prefix words. git gzips bodies over 1 KiB.
func checkUploadPackBody(body []byte) (bool, string) {
	if len(body) >= 2 && body[0] == 0x1f && body[1] == 0x8b {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return false, "git-upload-pack body: bad gzip"
		}
		plain, err := io.ReadAll(io.LimitReader(zr, uploadPackInflatedCap+1))
		if err != nil {
			return false, "git-upload-pack body: bad gzip"
		}
		if len(plain) > uploadPackInflatedCap {
			return false, "git-upload-pack body: inflated body over cap"
		}
		body = plain
	}
	if len(body) == 0 {
		return false, "git-upload-pack body: empty"
	}
	for len(body) > 0 {
		if len(body) < 4 {
			return false, "git-upload-pack body: truncated pkt-line"
		}
		n := 0
		for _, c := range body[:4] {
			d := unhex(c)
			if d < 0 {
				return false, "git-upload-pack body: bad pkt-line length"
			}
			n = n<<4 | d
		}
		if n <= 2 { // flush, delim, response-end
			body = body[4:]
			continue
		}
		if n < 5 || n > len(body) || n-4 > maxPktLine {
			return false, "git-upload-pack body: bad pkt-line length"
		}
		line := body[4:n]
		body = body[n:]
		line = bytes.TrimSuffix(line, []byte("\n"))
		if !uploadPackLine(line) {
			return false, "git-upload-pack body: unexpected line"
		}
	}
	return true, ""
}

func uploadPackLine(line []byte) bool {
	kw, arg, hasArg := bytes.Cut(line, []byte(" "))
	if !hasArg {
		if k, v, ok := bytes.Cut(line, []byte("=")); ok {
			switch string(k) {
			case "command":
				switch string(v) {
				case "fetch", "ls-refs", "object-info", "bundle-uri":
					return true
				}
				return false
			case "agent", "object-format", "session-id", "server-option":
				return printable(v)
			}
			return false
		}
	}
	switch string(kw) {
	case "done", "thin-pack", "no-progress", "include-tag", "ofs-delta", "deepen-relative",
		"sideband-all", "wait-for-done", "peel", "symrefs", "unborn", "size":
		return !hasArg
	case "have", "shallow", "oid":
		return isOID(arg)
	case "want":
		// The first v0 want carries the capability list after the id.
		oid, caps, hasCaps := bytes.Cut(arg, []byte(" "))
		if hasCaps {
			for _, cp := range bytes.Split(caps, []byte(" ")) {
				if !printable(cp) {
					return false
				}
			}
		}
		return isOID(oid)
	case "deepen", "deepen-since":
		return len(arg) > 0 && len(arg) <= 20 && csDigit.span(string(arg), 20)
	case "deepen-not", "want-ref", "ref-prefix", "filter", "packfile-uris":
		return printable(arg)
	}
	return false
}

func isOID(b []byte) bool {
	return len(b) == 40 && csLowerHex.span(string(b), 40) || len(b) == 64 && csLowerHex.span(string(b), 64)
}

func printable(b []byte) bool { return len(b) > 0 && csPrintable.span(string(b), maxPktLine) }

// lfsBatch keys a batch request may hold (git-lfs docs/api/batch.md).
const (
	lfsOperation = 1 << iota
	lfsTransfers
	lfsRef
	lfsObjects
	lfsHashAlgo
)

// checkLFSBatch walks the JSON tokens rather than decoding into a struct:
// encoding/json matches keys case-insensitively and keeps the last of
// duplicate keys, while the server may read another one. A duplicate or
// case-variant "operation", an unknown key, or trailing data is denied.
func checkLFSBatch(body []byte) (bool, string) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if !jsonDelim(dec, '{') {
		return false, "lfs batch: body is not a JSON object"
	}
	seen := 0
	op := ""
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return false, "lfs batch: bad JSON"
		}
		key, _ := t.(string)
		var bit int
		var ok bool
		switch key {
		case "operation":
			bit = lfsOperation
			op, ok = jsonString(dec)
		case "transfers":
			bit, ok = lfsTransfers, jsonArray(dec, func() bool { _, ok := jsonString(dec); return ok })
		case "ref":
			bit, ok = lfsRef, jsonObject(dec, func(k string) bool {
				_, ok := jsonString(dec)
				return ok && k == "name"
			})
		case "objects":
			bit, ok = lfsObjects, jsonArray(dec, func() bool { return lfsObject(dec) })
		case "hash_algo":
			bit = lfsHashAlgo
			_, ok = jsonString(dec)
		default:
			if strings.EqualFold(key, "operation") {
				return false, "lfs batch: ambiguous operation key"
			}
			return false, "lfs batch: unexpected key"
		}
		if !ok {
			return false, "lfs batch: bad JSON"
		}
		if seen&bit != 0 {
			return false, "lfs batch: duplicate key"
		}
		seen |= bit
	}
	if !jsonDelim(dec, '}') {
		return false, "lfs batch: bad JSON"
	}
	if _, err := dec.Token(); err != io.EOF {
		return false, "lfs batch: trailing data"
	}
	switch op {
	case "download":
		return true, ""
	case "upload":
		return false, "git lfs upload: batch operation upload"
	}
	return false, "lfs batch: operation must be download"
}

func lfsObject(dec *json.Decoder) bool {
	return jsonObject(dec, func(k string) bool {
		t, err := dec.Token()
		if err != nil {
			return false
		}
		switch k {
		case "oid":
			s, ok := t.(string)
			return ok && isOID([]byte(s))
		case "size":
			_, ok := t.(json.Number)
			return ok
		}
		return false
	})
}

func jsonDelim(dec *json.Decoder, d json.Delim) bool {
	t, err := dec.Token()
	return err == nil && t == d
}

func jsonString(dec *json.Decoder) (string, bool) {
	t, err := dec.Token()
	s, ok := t.(string)
	return s, err == nil && ok
}

func jsonArray(dec *json.Decoder, elem func() bool) bool {
	if !jsonDelim(dec, '[') {
		return false
	}
	for dec.More() {
		if !elem() {
			return false
		}
	}
	return jsonDelim(dec, ']')
}

// jsonObject calls field for each key; field must consume the value.
func jsonObject(dec *json.Decoder, field func(key string) bool) bool {
	if !jsonDelim(dec, '{') {
		return false
	}
	for dec.More() {
		t, err := dec.Token()
		k, ok := t.(string)
		if err != nil || !ok || !field(k) {
			return false
		}
	}
	return jsonDelim(dec, '}')
}
