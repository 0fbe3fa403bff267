package classify

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// pageCase is one real request. n is the Content-Length; 0 means "100 when
// ct is set, else no body".
type pageCase struct {
	method, url, ct string
	n               int64
	want            PageType
}

const (
	ctJSON = "application/json"
	ctForm = "application/x-www-form-urlencoded"
	ctMP   = "multipart/form-data; boundary=x"
	ctBin  = "application/octet-stream"
)

var pageCases = []pageCase{
	// GitHub web
	{"GET", "https://github.com/", "", 0, PageRead},
	{"GET", "https://github.com/golang/go", "", 0, PageRead},
	{"HEAD", "https://github.com/golang/go", "", 0, PageRead},
	{"GET", "https://github.com/golang/go/blob/master/src/net/http/server.go", "", 0, PageRead},
	{"GET", "https://github.com/hashicorp/vault/tree/main/builtin/credential/oauth", "", 0, PageRead},
	{"GET", "https://github.com/oauth2-proxy/oauth2-proxy", "", 0, PageRead},
	{"GET", "https://github.com/ory/kratos/blob/master/selfservice/flow/login/handler.go", "", 0, PageRead},
	{"GET", "https://github.com/example/login-service", "", 0, PageRead},
	{"GET", "https://github.com/example/admin-dashboard/issues", "", 0, PageRead},
	{"GET", "https://github.com/golang/go/issues/12345", "", 0, PageRead},
	{"GET", "https://github.com/golang/go/pull/1/files", "", 0, PageRead},
	{"GET", "https://github.com/topics/login", "", 0, PageRead},
	{"GET", "https://github.com/golang/go/blob/master/wp-login.php", "", 0, PageRead},
	{"GET", "https://raw.githubusercontent.com/golang/go/master/README.md", "", 0, PageRead},
	{"GET", "https://github.com/golang/go/issues/new", "", 0, PagePosting},
	{"GET", "https://github.com/golang/go/issues/new/choose", "", 0, PagePosting},
	{"GET", "https://github.com/new", "", 0, PagePosting},
	{"GET", "https://github.com/cli/cli/releases/download/v2.40.0/gh_2.40.0_linux_amd64.tar.gz", "", 0, PageDownload},
	{"GET", "https://github.com/cli/cli/archive/refs/tags/v2.40.0.tar.gz", "", 0, PageDownload},
	{"GET", "https://codeload.github.com/cli/cli/tar.gz/refs/tags/v2.40.0", "", 0, PageDownload},
	{"GET", "https://github.com/login", "", 0, PageLogin},
	{"POST", "https://github.com/session", ctForm, 0, PageLogin},
	{"GET", "https://github.com/signup", "", 0, PageLogin},
	{"GET", "https://github.com/login/oauth/authorize?client_id=abc123&scope=repo", "", 0, PageOAuth},
	{"POST", "https://github.com/login/oauth/access_token", ctForm, 0, PageOAuth},
	{"POST", "https://github.com/login/device/code", ctForm, 0, PageOAuth},
	{"GET", "https://github.com/settings/profile", "", 0, PageAdmin},
	{"GET", "https://github.com/settings/tokens", "", 0, PageAdmin},
	{"GET", "https://github.com/golang/go/settings", "", 0, PageAdmin},
	{"GET", "https://github.com/sponsors/octocat", "", 0, PagePayment},
	{"POST", "https://github.com/golang/go/upload/main", ctMP, 0, PageUpload},
	{"GET", "https://gist.github.com/octocat/aa5a315d61ae9438b18d", "", 0, PageRead},
	{"POST", "https://gist.github.com/", ctForm, 0, PagePosting},

	// GitHub API
	{"GET", "https://api.github.com/repos/golang/go", "", 0, PageRead},
	{"GET", "https://api.github.com/repos/example/admin-tools", "", 0, PageRead},
	{"GET", "https://api.github.com/repos/golang/go/issues?state=open", "", 0, PageRead},
	{"GET", "https://api.github.com/search/repositories?q=login", "", 0, PageRead},
	{"GET", "https://api.github.com/user", "", 0, PageRead},
	{"OPTIONS", "https://api.github.com/repos/golang/go", "", 0, PageRead},
	{"POST", "https://api.github.com/repos/golang/go/issues", ctJSON, 0, PagePosting},
	{"POST", "https://api.github.com/repos/golang/go/issues/1/comments", ctJSON, 0, PagePosting},
	{"POST", "https://api.github.com/repos/golang/go/pulls/1/reviews", ctJSON, 0, PagePosting},
	{"PATCH", "https://api.github.com/repos/golang/go/issues/1", ctJSON, 0, PagePosting},
	{"DELETE", "https://api.github.com/repos/golang/go/issues/comments/1", "", 0, PagePosting},
	{"POST", "https://api.github.com/gists", ctJSON, 0, PagePosting},
	{"POST", "https://api.github.com/graphql", ctJSON, 0, PagePosting},
	{"POST", "https://uploads.github.com/repos/cli/cli/releases/1/assets?name=gh.tar.gz", ctBin, 0, PageUpload},
	{"POST", "https://api.github.com/repos/cli/cli/releases", ctJSON, 0, PagePublish},
	{"POST", "https://api.github.com/repos/golang/go/git/refs", ctJSON, 0, PagePublish},
	{"PUT", "https://api.github.com/repos/golang/go/collaborators/bob", "", 0, PageAdmin},
	{"PUT", "https://api.github.com/repos/golang/go/contents/README.md", ctJSON, 0, PageUpload},

	// GitLab
	{"GET", "https://gitlab.com/gitlab-org/gitlab", "", 0, PageRead},
	{"GET", "https://gitlab.com/gitlab-org/gitlab/-/blob/master/app/controllers/admin/users_controller.rb", "", 0, PageRead},
	{"GET", "https://gitlab.com/gitlab-org/gitlab-runner/-/releases", "", 0, PageRead},
	{"GET", "https://gitlab.com/gitlab-org/gitlab/-/issues/new", "", 0, PagePosting},
	{"GET", "https://gitlab.com/users/sign_in", "", 0, PageLogin},
	{"GET", "https://gitlab.com/-/user_settings/personal_access_tokens", "", 0, PageAdmin},
	{"GET", "https://gitlab.com/oauth/authorize?client_id=x&redirect_uri=https%3A%2F%2Fa.example%2Fcb&response_type=code", "", 0, PageOAuth},
	{"POST", "https://gitlab.com/api/v4/projects/278964/issues", ctJSON, 0, PagePosting},
	{"POST", "https://gitlab.com/api/v4/projects/1/merge_requests/1/notes", ctJSON, 0, PagePosting},
	{"POST", "https://gitlab.com/api/v4/projects/278964/uploads", ctMP, 0, PageUpload},
	{"PUT", "https://gitlab.com/api/v4/projects/1/packages/generic/pkg/1.0.0/file.tar.gz", ctBin, 0, PageUpload},

	// Google
	{"GET", "https://accounts.google.com/ServiceLogin?service=mail", "", 0, PageLogin},
	{"GET", "https://accounts.google.com/o/oauth2/v2/auth?client_id=x&response_type=code&redirect_uri=y&scope=email", "", 0, PageOAuth},
	{"POST", "https://oauth2.googleapis.com/token", ctForm, 0, PageOAuth},
	{"GET", "https://myaccount.google.com/security", "", 0, PageAdmin},
	{"GET", "https://console.cloud.google.com/iam-admin/iam", "", 0, PageAdmin},
	{"POST", "https://www.googleapis.com/upload/drive/v3/files?uploadType=multipart", "multipart/related; boundary=b", 0, PageUpload},
	{"GET", "https://docs.google.com/forms/d/e/1FAIpQLSf/formResponse?entry.123=secret&submit=Submit", "", 0, PagePosting},
	{"GET", "https://www.google.com/search?q=oauth+login", "", 0, PageRead},
	{"GET", "https://developers.google.com/identity/protocols/oauth2", "", 0, PageRead},
	{"GET", "https://support.google.com/accounts/answer/185833", "", 0, PageRead},

	// Stack Overflow / Stack Exchange
	{"GET", "https://stackoverflow.com/questions/11227809/why-is-processing-a-sorted-array-faster", "", 0, PageRead},
	{"GET", "https://stackoverflow.com/questions/1234/how-to-implement-oauth-login-in-go", "", 0, PageRead},
	{"GET", "https://stackoverflow.com/questions/tagged/oauth-2.0", "", 0, PageRead},
	{"GET", "https://api.stackexchange.com/2.3/questions?site=stackoverflow", "", 0, PageRead},
	{"GET", "https://stackoverflow.com/questions/ask", "", 0, PagePosting},
	{"POST", "https://stackoverflow.com/questions/11227809/answer/submit", ctForm, 0, PagePosting},
	{"POST", "https://stackoverflow.com/posts/11227809/comments", ctForm, 0, PagePosting},
	{"GET", "https://stackoverflow.com/users/login", "", 0, PageLogin},
	{"GET", "https://api.stackexchange.com/2.3/access-tokens/abc/invalidate", "", 0, PageAdmin},

	// Reddit
	{"GET", "https://www.reddit.com/r/golang/", "", 0, PageRead},
	{"GET", "https://www.reddit.com/r/golang/comments/1abcde/how_do_you_handle_login_sessions/", "", 0, PageRead},
	{"GET", "https://oauth.reddit.com/r/golang/hot", "", 0, PageRead},
	{"GET", "https://www.reddit.com/r/golang/submit", "", 0, PagePosting},
	{"POST", "https://oauth.reddit.com/api/submit", ctForm, 0, PagePosting},
	{"POST", "https://www.reddit.com/api/comment", ctForm, 0, PagePosting},
	{"GET", "https://www.reddit.com/login/", "", 0, PageLogin},
	{"GET", "https://www.reddit.com/api/v1/authorize?client_id=x&response_type=code&state=s&redirect_uri=y&scope=read", "", 0, PageOAuth},
	{"POST", "https://www.reddit.com/api/v1/access_token", ctForm, 0, PageOAuth},

	// WordPress
	{"GET", "https://example.com/2024/01/15/hello-world/", "", 0, PageRead},
	{"GET", "https://example.com/wp-content/uploads/2024/01/photo.jpg", "", 0, PageRead},
	{"GET", "https://example.com/wp-json/wp/v2/posts", "", 0, PageRead},
	{"GET", "https://example.com/wp-login.php", "", 0, PageLogin},
	{"POST", "https://example.com/wp-login.php", ctForm, 0, PageLogin},
	{"GET", "https://example.com/wp-admin/", "", 0, PageAdmin},
	{"GET", "https://example.com/wp-admin/post-new.php", "", 0, PagePosting},
	{"POST", "https://example.com/xmlrpc.php", "text/xml", 0, PagePosting},
	{"POST", "https://example.com/wp-json/wp/v2/posts", ctJSON, 0, PagePosting},
	{"POST", "https://example.com/wp-comments-post.php", ctForm, 0, PagePosting},
	{"POST", "https://example.com/wp-json/wp/v2/media", "image/jpeg", 0, PageUpload},
	{"POST", "https://example.com/wp-admin/async-upload.php", ctMP, 0, PageUpload},

	// Jira / Confluence
	{"GET", "https://acme.atlassian.net/browse/PROJ-123", "", 0, PageRead},
	{"GET", "https://acme.atlassian.net/rest/api/2/search?jql=project%3DPROJ", "", 0, PageRead},
	{"GET", "https://acme.atlassian.net/wiki/spaces/ENG/pages/123456/Login+Flow+Design", "", 0, PageRead},
	{"POST", "https://acme.atlassian.net/rest/api/2/search", ctJSON, 200, PageRead},
	{"POST", "https://acme.atlassian.net/rest/api/3/search/jql", ctJSON, 200, PageRead},
	{"POST", "https://jira.example.com/rest/api/2/search", ctJSON, 2 << 20, PagePosting}, // over the body cap
	{"POST", "https://jira.example.com/rest/api/2/search", ctJSON, -1, PagePosting},      // chunked: length unknown
	{"POST", "https://jira.example.com/rest/api/2/search", ctForm, 200, PagePosting},     // not the search body type
	{"POST", "https://jira.example.com/rest/api/2/Search", ctJSON, 200, PagePosting},     // not the spelling on the list
	{"POST", "https://jira.example.com/rest/api/2/search/../../2/issue", ctJSON, 200, PagePosting},
	{"POST", "https://jira.example.com/rest/api/2/%73earch", ctJSON, 200, PagePosting},
	{"PUT", "https://jira.example.com/rest/api/2/search", ctJSON, 200, PagePosting},
	{"POST", "https://jira.example.com/rest/api/2/search?_method=DELETE", ctJSON, 200, PagePosting},
	{"POST", "https://central.sonatype.com/api/v1/publisher/status?id=abc", "", 0, PageRead},
	{"POST", "https://central.sonatype.com/api/v1/publisher/status?id=abc&name=x", "", 0, PagePublish},
	{"POST", "https://central.sonatype.com/api/v1/publisher/status?id=abc", ctJSON, 10, PagePublish},
	{"POST", "https://acme.atlassian.net/rest/api/3/issue", ctJSON, 0, PagePosting},
	{"POST", "https://acme.atlassian.net/rest/api/2/issue/PROJ-1/comment", ctJSON, 0, PagePosting},
	{"POST", "https://acme.atlassian.net/rest/api/2/issue/PROJ-1/attachments", ctMP, 0, PageUpload},
	{"POST", "https://acme.atlassian.net/wiki/rest/api/content", ctJSON, 0, PagePosting},
	{"GET", "https://acme.atlassian.net/secure/CreateIssue!default.jspa", "", 0, PagePosting},
	{"GET", "https://id.atlassian.com/login", "", 0, PageLogin},

	// Hugging Face
	{"GET", "https://huggingface.co/meta-llama/Llama-3.1-8B", "", 0, PageRead},
	{"GET", "https://huggingface.co/datasets/openai/gsm8k", "", 0, PageRead},
	{"GET", "https://huggingface.co/api/models/openai-community/gpt2", "", 0, PageRead},
	{"GET", "https://huggingface.co/docs/hub/oauth", "", 0, PageRead},
	{"GET", "https://huggingface.co/openai-community/gpt2/resolve/main/config.json", "", 0, PageDownload},
	{"POST", "https://huggingface.co/api/models/openai-community/gpt2/paths-info/main", ctForm, 300, PageRead},
	{"POST", "https://huggingface.co/api/models/me/my-model/preupload/main", ctJSON, 0, PageUpload},
	{"POST", "https://huggingface.co/api/models/me/my-model/commit/main", "application/x-ndjson", 0, PagePublish},
	{"POST", "https://huggingface.co/api/repos/create", ctJSON, 0, PagePublish},
	{"GET", "https://huggingface.co/api/models/me/my-model/xet-write-token/main", "", 0, PageLogin},
	{"POST", "https://huggingface.co/api/models/me/my-model/discussions", ctJSON, 0, PagePosting},
	{"GET", "https://huggingface.co/login", "", 0, PageLogin},
	{"GET", "https://huggingface.co/settings/tokens", "", 0, PageAdmin},
	{"GET", "https://huggingface.co/oauth/authorize?client_id=x&redirect_uri=y&response_type=code", "", 0, PageOAuth},

	// Slack and Discord
	{"POST", "https://hooks.slack.com/services/T000/B000/XXXX", ctJSON, 0, PagePosting},
	{"POST", "https://slack.com/api/chat.postMessage", ctJSON, 0, PagePosting},
	{"GET", "https://slack.com/api/chat.postMessage?channel=C1&text=hi", "", 0, PagePosting},
	{"GET", "https://slack.com/api/conversations.history?channel=C1", "", 0, PageRead},
	{"POST", "https://slack.com/api/files.getUploadURLExternal", ctForm, 0, PageUpload},
	{"POST", "https://slack.com/api/oauth.v2.access", ctForm, 0, PageOAuth},
	{"GET", "https://api.slack.com/messaging/webhooks", "", 0, PageRead},
	{"GET", "https://discord.com/api/webhooks/123/abc", "", 0, PageRead},
	{"POST", "https://discord.com/api/webhooks/123/abc", ctJSON, 0, PagePosting},
	{"POST", "https://discord.com/api/webhooks/123/abc", ctMP, 0, PageUpload},
	{"POST", "https://discord.com/api/v10/channels/1/messages", ctJSON, 0, PagePosting},

	// Paste sites
	{"GET", "https://pastebin.com/raw/abc123", "", 0, PageRead},
	{"GET", "https://paste.ee/p/abc", "", 0, PageRead},
	{"POST", "https://pastebin.com/api/api_post.php", ctForm, 0, PagePosting},
	{"POST", "https://pastebin.com/api/api_login.php", ctForm, 0, PageLogin},
	{"POST", "https://api.paste.ee/v1/pastes", ctJSON, 0, PagePosting},
	{"POST", "https://dpaste.com/api/v2/", ctForm, 0, PagePosting},
	{"POST", "http://ix.io/", ctMP, 0, PageUpload},
	{"POST", "https://0x0.st/", ctMP, 0, PageUpload},
	{"PUT", "https://transfer.sh/hello.txt", "text/plain", 12, PageUpload},
	{"PUT", "https://transfer.sh/hello.txt", "", -1, PageUpload},

	// Payments
	{"GET", "https://checkout.stripe.com/c/pay/cs_test_a1b2", "", 0, PagePayment},
	{"GET", "https://buy.stripe.com/test_123", "", 0, PagePayment},
	{"POST", "https://api.stripe.com/v1/payment_intents", ctForm, 0, PagePayment},
	{"GET", "https://www.paypal.com/checkoutnow?token=x", "", 0, PagePayment},
	{"GET", "https://stripe.com/docs/payments/checkout", "", 0, PageRead},
	{"GET", "https://js.stripe.com/v3/", "", 0, PageRead},
	{"GET", "https://dashboard.stripe.com/settings", "", 0, PageAdmin},

	// Package registries
	{"GET", "https://pypi.org/project/requests/", "", 0, PageRead},
	{"GET", "https://pypi.org/simple/requests/", "", 0, PageRead},
	{"GET", "https://files.pythonhosted.org/packages/70/8e/0e2d847013cb52cd35b38c009bb167a1a26b2ce6cd6965bf26b47bc0bf44/requests-2.31.0-py3-none-any.whl", "", 0, PageDownload},
	{"GET", "https://pypi.org/account/login/", "", 0, PageLogin},
	{"GET", "https://pypi.org/manage/account/token/", "", 0, PageAdmin},
	{"POST", "https://upload.pypi.org/legacy/", ctMP, 0, PagePublish},
	{"POST", "https://test.pypi.org/legacy/", ctMP, 0, PagePublish},
	{"POST", "https://pypi.org/_/oidc/mint-token", ctJSON, 0, PageLogin},
	{"GET", "https://registry.yarnpkg.com/express", "", 0, PageRead},
	{"GET", "https://www.npmjs.com/package/express", "", 0, PageRead},
	{"GET", "https://www.npmjs.com/package/passport-oauth2", "", 0, PageRead},
	{"GET", "https://pypi.org/project/flask-login/", "", 0, PageRead},
	{"GET", "https://crates.io/crates/oauth2", "", 0, PageRead},
	{"GET", "https://raw.githubusercontent.com/o/r/main/.vscode/settings.json", "", 0, PageRead},
	{"GET", "https://registry.yarnpkg.com/express/-/express-4.18.2.tgz", "", 0, PageDownload},
	{"PUT", "https://registry.yarnpkg.com/my-package", ctJSON, 0, PagePublish},
	{"DELETE", "https://registry.yarnpkg.com/my-package/-rev/3-abc", "", 0, PagePublish},
	{"GET", "https://registry.yarnpkg.com/my-package?write=true", "", 0, PagePublish},
	{"PUT", "https://registry.yarnpkg.com/-/user/org.couchdb.user:bob", ctJSON, 0, PageLogin},
	{"POST", "https://registry.yarnpkg.com/-/npm/v1/security/advisories/bulk", ctJSON, 0, PagePosting},
	{"GET", "https://static.crates.io/crates/serde/serde-1.0.200.crate", "", 0, PageDownload},
	{"PUT", "https://crates.io/api/v1/crates/new", ctBin, 0, PagePublish},
	{"POST", "https://rubygems.org/api/v1/gems", ctBin, 0, PagePublish},
	{"GET", "https://rubygems.org/api/v1/api_key.json", "", 0, PageLogin},
	{"GET", "https://repo.maven.apache.org/maven2/org/slf4j/slf4j-api/2.0.9/slf4j-api-2.0.9.jar", "", 0, PageDownload},
	{"PUT", "https://repo.maven.apache.org/maven2/org/slf4j/slf4j-api/2.0.9/slf4j-api-2.0.9.jar", "application/java-archive", 0, PageUpload},

	// Git and OCI
	{"GET", "https://github.com/golang/go.git/info/refs?service=git-upload-pack", "", 0, PageDownload},
	{"POST", "https://github.com/golang/go.git/git-upload-pack", "application/x-git-upload-pack-request", 0, PageDownload},
	{"POST", "https://github.com/golang/go.git/%67it-upload-pack", "application/x-git-upload-pack-request", 0, PageUpload}, // escaped: off the read-only list
	{"GET", "https://github.com/me/repo.git/info/refs?service=git-receive-pack", "", 0, PagePublish},
	{"GET", "https://github.com/me/repo.git/info/refs?service=git%2Dreceive%2Dpack", "", 0, PagePublish},
	{"POST", "https://github.com/me/repo.git/git-receive-pack", "application/x-git-receive-pack-request", 0, PagePublish},
	{"POST", "https://github.com/me/repo.git/info/lfs/objects/batch", "application/vnd.git-lfs+json", 0, PageUpload},
	{"GET", "https://ghcr.io/v2/owner/img/manifests/latest", "", 0, PageDownload},
	{"PUT", "https://ghcr.io/v2/owner/img/manifests/latest", "application/vnd.oci.image.manifest.v1+json", 0, PagePublish},
	{"POST", "https://registry-1.docker.io/v2/library/x/blobs/uploads/", "", 0, PageUpload},
	{"GET", "https://auth.docker.io/token?service=registry.docker.io&scope=repository:library/alpine:pull", "", 0, PageLogin},
	{"GET", "https://ghcr.io/token?scope=repository:me/img:pull,push", "", 0, PageLogin},

	// Documentation stays read
	{"GET", "https://docs.python.org/3/library/http.client.html", "", 0, PageRead},
	// content hosts keep a first segment that is an account function
	{"GET", "https://docs.example.com/login", "", 0, PageLogin},
	{"GET", "https://help.example.com/settings/profile", "", 0, PageAdmin},
	{"GET", "https://developer.example.com/oauth/authorize", "", 0, PageOAuth},
	{"GET", "https://docs.example.com/guide/login", "", 0, PageRead}, // a topic, not the function
	{"GET", "https://pkg.go.dev/net/http", "", 0, PageRead},
	{"GET", "https://pkg.go.dev/golang.org/x/oauth2", "", 0, PageRead},
	{"GET", "https://developer.mozilla.org/en-US/docs/Web/HTTP/Methods/POST", "", 0, PageRead},
	{"GET", "https://go.dev/doc/tutorial/getting-started", "", 0, PageRead},
	{"GET", "https://docs.rs/tokio/latest/tokio/", "", 0, PageRead},
	{"GET", "https://example.com/static/js/login.js", "", 0, PageRead},

	// MediaWiki
	{"GET", "https://en.wikipedia.org/wiki/OAuth", "", 0, PageRead},
	{"GET", "https://en.wikipedia.org/w/api.php?action=query&titles=Go&format=json", "", 0, PageRead},
	{"GET", "https://en.wikipedia.org/wiki/Special:UserLogin", "", 0, PageLogin},
	{"GET", "https://en.wikipedia.org/wiki/Special:Upload", "", 0, PageUpload},
	{"GET", "https://en.wikipedia.org/w/index.php?title=Special:UserLogin&returnto=Main_Page", "", 0, PageLogin},
	{"GET", "https://en.wikipedia.org/w/index.php?title=Go_(programming_language)&action=edit", "", 0, PagePosting},
	{"POST", "https://en.wikipedia.org/w/index.php?title=Go&action=submit", ctForm, 0, PagePosting},

	// Methods and bodies
	{"PROPFIND", "https://dav.example.com/files/", "", 0, PagePosting},
	{"MKCOL", "https://dav.example.com/files/new/", "", 0, PageUpload},
	{"get", "https://example.com/", "", 0, PagePosting}, // methods are case-sensitive
	{"", "https://example.com/", "", 0, PagePosting},
	{"GET", "https://example.com/search", ctJSON, 10, PagePosting},
	{"GET", "https://example.com/api/users/1?_method=DELETE", "", 0, PagePosting},
	{"GET", "https://example.com/graphql?query=%7Buser%28id%3A1%29%7Bname%7D%7D", "", 0, PageRead},
	{"GET", "https://example.com/graphql?query=mutation%7BdeleteUser%28id%3A1%29%7D", "", 0, PagePosting},

	// Spellings: escapes, case, dot segments, parameters, doubled slashes
	{"GET", "https://example.com/LOGIN", "", 0, PageLogin},
	{"GET", "https://example.com/%6C%6F%67%69%6E", "", 0, PageLogin},
	{"GET", "https://example.com/%254c%254fGIN", "", 0, PageLogin},
	{"GET", "https://example.com/docs/../login", "", 0, PageLogin},
	{"GET", "https://example.com/docs/%2e%2e/login", "", 0, PageLogin},
	{"GET", "https://example.com/docs/x%2F..%2F..%2Flogin", "", 0, PageLogin},
	{"GET", "https://example.com/docs/a/b/c/d/e/login", "", 0, PageRead},
	{"GET", "https://example.com//login//", "", 0, PageLogin},
	{"GET", "https://example.com/login;jsessionid=abc", "", 0, PageLogin},
	{"GET", "https://example.com/docs;x/..;/admin", "", 0, PageAdmin},
	{"GET", `https://example.com/docs\..\login`, "", 0, PageLogin},
	{"GET", "https://example.com/login%00.zip", "", 0, PageLogin},
	{"GET", "https://github.com/settings%2Ftokens", "", 0, PageAdmin},
	{"GET", "https://github.com/example/repo%2F..%2F..%2Flogin", "", 0, PageLogin},
	{"GET", "https://example.com/docs/%c0%ae%c0%ae/login", "", 0, PageLogin},
	{"GET", "https://example.com/docs/%u002e%u002e/login", "", 0, PageLogin},
	{"GET", "https://github.com/github-copilot/signup", "", 0, PageLogin},
	{"GET", "https://example.com/?%63lient_id=x&%72esponse_type=code", "", 0, PageOAuth},
}

