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
