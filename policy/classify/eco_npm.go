package classify

import "strings"

// MirrorNPM is the npm registry protocol.
var MirrorNPM = register(&ecosystem{
	name:        "npm",
	grammar:     checkNPM,
	knownWrites: npmKnownWrites,
	headers:     []string{"Npm-Command", "Npm-Session", "Npm-Scope", "Npm-In-Ci", "Npm-Auth-Type", "Referer", "Pacote-Version", "Pacote-Req-Type", "Pacote-Pkg-Id", "Pacote-Integrity"},
	publish:     Probe{"PUT", "/egressd-selftest", "application/json", `{"name":"egressd-selftest","versions":{}}`},
	maxQuery:    256, // npm search's query; every other npm read has none
})

// npmKnownWrites: npm registries (the public one and its mirrors live on a
// host named registry.<domain>) keep their account API under /-/, and take
// publish, dist-tag and unpublish as writes to the package URL.
func npmKnownWrites(r *Request, p *pgPath, q *pgQuery, safe bool) (PageType, string) {
	if q.writeTrue {
		return PagePublish, "query:write=true" // npm reads the packument this way only to PUT it back
	}
	if !strings.HasPrefix(r.Host, "registry.") {
		return PageRead, ""
	}
	dash := p.is(0, "-")
	if dash && (p.is(1, "user") || p.is(1, "v1") && p.is(2, "login") ||
		p.is(1, "npm") && p.is(2, "v1") && (p.is(3, "tokens") || p.is(3, "oidc") || p.is(3, "user"))) {
		return PageLogin, "known:npm-login"
	}
	if !safe && !(dash && p.is(1, "npm")) {
		return PagePublish, "known:npm-publish" // PUT /<pkg>, dist-tags, unpublish
	}
	return PageRead, ""
}

// npm: packuments, version manifests, tarballs whose file name repeats
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
	// (publish retry, deprecate, owner, dist-tag).
	for q := c.r.Query; q != ""; {
		var k string
		k, _, q = cutParam(q)
		if k == "write" {
			return mdeny("npm write fetch: ?write=true")
		}
	}
	if s[0] == "auth" && c.o != nil && strings.Contains(c.o.BasePath, "/api/npm/") {
		// Artifactory answers GET <repo>/auth[/<scope>] with the
		// caller's credentials as .npmrc lines.
		return mdeny("artifactory npm credentials: /auth")
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
	if !c.p.dir && npmReadPath(s[0], name, rest) {
		return mallow
	}
	return mdeny("npm: path outside download grammar")
}

// npmReadPath reports whether rest, after the package (first segment
// first, name without its scope), is the packument, a version manifest or
// the package's tarball.
func npmReadPath(first, name string, rest []string) bool {
	switch len(rest) {
	case 0:
		return true
	case 1:
		return rest[0][0] != '-' && csNPMVer.span(rest[0], 64)
	case 2:
		return rest[0] == "-" && npmTarball(rest[1], name)
	case 3:
		// GitLab names a scoped tarball /@scope/name/-/@scope/name-1.0.0.tgz.
		return rest[0] == "-" && first[0] == '@' && rest[1] == first && npmTarball(rest[2], name)
	}
	return false
}

func checkNPMDash(c *mirrorCheck, s []string) MirrorVerdict {
	if len(s) < 2 {
		return mdeny("npm: /-/ endpoint outside download grammar")
	}
	if v, ok := npmDashRead(c, s); ok {
		return v
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

// isNPMName accepts [A-Za-z0-9~-][A-Za-z0-9._~-]*. The registry allows lower case
// only; legacy names such as JSONStream still carry capitals.
func isNPMName(s string, max int) bool {
	return csNPMName.span(s, max) && s[0] != '.' && s[0] != '_'
}

// npmTarball checks <name>-<version>.tgz for the package <name>: the file
// name adds no free text.
func npmTarball(file, name string) bool {
	v, ok := strings.CutPrefix(file, name)
	if !ok || len(v) < 2 || v[0] != '-' {
		return false
	}
	v, ok = strings.CutSuffix(v[1:], ".tgz")
	return ok && v != "" && csDigit[v[0]] && csNPMVer.span(v, 64)
}

// npmSearchKeys are the query keys `npm search` sends (libnpmsearch).
var npmSearchKeys = [...]string{"text", "size", "from", "quality", "popularity", "maintenance"}

// npmDashRead decides the /-/ reads real clients make besides installs:
// `npm ping` (/-/ping), the signature and provenance checks of `npm audit
// signatures` and `npm install` (/-/npm/v1/keys,
// /-/npm/v1/attestations/<pkg>@<version>) and `npm search` (/-/v1/search,
// allowed: its text goes to the registry the rule already trusts with
// package names of up to 214 bytes, and the rule's query cap bounds it).
// ok is false when s is none of them.
func npmDashRead(c *mirrorCheck, s []string) (MirrorVerdict, bool) {
	var known bool
	switch {
	case len(s) == 2 && s[1] == "ping":
		known = true
	case len(s) == 4 && s[1] == "npm" && s[2] == "v1" && s[3] == "keys":
		known = true
	case len(s) >= 5 && s[1] == "npm" && s[2] == "v1" && s[3] == "attestations":
		if !npmAttestation(s[4:]) {
			return mdeny("npm: attestations path outside download grammar"), true
		}
		known = true
	case len(s) == 3 && s[1] == "v1" && s[2] == "search":
		if !c.read {
			return mdeny(methodReason(c.r.Method)), true
		}
		if c.p.dir || !npmSearchQuery(c.r.Query) {
			return mdeny("npm search: query outside text, size, from, quality, popularity, maintenance"), true
		}
		return mallow, true
	}
	if !known {
		return MirrorVerdict{}, false
	}
	switch {
	case !c.read:
		return mdeny(methodReason(c.r.Method)), true
	case c.r.Query != "":
		return mdeny(rNoQuery), true
	case c.p.dir:
		return mdeny("npm: /-/ endpoint outside download grammar"), true
	}
	return mallow, true
}

// npmAttestation checks <pkg>@<version>; a scoped package's escaped
// slash was decoded by the path parser, so "@scope/name@1.0.0" arrives as
// two segments.
func npmAttestation(s []string) bool {
	last := s[len(s)-1]
	at := strings.LastIndexByte(last, '@')
	if at <= 0 || at+1 >= len(last) || !csDigit[last[at+1]] || !csNPMVer.span(last[at+1:], 64) {
		return false
	}
	pkg := append(s[:len(s)-1:len(s)-1], last[:at])
	_, rest, ok := npmPackage(pkg)
	return ok && len(rest) == 0
}

// npmSearchQuery reports whether q holds only the keys npm search sends,
// each at most once, with text non-empty.
func npmSearchQuery(q string) bool {
	var seen [len(npmSearchKeys)]bool
	for q != "" {
		var k, v string
		k, v, q = cutParam(q)
		i := 0
		for i < len(npmSearchKeys) && npmSearchKeys[i] != k {
			i++
		}
		if i == len(npmSearchKeys) || seen[i] || i == 0 && v == "" {
			return false
		}
		seen[i] = true
	}
	return seen[0]
}
