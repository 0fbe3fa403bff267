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
