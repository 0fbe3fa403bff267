package classify

// Page types (decision step 4 in README.md, "Page types"): one
// PageType per request, from method, path, query, Content-Type and host,
// plus the id of the signal that decided it.
//
// Two asymmetries shape every choice here. A read classified as a write is
// friction; a write classified as a read is a leak. So:
//   - a method other than GET, HEAD or OPTIONS is a write unless the request
//     is on readOnlyPOSTs, which matches raw, unescaped paths only;
//   - escapes, dot segments, ';' parameters, backslashes and doubled slashes
//     can only add signals: the path is decoded until it stops changing, and
//     a path that needed any of that loses the rules that remove signals
//     (content guards, owner/repo names, word positions).

import (
	"bytes"
	"slices"
	"strings"
	"sync"
)

// pgReadOnlyPOST names a request made with POST that only reads. These are
// the only non-GET/HEAD/OPTIONS requests ClassifyPage ever calls read or
// download, and only when the rule opts in (Request.ReadPosts): a POST body
// is a channel wherever it is allowed, so it is allowed only where a rule
// says so, and CheckReadPostBody then holds the body to what the protocol
// sends.
type pgReadOnlyPOST struct {
	ID          string   // the signal ClassifyPage returns; the opt-in name is ID without "readpost:"
	Host        string   // exact host; "" for any host (self-hosted software)
	Paths       []string // raw-path patterns: "*" is one segment, a leading "**" any prefix
	ContentType string   // required media type; "" only with MaxBody 0 (no body)
	MaxBody     int64    // Content-Length cap; an unknown (chunked) length never matches
	QueryKeys   []string // the only query keys allowed, spelled raw; nil: no query
	Page        PageType // PageRead or PageDownload
	// Body checks the buffered body (at most MaxBody bytes); nil with MaxBody 0.
	Body func(body []byte) (bool, string)
}

// readOnlyPOSTs is the explicit list of read-only POSTs. GraphQL endpoints
// are deliberately absent (a mutation looks like a query from outside), and
// so is npm audit (it uploads the whole dependency inventory).
var readOnlyPOSTs = []pgReadOnlyPOST{
	// git fetch/clone negotiation (gitprotocol-http(5)). git switches to a
	// chunked body above http.postBuffer (1 MiB), so the cap matches it.
	// Implied by mirror: git.
	{ID: "readpost:git-upload-pack", Paths: []string{"**/git-upload-pack"},
		ContentType: uploadPackType, MaxBody: uploadPackBodyCap, Page: PageDownload, Body: checkUploadPackBody},
	// Jira issue search (JQL in a JSON body), on any Jira host.
	{ID: "readpost:jira-search", Paths: []string{"**/rest/api/*/search", "**/rest/api/*/search/jql"},
		ContentType: "application/json", MaxBody: jiraSearchBodyCap, Page: PageRead, Body: checkJiraSearch},
	// Hugging Face file metadata, as huggingface_hub asks for it.
	{ID: "readpost:hf-paths-info", Host: "huggingface.co", Paths: []string{"/api/*/*/*/paths-info/*", "/api/*/*/paths-info/*"},
		ContentType: "application/x-www-form-urlencoded", MaxBody: hfPathsInfoBodyCap, Page: PageRead, Body: checkHFPathsInfo},
	// Sonatype Central deployment status (?id=… in the query, no body).
	{ID: "readpost:sonatype-status", Host: "central.sonatype.com", Paths: []string{"/api/v1/publisher/status"},
		QueryKeys: []string{"id"}, Page: PageRead},
}

// ReadPostNames lists the names a rule's read_posts may hold.
func ReadPostNames() []string {
	out := make([]string, 0, len(readOnlyPOSTs))
	for _, e := range readOnlyPOSTs {
		out = append(out, strings.TrimPrefix(e.ID, "readpost:"))
	}
	return out
}

// ReadPostBodyCap returns how much body the read-only POST that signal
// names may carry (0: none; the proxy then forwards no body).
func ReadPostBodyCap(signal string) int64 {
	if e := readPostBySignal(signal); e != nil {
		return e.MaxBody
	}
	return 0
}

// CheckReadPostBody checks the buffered body of a request ClassifyPage
// called a read-only POST with signal.
func CheckReadPostBody(signal string, body []byte) (bool, string) {
	e := readPostBySignal(signal)
	switch {
	case e == nil:
		return false, "no read-only POST " + signal
	case int64(len(body)) > e.MaxBody:
		return false, e.ID + ": body over cap"
	case e.Body == nil:
		if len(body) == 0 {
			return true, ""
		}
		return false, e.ID + ": takes no body"
	}
	return e.Body(body)
}