// pageRequest splits a test URL without decoding it: ClassifyPage sees the
// path and query as sent.
func pageRequest(method, rawURL, ct string, n int64) *Request {
	rest := rawURL[strings.Index(rawURL, "://")+3:]
	host, path := rest, "/"
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		host, path = rest[:i], rest[i:]
	}
	path, query, _ := strings.Cut(path, "?")
	if path == "" {
		path = "/"
	}
	if n == 0 && ct != "" {
		n = 100
	}
	// The table classifies as a rule that opts in to every read-only POST
	// would; TestReadPostsNeedOptIn covers rules that do not.
	return &Request{Method: method, Host: host, Port: 443, Path: path, Query: query, ContentType: ct, ContentLength: n, ReadPosts: ReadPostNames()}
}

func TestClassifyPage(t *testing.T) {
	if len(pageCases) < 100 {
		t.Fatalf("got %d cases, want at least 100", len(pageCases))
	}
	for _, c := range pageCases {
		t.Run(c.method+" "+c.url, func(t *testing.T) {
			got, why := ClassifyPage(pageRequest(c.method, c.url, c.ct, c.n))
			if got != c.want {
				t.Errorf("ClassifyPage(%s %s, %q) = %v (%s), want %v", c.method, c.url, c.ct, got, why, c.want)
			}
			if why == "" {
				t.Errorf("ClassifyPage(%s %s) gave no signal", c.method, c.url)
			}
		})
	}
}

