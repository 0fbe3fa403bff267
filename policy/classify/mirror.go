package classify

import (
	"strings"
)

// Download-only mirror grammars (decision step 4 in README.md). A mirror rule lets a
// package client fetch and nothing else: GET and HEAD only, except the reads
// a protocol makes with POST (git-upload-pack, an LFS batch download); the
// path must fit the ecosystem's download grammar; query strings are denied
// except the few forms a client sends; URL and query length are capped. The
// grammars, one per eco_<name>.go, are summarised in README's "Download-only
// mirrors" table; the traps each guards against are named where it checks them.
//
// Paths are checked as sent on the wire: percent-escapes are decoded once and
// the decoded path is what the grammar sees. An escape that decodes to '/',
// '%', '\', or a control byte is denied (the one exception: npm's "@scope%2f"),
// as are dot-segments, empty segments and ';'.

// MirrorOptions tunes a mirror rule; the zero value means the defaults.
type MirrorOptions struct {
	// ModulePrefixes limits a goproxy rule to these module paths, written as
	// in go.mod ("github.com/BurntSushi"), matched on whole path elements; a
	// prefix also allows every module below it. Empty allows any module. It
	// bounds /<module>/@v/..., /<module>/@latest and checksum-database
	// lookups: on a cache miss the proxy and the sumdb fetch the module
	// from its own origin, which would carry the path to that host.
	// An empty entry matches nothing.
	ModulePrefixes []string
	// MaxURL caps len(Path)+len(Query); 0 means 1024 (real download
	// paths stay under about 250 bytes; npm's longest scoped tarball path is
	// about 450).
	MaxURL int
	// MaxQuery caps len(Query) for the query forms a grammar names
	// (git's service=git-upload-pack, OCI token, tags/list and referrers,
	// RubyGems dependencies); 0 means the ecosystem's default. Grammars with
	// no query form deny any query whatever MaxQuery says. For generic,
	// MaxQuery > 0 allows any query of URL-safe bytes up to that length
	// (for signed CDN redirect targets); 0 allows none.
	MaxQuery int
	// BasePath is the repository's path prefix on its host
	// ("/artifactory/api/pypi/pypi-remote", "/repository/npm-proxy"),
	// written as BasePathOK accepts it; "" means the grammar applies at
	// the root. The grammar sees the path below the prefix; a path outside
	// it is denied. A repository at the root may say "/": the grammar then
	// applies at the root with the relaxations a prefix brings (PyPI
	// distribution files wherever they sit).
	BasePath string
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
	// bodies are KB to low MB. uploadPackInflatedCap bounds the same
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

// Reasons shared by every grammar. Ecosystem-specific ones are inline.
const (
	rURLTooLong   = "mirror: URL too long"
	rQueryTooLong = "mirror: query too long"
	rNoQuery      = "mirror: query string not allowed"
	rBodyOnRead   = "mirror: body on GET/HEAD"
	rBadMirror    = "mirror: unknown ecosystem"
	rNoBody       = "mirror: no request body allowed here"
	rOutsideBase  = "mirror: path outside the rule's base_path"
)

// mirrorCheck is the state one CheckMirror call passes to a grammar. It lives
// on the caller's stack: grammars only slice p.seg, never keep it.
type mirrorCheck struct {
	r    *Request
	o    *MirrorOptions
	read bool // GET or HEAD
	// based: the rule names a base_path; r points at below, whose Path
	// is the path below it (held here, so it costs no allocation of its own).
	based bool
	below Request
	p     mirrorPath
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

// CheckMirror checks r against the download grammar of m. o may be nil.
// For an unescaped path it allocates nothing but its own state (the check
// escapes into the grammar's function value), with a base_path too. It
// fails closed: anything outside the grammar is denied with a reason.
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
	eco := m.eco()
	if eco == nil {
		return mdeny(rBadMirror)
	}
	c := mirrorCheck{r: r, o: o}
	if o != nil && o.BasePath != "" {
		rest, ok := UnderBasePath(o.BasePath, r.Path)
		if !ok {
			return mdeny(rOutsideBase)
		}
		c.below = *r
		c.below.Path = rest
		c.r, c.based = &c.below, true
	}
	r = c.r
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
	v := eco.grammar(&c)
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
	return m.eco().maxQuery
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
// "/-/package/@scope%2fname" (and in an attestations path).
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
// specially: '/', '\', '%' (double encoding) and controls.
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
	case strings.HasPrefix(raw, "/-/npm/v1/attestations/@"):
		scopeAt = len("/-/npm/v1/attestations/")
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

// CheckMirrorBody checks a buffered body of a request CheckMirror allowed
// with BodyCap > 0, by the ecosystem's body grammar.
func CheckMirrorBody(m Mirror, r *Request, body []byte) (ok bool, reason string) {
	e := m.eco()
	if e == nil || e.body == nil || r == nil || r.Method != "POST" {
		return false, rNoBody
	}
	return e.body(r, body)
}
