package classify

// Path parsing for page types: the path decoded until it stops changing
// (every spelling that hides structure marks it weird), split into
// segments, and walked for the signals its words carry, with the owner
// and repository names of namespace hosts skipped.

import (
	"bytes"
	"strings"
)

// pgPlainPath reports whether path is absolute, uses only unreserved and
// sub-delim characters other than ';', and has no empty or dot segments.
func pgPlainPath(path string) bool {
	if path == "" || path[0] != '/' {
		return false
	}
	for i := 0; i < len(path); i++ {
		if !pgPlainChars[path[i]] {
			return false
		}
	}
	for seg := range strings.SplitSeq(path[1:], "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

// pgMatch matches a readOnlyPOSTs pattern against a plain path, segment by
// segment from the end.
func pgMatch(pat, path string) bool {
	anyPrefix := strings.HasPrefix(pat, "**/")
	if anyPrefix {
		pat = pat[2:]
	}
	for {
		pi, xi := strings.LastIndexByte(pat, '/'), strings.LastIndexByte(path, '/')
		if pi < 0 || xi < 0 {
			return false
		}
		if ps := pat[pi+1:]; ps != "*" && ps != path[xi+1:] {
			return false
		}
		pat, path = pat[:pi], path[:xi]
		if pat == "" {
			return path == "" || anyPrefix
		}
	}
}

// pgSpan is one path segment: bounds into pgPath.b (original case) and, at
// the same offsets plus half, the lower-cased copy.
type pgSpan struct{ lo, hi int }

// pgPath is a request path decoded until stable and split into segments.
type pgPath struct {
	b     []byte // decoded path, then its lower-cased copy
	half  int    // offset of the lower-cased copy
	segs  []pgSpan
	weird bool // it took decoding of a separator or dot, or had ';', '\\', control bytes, empty or dot segments
}

// pgMaxDecode bounds the decoding rounds; a path still changing after that
// is weird.
const pgMaxDecode = 4

func pgParsePath(raw string, buf []byte, segs []pgSpan) pgPath {
	p := pgPath{b: append(buf, raw...), segs: segs}
	p.decode()
	p.half = len(p.b)
	for i := 0; i < p.half; i++ {
		c := p.b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		p.b = append(p.b, c)
	}
	p.split()
	return p
}

// decode unescapes p.b until stable (at most pgMaxDecode rounds) and folds
// Unicode, marking p weird for every spelling that hides structure.
func (p *pgPath) decode() {
	for round := 0; ; round++ {
		var changed, sep bool
		p.b, changed, sep = pgUnescape(p.b)
		p.weird = p.weird || sep
		if !changed {
			break
		}
		if round == pgMaxDecode-1 {
			p.weird = true
			break
		}
	}
	if bytes.Contains(p.b, []byte("%u")) || bytes.Contains(p.b, []byte("%U")) {
		p.weird = true // IIS %uXXXX escapes
	}
	if pgNonASCII(p.b) {
		// Fold compatibility forms and confusables; a path that needed it
		// loses the rules that remove signals, like any other odd spelling.
		if f, changed := foldUnicode(p.b); changed {
			p.b, p.weird = append(p.b[:0], f...), true
		}
	}
}

// split cuts the decoded path p.b[:p.half] into segments at '/' and at
// every other byte some server takes for a separator, dropping path
// parameters, empty and dot segments (each marks p weird).
func (p *pgPath) split() {
	start := 0
	for i := 0; i <= p.half; i++ {
		if i < p.half {
			c := p.b[i]
			if c != '/' && c != '\\' && c >= 0x20 && c != 0x7f {
				continue
			}
			if c != '/' {
				p.weird = true // a separator to some servers
			}
		}
		p.addSegment(start, i)
		start = i + 1
	}
}

// addSegment adds the segment p.b[start:end] (end at a separator or the
// path's end).
func (p *pgPath) addSegment(start, end int) {
	hi := end
	for j := start; j < hi; j++ {
		if p.b[j] == ';' {
			hi, p.weird = j, true // path parameters: /login;jsessionid=x is /login
			break
		}
	}
	switch seg := p.b[start:hi]; {
	case len(seg) == 0:
		// Only the leading and a trailing slash leave an empty segment.
		if start != 0 && end != p.half {
			p.weird = true
		}
	case string(seg) == "." || string(seg) == "..":
		p.weird = true // not resolved: every segment keeps its say
	default:
		p.segs = append(p.segs, pgSpan{start, hi})
	}
}

func pgNonASCII(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return true
		}
	}
	return false
}