// TestClassifyPageSignals checks that a decision names the rule that fired.
func TestClassifyPageSignals(t *testing.T) {
	tests := []struct {
		name, method, url, ct string
		want                  PageType
		wantWhy               string
	}{
		{"host prefix", "GET", "https://accounts.google.com/", "", PageLogin, "host:accounts."},
		{"path word", "GET", "https://example.com/login", "", PageLogin, "path:login"},
		{"squashed words", "GET", "https://gitlab.com/users/sign_in", "", PageLogin, "path:signin"},
		{"camelCase verb", "POST", "https://slack.com/api/chat.postMessage", ctJSON, PagePosting, "path:post"},
		{"oauth query", "GET", "https://auth.example.com/x?client_id=a&response_type=code", "", PageOAuth, "query:client_id"},
		{"multipart", "POST", "https://example.com/api/v1/things", ctMP, PageUpload, "ctype:multipart"},
		{"binary", "POST", "https://example.com/api/v1/things", "image/png", PageUpload, "ctype:binary"},
		{"unknown POST", "POST", "https://example.com/api/v1/things", ctJSON, PagePosting, "method:POST-unknown"},
		{"unknown method", "PROPFIND", "https://example.com/", "", PagePosting, "method:unknown"},
		{"git push", "GET", "https://example.com/r.git/info/refs?service=git-receive-pack", "", PagePublish, "known:git-receive-pack"},
		{"read-only POST", "POST", "https://acme.atlassian.net/rest/api/2/search", ctJSON, PageRead, "readpost:jira-search"},
		{"archive", "GET", "https://files.pythonhosted.org/packages/a/b/c/x-1.0-py3-none-any.whl", "", PageDownload, "ext:.whl"},
		{"wiki action", "GET", "https://en.wikipedia.org/w/index.php?title=X&action=edit", "", PagePosting, "query:action=edit"},
		{"GET body", "GET", "https://example.com/", ctJSON, PagePosting, "body:GET"},
		{"default", "GET", "https://example.com/about", "", PageRead, "default"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := ClassifyPage(pageRequest(tt.method, tt.url, tt.ct, 0))
			if got != tt.want || why != tt.wantWhy {
				t.Errorf("ClassifyPage(%s %s) = %v, %q; want %v, %q", tt.method, tt.url, got, why, tt.want, tt.wantWhy)
			}
		})
	}
}