func readPostBySignal(signal string) *pgReadOnlyPOST {
	for i := range readOnlyPOSTs {
		if readOnlyPOSTs[i].ID == signal {
			return &readOnlyPOSTs[i]
		}
	}
	return nil
}

// ClassifyPage returns the page type of r and the id of the signal that
// decided it ("host:accounts.", "path:login", "query:client_id",
// "ctype:multipart", "method:POST-unknown", "known:git-receive-pack",
// "readpost:jira-search", "ext:.whl", "default"), so a decision can explain
// itself. Rules are tried in order and the first that fires wins: named
// read-only POSTs, known endpoints, then payment, oauth, login, upload,
// publish, posting, admin, the method, and for GET/HEAD/OPTIONS without a
// body download and finally read.
//
// r.Host must be normalized (lower case, no trailing dot), as ParseURL
// leaves it. ClassifyPage does not allocate for paths up to 256 bytes and 32
// segments.
func ClassifyPage(r *Request) (PageType, string) {
	safe := r.Method == "GET" || r.Method == "HEAD" || r.Method == "OPTIONS"
	if !safe {
		if e := pgReadOnly(r); e != nil {
			return e.Page, e.ID
		}
	}

	// The parsed path and query go to each ecosystem's known writes through
	// function values, so they would escape; a pooled scratch keeps the
	// call allocation-free.
	sc := pgPool.Get().(*pgScratch)
	defer pgPool.Put(sc)
	sc.p = pgParsePath(r.Path, sc.buf[:0], sc.segs[:0])
	sc.q = pgQuery{}
	sc.q.scan(r.Query)
	p, q := &sc.p, &sc.q

	if t, why := pgKnownWrite(r, p, q, safe); why != "" {
		return t, why
	}

	d := pgDecision{r: r, p: p, q: q, safe: safe, label: r.Host}
	if i := strings.IndexByte(d.label, '.'); i >= 0 {
		d.label = d.label[:i]
	}
	d.hr = pgHostLabels[d.label]
	if t, why := d.gather(); why != "" {
		return t, why
	}
	return d.decide()
}

// pgDecision is one request on its way through ClassifyPage's rules: the
// parsed request, its host rule and the signals of its path and query.
type pgDecision struct {
	r     *Request
	p     *pgPath
	q     *pgQuery
	safe  bool
	label string // the host's first label
	hr    pgHostRule
	s     pgSignals
}

// gather collects the path signals, unless the host is a content host;
// there only an account function as the first segment decides, returned
// at once.
func (d *pgDecision) gather() (PageType, string) {
	if !d.hr.content && !pgContentHosts[d.r.Host] {
		d.s.walk(d.p, d.r.Host, d.safe)
	} else if len(d.p.segs) > 0 {
		// Content hosts name topics in their paths, but a first segment
		// that is an account function is that function there too: an
		// allowed docs host must not become a way to a login page.
		if rule, ok := pgContentHostFirst[string(d.p.low(0))]; ok {
			return rule.page, rule.why
		}
	}
	if d.q.specialN > 0 {
		// index.php?title=Special:UserLogin is the page /wiki/Special:UserLogin.
		sp := d.q.special[:d.q.specialN]
		d.s.segment(sp, sp, true, true, d.safe)
	}
	return 0, ""
}

// decide tries the rules in ClassifyPage's order; the first that fires
// wins.
func (d *pgDecision) decide() (PageType, string) {
	if why := d.payment(); why != "" {
		return PagePayment, why
	}
	if why := d.oauth(); why != "" {
		return PageOAuth, why
	}
	if why := d.login(); why != "" {
		return PageLogin, why
	}
	if why := d.upload(); why != "" {
		return PageUpload, why
	}
	if !d.safe && d.s.publish != "" {
		return PagePublish, d.s.publish
	}
	if why := d.posting(); why != "" {
		return PagePosting, why
	}
	if why := d.admin(); why != "" {
		return PageAdmin, why
	}
	if !d.safe {
		return PagePosting, d.otherWrite()
	}
	if d.r.ContentLength != 0 {
		return PagePosting, "body:GET" // a GET that carries a body is not a plain read
	}
	if d.hr.page == PageDownload {
		return PageDownload, d.hr.why
	}
	if why := pgDownload(d.r, d.p, d.q); why != "" {
		return PageDownload, why
	}
	return PageRead, "default"
}