// pgUnescape decodes %XX escapes in place. sep reports a decoded '/', '\\',
// '.', ';' or control byte: spellings that hide structure.
func pgUnescape(b []byte) (out []byte, changed, sep bool) {
	w := 0
	for r := 0; r < len(b); r++ {
		c := b[r]
		if c == '%' && r+2 < len(b) && unhex(b[r+1]) >= 0 && unhex(b[r+2]) >= 0 {
			c = byte(unhex(b[r+1])<<4 | unhex(b[r+2]))
			r += 2
			changed = true
			// 0xC0 and 0xC1 start overlong UTF-8 ("%c0%ae" is '.' to old IIS).
			if c == '/' || c == '\\' || c == '.' || c == ';' || c < 0x20 || c == 0x7f || c == 0xc0 || c == 0xc1 {
				sep = true
			}
		}
		b[w] = c
		w++
	}
	return b[:w], changed, sep
}

func (p *pgPath) orig(i int) []byte { return p.b[p.segs[i].lo:p.segs[i].hi] }

func (p *pgPath) low(i int) []byte { return p.b[p.half+p.segs[i].lo : p.half+p.segs[i].hi] }

// is reports whether segment i (lower-cased) is s; false when out of range.
func (p *pgPath) is(i int, s string) bool {
	return i >= 0 && i < len(p.segs) && string(p.low(i)) == s
}

// index is the first segment equal to s (lower-cased), or -1.
func (p *pgPath) index(s string) int {
	for i := range p.segs {
		if string(p.low(i)) == s {
			return i
		}
	}
	return -1
}

// pgSignals holds, per category, the first word that fired ("" when none).
type pgSignals struct {
	payment, oauth, oauthEnd, login, cred, upload, uploadPage, publish string
	compose, postWrite, admin, adminWrite                              string
	oauthMark, search, graphql                                         bool
}

func pgSet(dst *string, why string) {
	if *dst == "" {
		*dst = why
	}
}

// names returns the segments [lo, hi) that are owner and repository names.
func (p *pgPath) names(host string) (lo, hi int) {
	kind := pgNamespaceHosts[host]
	if kind == 0 || p.weird || len(p.segs) == 0 {
		return 0, 0
	}
	first := p.low(0)
	switch kind {
	case nsGitHubAPI:
		switch {
		case string(first) == "repos":
			return 1, 3
		case string(first) == "users" || string(first) == "orgs":
			return 1, 2
		}
		return 0, 0
	case nsHF:
		if string(first) == "datasets" || string(first) == "spaces" {
			return 1, 3
		}
	}
	// A first segment that is a site route (or looks like one) is no owner.
	var s pgSignals
	if pgWords[string(first)].flags&(wNoSkip|wGuard) != 0 || s.segment(p.orig(0), first, true, true, false) {
		return 0, 0
	}
	if i := p.index("-"); i > 0 {
		return 0, i // GitLab: the namespace path ends at "/-/"
	}
	return 0, 2
}

// walk records the words of every segment that can speak for the page.
func (s *pgSignals) walk(p *pgPath, host string, safe bool) {
	n := len(p.segs)
	if n == 0 {
		return
	}
	w := pgWalk{p: p, host: host, safe: safe, last: n - 1}
	w.skipLo, w.skipHi = p.names(host)
	// A static asset named login.css is not a login page.
	w.static = safe && pgHasSuffixAny(p.low(w.last), pgStaticExts)
	for i := 0; i < n; i++ {
		s.walkSegment(&w, i)
	}
}

// pgWalk is walk's state across the segments of one path.
type pgWalk struct {
	p              *pgPath
	host           string
	safe, static   bool
	guarded        bool // a guard segment came before: what follows is a name
	last           int
	skipLo, skipHi int // the owner and repository names on a namespace host
}