// readOnlyPOSTPaths re-states each readOnlyPOSTs entry's paths as an
// independent regular expression, so the fuzz invariant does not trust the
// matcher it checks. A new entry needs a line here (TestReadOnlyPOSTs).
var readOnlyPOSTPaths = func() map[string]*regexp.Regexp {
	const seg = `[A-Za-z0-9._~!$&'()*+,=:@-]+`
	return map[string]*regexp.Regexp{
		"readpost:git-upload-pack": regexp.MustCompile(`^(/` + seg + `)*/git-upload-pack$`),
		"readpost:jira-search":     regexp.MustCompile(`^(/` + seg + `)*/rest/api/` + seg + `/search(/jql)?$`),
		"readpost:hf-paths-info":   regexp.MustCompile(`^/api/` + seg + `/` + seg + `(/` + seg + `)?/paths-info/` + seg + `$`),
		"readpost:sonatype-status": regexp.MustCompile(`^/api/v1/publisher/status$`),
	}
}()

func TestReadOnlyPOSTs(t *testing.T) {
	seen := map[string]bool{}
	for _, e := range readOnlyPOSTs {
		if seen[e.ID] {
			t.Errorf("duplicate id %q", e.ID)
		}
		seen[e.ID] = true
		if readOnlyPOSTPaths[e.ID] == nil {
			t.Errorf("%s: no independent path pattern in readOnlyPOSTPaths", e.ID)
		}
		if e.Page != PageRead && e.Page != PageDownload {
			t.Errorf("%s: page %v, want read or download", e.ID, e.Page)
		}
		if e.ContentType == "" && e.MaxBody != 0 {
			t.Errorf("%s: a body of any type (MaxBody %d) needs a ContentType", e.ID, e.MaxBody)
		}
		if !strings.HasPrefix(e.ID, "readpost:") {
			t.Errorf("%s: id should start with readpost:", e.ID)
		}
	}
}