// firstSignal returns the first non-empty signal.
func firstSignal(whys ...string) string {
	for _, w := range whys {
		if w != "" {
			return w
		}
	}
	return ""
}

// hostRule returns the host rule's signal if it names page t.
func (d *pgDecision) hostRule(t PageType) string {
	if d.hr.page == t {
		return d.hr.why
	}
	return ""
}

// unsafeOnly returns why for a request that is not GET/HEAD/OPTIONS.
func (d *pgDecision) unsafeOnly(why string) string {
	if d.safe {
		return ""
	}
	return why
}

func (d *pgDecision) payment() string {
	return firstSignal(d.hostRule(PagePayment), pgPaymentHosts[d.r.Host], d.s.payment)
}

// oauth: an authorize or token endpoint, or the authorize query itself.
func (d *pgDecision) oauth() string {
	switch {
	case d.q.clientID && (d.q.responseType || d.q.redirectURI):
		return "query:client_id"
	case d.q.grantType:
		return "query:grant_type"
	case d.s.oauth != "":
		return d.s.oauth
	case d.s.oauthEnd != "" && (d.s.oauthMark || strings.HasPrefix(d.label, "oauth")):
		return d.s.oauthEnd
	}
	return ""
}

func (d *pgDecision) login() string {
	return firstSignal(d.hostRule(PageLogin), d.s.login, d.unsafeOnly(d.s.cred), d.q.login)
}

func (d *pgDecision) upload() string {
	if !d.safe {
		if why := d.uploadWrite(); why != "" {
			return why
		}
	}
	return firstSignal(d.hostRule(PageUpload), d.s.uploadPage, d.q.upload)
}

// uploadWrite is the upload rule for a request that carries a write
// method: the body's kind, PUT, WebDAV, then the path.
func (d *pgDecision) uploadWrite() string {
	r := d.r
	switch pgContentKind(r.ContentType) {
	case pgMultipart:
		return "ctype:multipart"
	case pgBinary:
		return "ctype:binary"
	}
	if r.Method == "PUT" && r.ContentLength != 0 && !pgStructured(r.ContentType) {
		return "method:PUT-body" // PUT stores bytes at a URL
	}
	switch r.Method {
	case "MKCOL", "PROPPATCH", "MOVE", "COPY", "LOCK", "UNLOCK":
		return "method:webdav"
	}
	return d.s.upload
}

func (d *pgDecision) posting() string {
	if why := firstSignal(d.s.compose, d.unsafeOnly(d.s.postWrite), d.q.posting); why != "" {
		return why
	}
	if d.q.text && !d.s.search {
		return "query:text"
	}
	if d.s.graphql && d.q.mutation {
		return "query:mutation"
	}
	return ""
}

func (d *pgDecision) admin() string {
	return firstSignal(d.hostRule(PageAdmin), d.s.admin, d.unsafeOnly(d.s.adminWrite))
}

// otherWrite names a write no rule above took.
func (d *pgDecision) otherWrite() string {
	if d.s.graphql {
		return "path:graphql"
	}
	switch d.r.Method {
	case "POST":
		return "method:POST-unknown"
	case "PUT":
		return "method:PUT-unknown"
	case "PATCH":
		return "method:PATCH-unknown"
	case "DELETE":
		return "method:DELETE-unknown"
	}
	return "method:unknown"
}

// pgScratch is ClassifyPage's working memory.
type pgScratch struct {
	buf  [2 * 256]byte
	segs [32]pgSpan
	p    pgPath
	q    pgQuery
}

var pgPool = sync.Pool{New: func() any { return new(pgScratch) }}

// pgReadOnly returns the readOnlyPOSTs entry r matches, or nil. Only a raw
// path with nothing to decode or resolve can match, so no spelling of a
// write can reach a read-only entry.
func pgReadOnly(r *Request) *pgReadOnlyPOST {
	if r.Method != "POST" || r.ContentLength < 0 || !pgPlainPath(r.Path) {
		return nil
	}
	for i := range readOnlyPOSTs {
		e := &readOnlyPOSTs[i]
		if !slices.Contains(r.ReadPosts, e.ID[len("readpost:"):]) {
			continue // not opted in by the rule
		}
		if r.ContentLength > e.MaxBody || e.Host != "" && e.Host != r.Host {
			continue
		}
		if e.ContentType != "" && !strings.EqualFold(mediaType(r.ContentType), e.ContentType) {
			continue
		}
		if !pgQueryKeysIn(r.Query, e.QueryKeys) {
			continue // no method override, no second meaning in the query
		}
		for _, pat := range e.Paths {
			if pgMatch(pat, r.Path) {
				return e
			}
		}
	}
	return nil
}