// walkSegment records the words of segment i.
func (s *pgSignals) walkSegment(w *pgWalk, i int) {
	p, last := w.p, w.last
	low := p.low(i)
	relaxed := p.weird
	if w.guarded {
		if !pgHasPrefix(low, "special:") {
			return // MediaWiki: /wiki/Special:UserLogin is a function page
		}
		relaxed = true
	}
	if i == last {
		s.graphql = string(low) == "graphql"
	}
	if i >= w.skipLo && i < w.skipHi {
		// On the web hubs, a repository named exactly "signup" is rarer
		// than a site route that looks like /<product>/signup.
		if wd := pgWords[string(low)]; w.skipLo == 0 && wd.flags&wLogin != 0 {
			pgSet(&s.login, wd.why)
		}
		return
	}
	if i == last && w.static {
		return
	}
	if !p.weird && i < last {
		w.guarded = w.guarded || w.guards(i, low)
	}
	if s.neighbourWords(p, i, low) {
		return // the account editor, not a compose page
	}
	// On a namespace host the first segment after the owner and
	// repository names is the site route (/<owner>/<repo>/upload/<branch>):
	// it counts like a first segment.
	routeAt := w.skipHi > 0 && (i == w.skipHi || i == w.skipHi+1 && p.is(w.skipHi, "-")) // GitLab: /<ns>/<repo>/-/upload
	if routeAt && (string(low) == "new" || string(low) == "edit") {
		pgSet(&s.compose, "path:"+string(low)) // /<owner>/<repo>/new/<branch>: the file editor
	}
	s.segment(p.orig(i), low, relaxed || i < 2 || i == last || routeAt, relaxed || i == last, w.safe)
}

// guards reports whether segment i (not the last) starts a name: what
// follows it is a package, a thread or a question, not a site route.
func (w *pgWalk) guards(i int, low []byte) bool {
	return pgWords[string(low)].flags&wGuard != 0 ||
		i == 0 && pgHostGuards[w.host] == string(low) || // pypi.org/project/flask-login/
		string(low) == "comments" || // reddit /comments/<id>/<slug>
		string(low) == "questions" && pgDigit(w.p.low(i + 1)[0]) // /questions/<id>/<slug>, not /questions/ask
}

// neighbourWords records the words that mean something only next to the
// segment before them (/issues/new, /users/42/edit, /device/code). It
// reports whether the segment is the account editor, which is no compose
// page and needs no further look.
func (s *pgSignals) neighbourWords(p *pgPath, i int, low []byte) bool {
	last := len(p.segs) - 1
	switch {
	case string(low) == "new" && i > 0 && pgNewAfter[string(p.low(i-1))]:
		pgSet(&s.compose, "path:new")
	case string(low) == "edit" && i > 0 && (string(p.low(i-1)) == "users" || string(p.low(i-1)) == "profile" ||
		i > 1 && string(p.low(i-2)) == "users"): // /users/edit, /users/42/edit, /profile/edit
		pgSet(&s.admin, "path:edit")
		return true
	case string(low) == "code" && i == last && i > 0 && string(p.low(i-1)) == "device":
		pgSet(&s.oauth, "path:device/code")
	case pgHasPrefix(low, "oauth."):
		pgSet(&s.oauth, "path:oauth.") // Slack's oauth.v2.access
	}
	return false
}

func pgDigit(c byte) bool { return '0' <= c && c <= '9' }

func pgHasSuffixAny(b []byte, suffixes []string) bool {
	for _, e := range suffixes {
		if len(b) > len(e) && pgHasSuffix(b, e) {
			return true
		}
	}
	return false
}

func pgHasPrefix(b []byte, s string) bool { return len(b) >= len(s) && string(b[:len(s)]) == s }

func pgHasSuffix(b []byte, s string) bool { return len(b) >= len(s) && string(b[len(b)-len(s):]) == s }

// segment looks up one segment whole, squashed (separators dropped: sign_in
// is signin) and word by word, and records what fired. positional: the
// segment is one where login words count; last: it is the last segment. It
// reports whether any word fired.
func (s *pgSignals) segment(orig, low []byte, positional, last, safe bool) bool {
	fired := false
	if w, ok := pgWords[string(low)]; ok {
		if last && w.flags&wVerb != 0 {
			pgSet(&s.compose, w.why) // /new, /submit, /answers/add
			fired = true
		}
		fired = s.add(w, positional, last, safe) || fired
	}
	var sq [32]byte
	n, alnum := 0, true
	for _, c := range low {
		if pgAlnum(c) {
			if n < len(sq) {
				sq[n] = c
			}
			n++
		} else {
			alnum = false
		}
	}
	if !alnum && n <= len(sq) {
		if w, ok := pgWords[string(sq[:n])]; ok {
			fired = s.add(w, positional, last, safe) || fired
		}
	}
	if last && pgHasPrefix(low, "new") && len(low) > 4 && !pgAlnum(low[3]) && pgWordCount(orig) == 2 {
		pgSet(&s.compose, "path:new-") // /new-story, /new-dataset: a create page
		fired = true
	}
	return s.words(orig, low, positional, last, safe) || fired
}