// onReadOnlyList independently checks that a non-GET request ClassifyPage
// called read or download is on readOnlyPOSTs, with the signal naming it.
func onReadOnlyList(r *Request, why string) bool {
	if r.Method != "POST" || r.ContentLength < 0 {
		return false
	}
	for _, seg := range strings.Split(r.Path, "/")[1:] {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
	}
	for _, e := range readOnlyPOSTs {
		if e.ID != why {
			continue
		}
		mt, _, _ := strings.Cut(r.ContentType, ";")
		if r.Query != "" {
			for _, kv := range strings.FieldsFunc(r.Query, func(c rune) bool { return c == '&' || c == ';' }) {
				k, _, _ := strings.Cut(kv, "=")
				if !slices.Contains(e.QueryKeys, k) {
					return false
				}
			}
		}
		return (e.Host == "" || e.Host == r.Host) && r.ContentLength <= e.MaxBody &&
			(e.ContentType == "" || strings.EqualFold(strings.TrimSpace(mt), e.ContentType)) &&
			readOnlyPOSTPaths[e.ID].MatchString(r.Path)
	}
	return false
}

// escapeAll percent-encodes every byte of s except '/'.
func escapeAll(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '/' {
			b.WriteByte('/')
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[s[i]>>4])
		b.WriteByte(hex[s[i]&15])
	}
	return b.String()
}