// pgQueryKeysIn reports whether every parameter of query has a key, spelled
// raw, in keys.
func pgQueryKeysIn(query string, keys []string) bool {
	for query != "" {
		var pair string
		if i := strings.IndexAny(query, "&;"); i >= 0 {
			pair, query = query[:i], query[i+1:]
		} else {
			pair, query = query, ""
		}
		k, _, _ := strings.Cut(pair, "=")
		found := false
		for _, key := range keys {
			found = found || k == key
		}
		if !found {
			return false
		}
	}
	return true
}

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

var pgPlainChars = func() (t [256]bool) {
	for _, c := range []byte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~!$&'()*+,=:@/") {
		t[c] = true
	}
	return t
}()

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

// pgKnownWrite is the table of endpoints that the generic rules get wrong:
// each ecosystem's publish, upload and token endpoints (declared in its
// eco_<name>.go file), then model hubs and webhook sinks. It only ever
// returns write types, so it cannot hide a signal.
func pgKnownWrite(r *Request, p *pgPath, q *pgQuery, safe bool) (PageType, string) {
	if t, why := ecosystemKnownWrites(r, p, q, safe); why != "" {
		return t, why
	}
	n := len(p.segs)
	switch r.Host {
	case "huggingface.co", "hf.co":
		if !p.is(0, "api") {
			break
		}
		if !safe && p.is(1, "repos") {
			return PagePublish, "known:hf-repos"
		}
		for i := 2; i < n; i++ {
			switch {
			case p.is(i, "preupload"):
				return PageUpload, "known:hf-preupload"
			case p.is(i, "xet-write-token"):
				return PageLogin, "known:hf-write-token"
			case !safe && p.is(i, "commit"):
				return PagePublish, "known:hf-commit"
			}
		}
	case "hooks.slack.com":
		return PagePosting, "known:slack-webhook"
	case "api.github.com":
		switch {
		case safe || !p.is(0, "repos"):
		case p.is(3, "contents"):
			return PageUpload, "known:github-contents" // create or update a file
		case n == 3 && (r.Method == "PATCH" || r.Method == "DELETE"):
			return PageAdmin, "known:github-repo-admin" // rename, visibility, delete
		}
	}
	return PageRead, ""
}

// pgDownload names the download signal of a GET that nothing else claimed.
func pgDownload(r *Request, p *pgPath, q *pgQuery) string {
	n := len(p.segs)
	if p.is(0, "v2") && (p.index("blobs") > 1 || p.index("manifests") > 1) {
		return "known:oci-pull"
	}
	if q.uploadPack && p.is(n-1, "refs") && p.is(n-2, "info") {
		return "known:git-upload-pack"
	}
	if (r.Host == "huggingface.co" || r.Host == "hf.co") && p.index("resolve") > 0 {
		return "known:hf-resolve"
	}
	if p.index("download") >= 0 {
		return "path:download"
	}
	if r.Host == "api.github.com" && (p.index("tarball") > 0 || p.index("zipball") > 0) {
		return "known:github-archive"
	}
	if r.Host == "objects.githubusercontent.com" {
		return "known:github-release-asset"
	}
	if n == 0 {
		return ""
	}
	last := p.low(n - 1)
	dot := bytes.LastIndexByte(last, '.')
	if dot <= 0 {
		return ""
	}
	if pgHasSuffix(last[:dot], ".tar") {
		if why := pgArchiveExts[string(last[dot-4:])]; why != "" {
			return why // name .tar.gz, not .gz
		}
	}
	return pgArchiveExts[string(last[dot:])]
}

