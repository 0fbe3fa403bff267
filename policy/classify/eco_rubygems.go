package classify

import "strings"

// MirrorRubyGems is rubygems.org and its mirrors.
var MirrorRubyGems = register(&ecosystem{
	name:        "rubygems",
	grammar:     checkRubyGems,
	knownWrites: rubygemsKnownWrites,
	publish:     Probe{"POST", "/api/v1/gems", "application/octet-stream", "egressd-selftest"},
	maxQuery:    1024, // /api/v1/dependencies?gems=a,b,...: Bundler asks for 50 names at a time
})

// rubygemsKnownWrites: gem push, yank and owners under /api/v1/gems, and
// GET /api/v1/api_key, which returns the account's key.
func rubygemsKnownWrites(r *Request, p *pgPath, _ *pgQuery, safe bool) (PageType, string) {
	if !p.is(0, "api") || !p.is(1, "v1") {
		return PageRead, ""
	}
	switch {
	case p.is(2, "api_key"), p.is(2, "api_key.json"):
		if r.Host == "rubygems.org" || !safe {
			return PageLogin, "known:rubygems-api-key"
		}
	case safe || !p.is(2, "gems"):
	case p.is(len(p.segs)-1, "owners"):
		return PageAdmin, "known:rubygems-owners"
	default:
		return PagePublish, "known:rubygems-push"
	}
	return PageRead, ""
}

// RubyGems: compact index, gem files, the legacy full index and the
// Bundler dependency API. GET /api/v1/api_key returns the account's key.

func checkRubyGems(c *mirrorCheck) MirrorVerdict {
	s := c.segs()
	n := len(s)
	if why := rubyGemsAPIWrite(s, c.read); why != "" {
		return mdeny(why)
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
	if !c.p.dir && rubyGemsFile(s) {
		return mallow
	}
	return mdeny("rubygems: path outside download grammar")
}

// rubyGemsAPIWrite names the /api/v1/ key, push, yank, owner, webhook and
// token endpoints s is, or returns "".
func rubyGemsAPIWrite(s []string, read bool) string {
	n := len(s)
	if n < 3 || s[0] != "api" || s[1] != "v1" {
		return ""
	}
	switch {
	case s[2] == "api_key" || strings.HasPrefix(s[2], "api_key."):
		return "rubygems api_key fetch: GET /api/v1/api_key"
	case s[2] == "gems" && n == 3 && !read:
		return "rubygems push: POST /api/v1/gems"
	case s[2] == "gems" && n == 4 && s[3] == "yank":
		return "rubygems yank: DELETE /api/v1/gems/yank"
	case s[2] == "gems" && n == 5 && strings.HasPrefix(s[4], "owners"):
		return "rubygems owner change: /api/v1/gems/<name>/owners"
	case s[2] == "web_hooks":
		return "rubygems webhook: /api/v1/web_hooks"
	case s[2] == "oidc":
		return "rubygems trusted-publishing token: /api/v1/oidc/"
	}
	return ""
}

// rubyGemsFile reports whether s is a compact or legacy index file, a gem
// or a gemspec.
func rubyGemsFile(s []string) bool {
	switch n := len(s); {
	case n == 1:
		switch s[0] {
		case "versions", "names",
			"specs.4.8", "specs.4.8.gz", "latest_specs.4.8", "latest_specs.4.8.gz",
			"prerelease_specs.4.8", "prerelease_specs.4.8.gz":
			return true
		}
	case n == 2 && s[0] == "info":
		return csGem.span(s[1], 100)
	case n == 2 && s[0] == "gems":
		g, ok := strings.CutSuffix(s[1], ".gem")
		return ok && csGem.span(g, 150)
	case n == 3 && s[0] == "quick" && s[1] == "Marshal.4.8":
		g, ok := strings.CutSuffix(s[2], ".gemspec.rz")
		return ok && csGem.span(g, 150)
	}
	return false
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