func FuzzClassifyPage(f *testing.F) {
	for _, c := range pageCases {
		r := pageRequest(c.method, c.url, c.ct, c.n)
		f.Add(r.Method, r.Host, r.Path, r.Query, r.ContentType, r.ContentLength)
	}
	f.Fuzz(func(t *testing.T, method, host, path, query, ct string, n int64) {
		r := &Request{Method: method, Host: host, Path: path, Query: query, ContentType: ct, ContentLength: n}
		got, why := ClassifyPage(r)
		if got.String() == "unknown" || why == "" {
			t.Fatalf("ClassifyPage(%+v) = %d, %q: want a valid type and a signal", r, got, why)
		}
		safe := method == "GET" || method == "HEAD" || method == "OPTIONS"
		if !safe && !got.IsWrite() && !onReadOnlyList(r, why) {
			t.Fatalf("ClassifyPage(%+v) = %v (%s): a %q request off the read-only list must be a write", r, got, why, method)
		}
		// Escaping never turns a write into a read.
		if got.IsWrite() && !strings.Contains(path, "%") {
			e := *r
			e.Path = escapeAll(path)
			if got2, why2 := ClassifyPage(&e); !got2.IsWrite() {
				t.Fatalf("path %q is %v (%s) but escaped %q is %v (%s)", path, got, why, e.Path, got2, why2)
			}
		}
	})
}