// pgArchiveExts are file types a GET downloads rather than reads.
var pgArchiveExts = func() map[string]string {
	m := map[string]string{}
	for _, e := range []string{".tar.gz", ".tar.bz2", ".tar.xz", ".tar.zst", ".tgz", ".tbz2", ".txz", ".tar",
		".zip", ".gz", ".bz2", ".xz", ".zst", ".lz4", ".7z", ".rar",
		".whl", ".egg", ".crate", ".gem", ".jar", ".war", ".aar", ".pom", ".nupkg", ".conda",
		".deb", ".udeb", ".rpm", ".apk", ".dmg", ".pkg", ".msi", ".exe", ".iso", ".img", ".appimage", ".snap",
		".safetensors", ".gguf", ".onnx", ".parquet",
		".sha1", ".sha256", ".sha512", ".md5", ".asc", ".sig"} {
		m[e] = "ext:" + e
	}
	return m
}()

// pgStructured reports a JSON or form body: a PUT of one updates a
// resource (its words decide the page type) rather than storing bytes.
func pgStructured(ct string) bool {
	mt := mediaType(ct)
	return strings.EqualFold(mt, "application/json") || strings.EqualFold(mt, "application/x-www-form-urlencoded") ||
		len(mt) > 5 && strings.EqualFold(mt[len(mt)-5:], "+json")
}

// Content-Type kinds that decide a write's page type.
const (
	pgOtherBody = iota
	pgMultipart
	pgBinary
)

func pgContentKind(ct string) int {
	mt := mediaType(ct)
	var b [64]byte
	if len(mt) > len(b) {
		return pgOtherBody
	}
	low := pgLower(b[:0], mt)
	if bytes.HasPrefix(low, []byte("multipart/")) {
		return pgMultipart
	}
	for _, pfx := range []string{"image/", "video/", "audio/", "font/"} {
		if pgHasPrefix(low, pfx) {
			return pgBinary
		}
	}
	switch string(low) {
	case "application/octet-stream", "application/zip", "application/gzip", "application/x-gzip",
		"application/x-tar", "application/x-bzip2", "application/x-xz", "application/zstd",
		"application/x-7z-compressed", "application/java-archive", "application/pdf",
		"application/vnd.android.package-archive", "application/x-binary":
		return pgBinary
	}
	return pgOtherBody
}

func pgLower(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst
}

// Host first labels. Content hosts (documentation, help, blogs) keep only the
// known-endpoint, query and method rules: their paths name topics, not
// functions.
type pgHostRule struct {
	page    PageType
	content bool
	why     string
}

var pgHostLabels = func() map[string]pgHostRule {
	m := map[string]pgHostRule{}
	add := func(t PageType, content bool, labels ...string) {
		for _, l := range labels {
			m[l] = pgHostRule{page: t, content: content, why: "host:" + l + "."}
		}
	}
	add(PagePayment, false, "checkout", "pay", "payment", "payments", "billing", "buy", "donate")
	add(PageLogin, false, "accounts", "login", "signin", "signup", "auth", "sso", "id", "idp", "identity", "passport")
	add(PageAdmin, false, "admin", "console", "portal", "dashboard", "manage", "myaccount", "account", "cpanel", "settings", "iam")
	add(PageUpload, false, "upload", "uploads")
	add(PageDownload, false, "codeload", "dl", "download", "downloads", "release-assets")
	add(PageRead, true, "docs", "developer", "developers", "support", "help", "learn", "blog")
	return m
}()

// pgContentHostFirst are first path segments that keep their meaning even
// on content hosts.
var pgContentHostFirst = func() map[string]pgHostRule {
	m := map[string]pgHostRule{}
	add := func(t PageType, words ...string) {
		for _, w := range words {
			m[w] = pgHostRule{page: t, why: "path:" + w}
		}
	}
	add(PageLogin, "login", "logout", "signin", "sign-in", "signup", "sign-up", "register", "session", "sessions", "sso", "wp-login.php")
	add(PageOAuth, "oauth", "oauth2", "authorize")
	add(PageAdmin, "admin", "wp-admin", "settings", "account", "dashboard")
	add(PagePayment, "checkout", "billing", "pay", "payment")
	return m
}()

// pgContentHosts are content hosts whose first label does not say so.
var pgContentHosts = map[string]bool{"pkg.go.dev": true, "raw.githubusercontent.com": true,
	"gist.githubusercontent.com": true, "www.w3.org": true, "cloud.google.com": true}

// pgHostGuards are first segments that start a package page on registry
// sites: what follows is a package name.
var pgHostGuards = map[string]string{"pypi.org": "project", "www.npmjs.com": "package",
	"crates.io": "crates", "rubygems.org": "gems", "hub.docker.com": "r"}

