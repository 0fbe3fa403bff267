package classify

// The words and tables page types are read with: host first labels,
// content and payment hosts, path word categories, namespace hosts,
// archive and static file extensions, and the query keys and actions that
// make a request a write. ClassifyPage only reads them.

var pgPlainChars = func() (t [256]bool) {
	for _, c := range []byte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~!$&'()*+,=:@/") {
		t[c] = true
	}
	return t
}()

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

var pgNewAfter = map[string]bool{"issues": true, "pulls": true, "pull": true, "merge_requests": true,
	"discussions": true, "questions": true, "topics": true, "threads": true, "posts": true, "releases": true}

var pgStaticExts = []string{".js", ".mjs", ".css", ".png", ".jpg", ".jpeg", ".gif", ".svg", ".ico",
	".webp", ".avif", ".woff", ".woff2", ".ttf", ".map"}

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