// TestSpellingsKeepWrites respells sensitive GET pages the ways servers
// normalize paths; none of the spellings may turn them into a read.
func TestSpellingsKeepWrites(t *testing.T) {
	paths := []string{"/login", "/wp-login.php", "/users/sign_in", "/settings/tokens", "/wp-admin/",
		"/checkout", "/oauth/authorize", "/upload", "/submit", "/account/login/", "/issues/new"}
	spellings := []struct {
		name string
		f    func(string) string
	}{
		{"as is", func(p string) string { return p }},
		{"upper case", strings.ToUpper},
		{"escaped", escapeAll},
		{"escaped twice", func(p string) string { return strings.ReplaceAll(escapeAll(p), "%", "%25") }},
		{"dot-dot from docs", func(p string) string { return "/docs/.." + p }},
		{"escaped dot-dot from docs", func(p string) string { return "/docs/%2e%2e" + p }},
		{"escaped slash dot-dot", func(p string) string { return "/docs/x%2F..%2F.." + p }},
		{"dot segment", func(p string) string { return "/." + p }},
		{"path parameter", func(p string) string { return p + ";jsessionid=1" }},
		{"doubled slashes", func(p string) string { return strings.ReplaceAll(p, "/", "//") }},
		{"backslashes", func(p string) string { return "/" + strings.ReplaceAll(p[1:], "/", `\`) }},
		{"trailing slash", func(p string) string { return p + "/" }},
	}
	for _, host := range []string{"example.com", "github.com"} {
		for _, p := range paths {
			for _, sp := range spellings {
				r := &Request{Method: "GET", Host: host, Path: sp.f(p)}
				if got, why := ClassifyPage(r); !got.IsWrite() {
					t.Errorf("%s: GET %s%s = %v (%s), want a write type like %s%s", sp.name, host, r.Path, got, why, host, p)
				}
			}
		}
	}
}

// TestClassifyPageAllocs holds the hot path to zero allocations for
// typical requests.
func TestClassifyPageAllocs(t *testing.T) {
	for _, r := range benchRequests() {
		if a := testing.AllocsPerRun(100, func() { ClassifyPage(r) }); a != 0 {
			t.Errorf("ClassifyPage(%s %s%s) allocates %v times per call, want 0", r.Method, r.Host, r.Path, a)
		}
	}
}

func benchRequests() []*Request {
	return []*Request{
		pageRequest("GET", "https://github.com/golang/go/blob/master/src/net/http/server.go", "", 0),
		pageRequest("GET", "https://pypi.org/simple/requests/", "", 0),
		pageRequest("GET", "https://www.google.com/search?q=oauth+login&hl=en&client=firefox", "", 0),
		pageRequest("POST", "https://api.github.com/repos/golang/go/issues/1/comments", ctJSON, 0),
		pageRequest("GET", "https://accounts.google.com/o/oauth2/v2/auth?client_id=x&response_type=code&redirect_uri=https%3A%2F%2Fa.example%2Fcb", "", 0),
		pageRequest("POST", "https://slack.com/api/chat.postMessage", ctJSON, 0),
		pageRequest("GET", "https://stackoverflow.com/questions/11227809/why-is-processing-a-sorted-array-faster-than-processing-an-unsorted-array", "", 0),
		pageRequest("POST", "https://github.com/golang/go.git/git-upload-pack", "application/x-git-upload-pack-request", 0),
	}
}

func BenchmarkClassifyPage(b *testing.B) {
	reqs := benchRequests()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		ClassifyPage(reqs[i%len(reqs)])
	}
}