// pgPaymentHosts are whole payment APIs and sites.
var pgPaymentHosts = map[string]string{
	"api.stripe.com":   "host:api.stripe.com",
	"paypal.com":       "host:paypal.com",
	"www.paypal.com":   "host:www.paypal.com",
	"api.paypal.com":   "host:api.paypal.com",
	"api-m.paypal.com": "host:api-m.paypal.com",
	// Tip and sponsorship sites: every page is a payment page.
	"www.buymeacoffee.com": "host:www.buymeacoffee.com",
	"buymeacoffee.com":     "host:buymeacoffee.com",
	"ko-fi.com":            "host:ko-fi.com",
	"liberapay.com":        "host:liberapay.com",
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
func (p *pgPath) low(i int) []byte  { return p.b[p.half+p.segs[i].lo : p.half+p.segs[i].hi] }

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

// Word categories. A word can carry several.
const (
	wPayment    = 1 << iota // checkout, billing, sponsorship
	wOAuthEnd               // last segment of an OAuth endpoint when an oauth mark is present
	wOAuthSelf              // last segment of an OAuth endpoint on its own: authorize
	wOAuthMark              // names OAuth/OIDC somewhere in the path
	wLogin                  // sign-in, sign-up, sessions: in the first two or the last segment
	wCred                   // credentials: a write to them mints or revokes one
	wUpload                 // upload endpoints (non-GET)
	wUploadPage             // the upload page itself (any method, positional)
	wPublish                // releases and registry metadata (non-GET)
	wCompose                // compose and submit pages, any method
	wVerb                   // a write verb: a whole last segment, or a camelCase name's first word
	wPostWrite              // user-content collections (non-GET)
	wAdmin                  // settings and admin pages, any method
	wAdminWrite             // ownership and permission resources (non-GET)
	wGuard                  // content prefix: what follows is content, not function
	wSearch                 // a search path: text= is a search term there
	wNoSkip                 // a first segment that is a site route, not an owner name
)

type pgWord struct {
	flags int
	why   string
}

var pgWords = func() map[string]pgWord {
	m := map[string]pgWord{}
	add := func(f int, words ...string) {
		for _, w := range words {
			e := m[w]
			e.flags |= f
			e.why = "path:" + w
			m[w] = e
		}
	}
	add(wPayment, "checkout", "payment", "payments", "pay", "billing", "purchase", "subscribe",
		"sponsors", "sponsorships", "donate", "cart")
	add(wOAuthEnd, "auth", "token")
	add(wOAuthSelf, "authorize", "access_token", "accesstoken")
	add(wOAuthMark, "oauth", "oauth2", "openid", "oidc", "connect")
	// Squashed spellings (sign_in, Sign-Up, UserLogin) are looked up too.
	add(wLogin, "login", "logon", "logout", "signin", "signup", "signon", "signout", "register", "registration",
		"join", "session", "sessions", "servicelogin", "userlogin", "createaccount", "password", "passwords",
		"forgot", "reset", "auth", "authenticate", "sso", "saml", "mfa", "2fa", "twofactor", "webauthn", "passkeys")
	add(wCred, "token", "tokens", "apikey", "apikeys", "credential", "credentials")
	add(wUpload, "upload", "uploads", "attachment", "attachments", "media-new.php")
	add(wUploadPage, "upload", "media-new.php")
	add(wPublish, "publish", "unpublish", "release", "releases", "yank", "unyank", "deprecate", "refs", "disttags")
	add(wCompose, "compose", "submit", "posting", "post-new.php", "wp-comments-post.php")
	add(wVerb, "add", "create", "new", "post", "submit", "send", "reply", "compose", "edit", "delete", "remove",
		"update", "ask", "write", "save", "comment", "publish", "share")
	add(wPostWrite, "comment", "comments", "reply", "replies", "note", "notes", "message", "messages",
		"webhook", "webhooks", "post", "posts", "issue", "issues", "pulls", "review", "reviews", "answer", "answers",
		"thread", "threads", "discussion", "discussions", "status", "statuses", "tweet", "tweets",
		"paste", "pastes", "gist", "gists", "chat", "xmlrpc")
	add(wAdmin, "admin", "administrator", "settings", "preferences", "manage", "iam", "account", "tokens", "dashboard",
		"collaboration", "permissions")
	add(wAdminWrite, "owner", "owners", "member", "members", "collaborator", "collaborators", "permission",
		"role", "roles", "hook", "hooks", "key", "keys", "secret", "secrets", "variables", "invitation",
		"invitations", "protection")
	add(wGuard, "blob", "tree", "raw", "src", "wiki", "docs", "doc", "documentation", "topics", "tagged",
		"article", "articles", "blog", "news", "commit", "commits")
	add(wSearch, "search")
	add(wNoSkip, "-", "api", "users", "user", "orgs", "organizations", "groups", "explore", "projects",
		"repos", "new", "marketplace", "apps", "notifications", "codespaces", "datasets", "spaces", "models",
		"site", "enterprise", "features", "pricing", "dashboard")
	return m
}()

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

// Namespace hosts: code and model hubs whose first path segments are
// user-chosen owner and repository names. Words in those names ("login-kit",
// "admin-ui") say nothing about the page.
const (
	nsWeb = 1 + iota
	nsHF
	nsGitHubAPI
)

var pgNamespaceHosts = map[string]int{
	"github.com": nsWeb, "gist.github.com": nsWeb, "gitlab.com": nsWeb, "codeberg.org": nsWeb,
	"bitbucket.org": nsWeb, "gitea.com": nsWeb, "huggingface.co": nsHF, "hf.co": nsHF,
	"api.github.com": nsGitHubAPI,
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

var pgNewAfter = map[string]bool{"issues": true, "pulls": true, "pull": true, "merge_requests": true,
	"discussions": true, "questions": true, "topics": true, "threads": true, "posts": true, "releases": true}

func pgDigit(c byte) bool { return '0' <= c && c <= '9' }

var pgStaticExts = []string{".js", ".mjs", ".css", ".png", ".jpg", ".jpeg", ".gif", ".svg", ".ico",
	".webp", ".avif", ".woff", ".woff2", ".ttf", ".map"}

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

// pgQuery holds what ClassifyPage reads of a query string.
type pgQuery struct {
	clientID, responseType, redirectURI, grantType bool
	receivePack, uploadPack, writeTrue, scopeWrite bool
	text, mutation                                 bool
	login, upload, posting                         string
	special                                        [96]byte // title=Special:… name, for MediaWiki's index.php
	specialN                                       int
}

// scan reads the query's parameters; both '&' and ';' separate them, as
// some servers split on either. Keys and values are decoded until stable
// and lower-cased, so escapes cannot hide a parameter.
func (q *pgQuery) scan(raw string) {
	for raw != "" {
		var pair string
		if i := strings.IndexAny(raw, "&;"); i >= 0 {
			pair, raw = raw[:i], raw[i+1:]
		} else {
			pair, raw = raw, ""
		}
		k, v, _ := strings.Cut(pair, "=")
		var kb [64]byte
		key, ok := pgDecode(kb[:0], k)
		if !ok {
			continue // longer than any key we know
		}
		if pgHasPrefix(key, "entry.") {
			pgSet(&q.posting, "query:entry") // Google Forms formResponse?entry.N=…
			continue
		}
		if kind := pgQueryKeys[string(key)]; kind != 0 {
			q.param(kind, key, v)
		}
	}
}

// param records one parameter of a kind ClassifyPage reads; v is raw.
func (q *pgQuery) param(kind int, key []byte, v string) {
	switch kind {
	case qClientID:
		q.clientID = true
	case qResponseType:
		q.responseType = true
	case qRedirectURI:
		q.redirectURI = true
	case qGrantType:
		q.grantType = true
	case qWriteArg:
		pgSet(&q.posting, pgQueryKeyWhy[string(key)])
	case qText:
		q.text = true
	case qQuery:
		q.mutation = q.mutation || pgHasMutation(v)
	default:
		var vb [256]byte
		val, whole := pgDecode(vb[:0], v)
		q.valueParam(kind, val, whole)
	}
}

// valueParam records a parameter whose decoded value val matters; whole
// is false when val was too long to decode in full.
func (q *pgQuery) valueParam(kind int, val []byte, whole bool) {
	switch kind {
	case qService:
		q.receivePack = q.receivePack || string(val) == "git-receive-pack"
		q.uploadPack = q.uploadPack || string(val) == "git-upload-pack"
	case qWrite:
		q.writeTrue = q.writeTrue || string(val) == "true"
	case qScope:
		// Registry tokens: repository:x:pull,push. A scope too long to read is a write.
		q.scopeWrite = q.scopeWrite || !whole || bytes.Contains(val, []byte("push")) ||
			bytes.Contains(val, []byte("delete")) || bytes.IndexByte(val, '*') >= 0
	case qAction:
		if a, ok := pgQueryActions[string(val)]; ok && whole {
			q.action(a.page, a.why)
		}
	case qMethod:
		if string(val) != "get" && string(val) != "head" {
			pgSet(&q.posting, "query:_method") // Rails/Laravel method override
		}
	case qTitle:
		if name, ok := bytes.CutPrefix(val, []byte("special:")); ok && q.specialN == 0 {
			q.specialN = copy(q.special[:], name)
		}
	}
}

// action records an action= or mode= value that names a function.
func (q *pgQuery) action(page PageType, why string) {
	switch page {
	case PageLogin:
		pgSet(&q.login, why)
	case PageUpload:
		pgSet(&q.upload, why)
	default:
		pgSet(&q.posting, why)
	}
}

// Query parameters ClassifyPage reads.
const (
	qClientID = 1 + iota
	qResponseType
	qRedirectURI
	qGrantType
	qService
	qWrite
	qScope
	qAction
	qMethod
	qWriteArg
	qText
	qQuery
	qTitle
)

var pgQueryKeys = map[string]int{
	"client_id": qClientID, "response_type": qResponseType, "redirect_uri": qRedirectURI,
	"grant_type": qGrantType, "service": qService, "write": qWrite, "scope": qScope,
	"action": qAction, "mode": qAction, "_method": qMethod, "text": qText, "query": qQuery, "title": qTitle,
	// Arguments that carry content: a GET with them writes (share and post links).
	"body": qWriteArg, "message": qWriteArg, "msg": qWriteArg, "comment": qWriteArg, "content": qWriteArg,
	"submit": qWriteArg,
}

var pgQueryKeyWhy = map[string]string{"body": "query:body", "message": "query:message", "msg": "query:msg",
	"comment": "query:comment", "content": "query:content", "submit": "query:submit"}

var pgQueryActions = func() map[string]struct {
	page PageType
	why  string
} {
	m := map[string]struct {
		page PageType
		why  string
	}{}
	add := func(t PageType, vals ...string) {
		for _, v := range vals {
			m[v] = struct {
				page PageType
				why  string
			}{t, "query:action=" + v}
		}
	}
	// MediaWiki index.php/api.php actions, phpBB posting.php modes.
	add(PagePosting, "edit", "submit", "delete", "protect", "unprotect", "move", "rollback", "revert",
		"post", "reply", "quote", "newtopic", "create", "new", "save", "update", "remove", "add")
	add(PageLogin, "login", "clientlogin", "logout", "createaccount", "register", "signup")
	add(PageUpload, "upload")
	return m
}()

// pgDecode percent-decodes s ('+' is a space) into dst until stable, lower
// case. ok is false when the result did not fit; dst then holds a prefix.
func pgDecode(dst []byte, s string) (out []byte, ok bool) {
	ok = true
	for i := 0; i < len(s); i++ {
		if len(dst) == cap(dst) {
			ok = false
			break
		}
		c := s[i]
		switch {
		case c == '+':
			c = ' '
		case c == '%' && i+2 < len(s) && unhex(s[i+1]) >= 0 && unhex(s[i+2]) >= 0:
			c = byte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
		}
		dst = append(dst, c)
	}
	for range pgMaxDecode {
		var changed bool
		if dst, changed, _ = pgUnescape(dst); !changed {
			break
		}
	}
	for i, c := range dst {
		if 'A' <= c && c <= 'Z' {
			dst[i] = c + 'a' - 'A'
		}
	}
	return dst, ok
}

// pgHasMutation reports whether a GraphQL query parameter names a mutation,
// however long it is (decoded once, case-insensitive).
func pgHasMutation(v string) bool {
	const word = "mutation"
	m := 0
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '+':
			c = ' '
		case c == '%' && i+2 < len(v) && unhex(v[i+1]) >= 0 && unhex(v[i+2]) >= 0:
			c = byte(unhex(v[i+1])<<4 | unhex(v[i+2]))
			i += 2
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		switch {
		case c == word[m]:
			m++
			if m == len(word) {
				return true
			}
		case c == word[0]:
			m = 1 // "mutation" repeats no prefix but its first letter
		default:
			m = 0
		}
	}
	return false
}