// words looks up each word of a segment of several words (camelCase splits
// too); after a verb, a camelCase word in the last segment makes it a
// compose page. It reports whether any word fired.
func (s *pgSignals) words(orig, low []byte, positional, last, safe bool) bool {
	fired := false
	prevVerb := ""
	for i := 0; i < len(orig); {
		lo, hi, camel := pgNextWord(orig, i)
		if lo == hi {
			break
		}
		i = hi
		if lo == 0 && hi == len(orig) {
			break // one word: looked up whole above
		}
		w, ok := pgWords[string(low[lo:hi])]
		if last && camel && prevVerb != "" {
			pgSet(&s.compose, prevVerb) // postMessage, CreateIssue!default.jspa
			fired = true
		}
		prevVerb = ""
		if !ok {
			continue
		}
		if w.flags&wVerb != 0 {
			prevVerb = w.why
		}
		fired = s.add(w, positional, last, safe) || fired
	}
	return fired
}

func (s *pgSignals) add(w pgWord, positional, last, safe bool) bool {
	f, why := w.flags, w.why
	before := *s
	if f&wPayment != 0 {
		pgSet(&s.payment, why)
	}
	if f&wOAuthMark != 0 {
		s.oauthMark = true
	}
	if last && f&wOAuthEnd != 0 {
		pgSet(&s.oauthEnd, why)
	}
	if last && f&wOAuthSelf != 0 {
		pgSet(&s.oauth, why)
	}
	if positional && f&wLogin != 0 {
		pgSet(&s.login, why)
	}
	if !safe && f&wCred != 0 {
		pgSet(&s.cred, why)
	}
	if !safe && f&wUpload != 0 {
		pgSet(&s.upload, why)
	}
	if positional && f&wUploadPage != 0 {
		pgSet(&s.uploadPage, why)
	}
	if !safe && f&wPublish != 0 {
		pgSet(&s.publish, why)
	}
	if f&wCompose != 0 {
		pgSet(&s.compose, why)
	}
	if !safe && f&wPostWrite != 0 {
		pgSet(&s.postWrite, why)
	}
	if f&wAdmin != 0 {
		pgSet(&s.admin, why)
	}
	if !safe && f&wAdminWrite != 0 {
		pgSet(&s.adminWrite, why)
	}
	if f&wSearch != 0 {
		s.search = true
	}
	return *s != before
}

// pgWordCount counts the words of a segment as pgNextWord splits them.
func pgWordCount(seg []byte) int {
	n := 0
	for i := 0; i < len(seg); n++ {
		lo, hi, _ := pgNextWord(seg, i)
		if lo == hi {
			break
		}
		i = hi
	}
	return n
}

func pgAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

func pgIsUpper(c byte) bool { return 'A' <= c && c <= 'Z' }

func pgIsLower(c byte) bool { return 'a' <= c && c <= 'z' }

// pgNextWord returns the next word of seg at or after i: a run of letters
// and digits, split again at camelCase boundaries (postMessage → post,
// Message; URLExternal → URL, External). camel reports that the word began
// at such a boundary.
func pgNextWord(seg []byte, i int) (lo, hi int, camel bool) {
	for i < len(seg) && !pgAlnum(seg[i]) {
		i++
	}
	lo = i
	if i < len(seg) && i > 0 && pgAlnum(seg[i-1]) {
		camel = true // continuing after a camelCase split
	}
	for i++; i < len(seg) && pgAlnum(seg[i]); i++ {
		c, prev := seg[i], seg[i-1]
		if pgIsUpper(c) && pgIsLower(prev) ||
			pgIsUpper(c) && pgIsUpper(prev) && i+1 < len(seg) && pgIsLower(seg[i+1]) {
			break
		}
	}
	if lo >= len(seg) {
		return len(seg), len(seg), false
	}
	return lo, min(i, len(seg)), camel
}
