package classify

import "strings"

// MirrorCrates is crates.io: the sparse index and the crate files.
var MirrorCrates = register(&ecosystem{
	name:        "crates",
	grammar:     checkCrates,
	knownWrites: cratesKnownWrites,
	publish:     Probe{"PUT", "/api/v1/crates/new", "application/octet-stream", "\x00\x00\x00\x00"},
})

// cratesKnownWrites: cargo publish, yank and owner changes, and the token
// endpoints, all under /api/v1/ (registries other than crates.io use the
// same web API).
func cratesKnownWrites(r *Request, p *pgPath, _ *pgQuery, safe bool) (PageType, string) {
	if !p.is(0, "api") || !p.is(1, "v1") {
		return PageRead, ""
	}
	last := len(p.segs) - 1
	switch {
	case r.Host == "crates.io" && (p.is(2, "me") && p.is(3, "tokens") || p.is(2, "trusted_publishing")):
		return PageLogin, "known:crates-token"
	case safe || !p.is(2, "crates"):
	case p.is(3, "new"), p.is(last, "yank"), p.is(last, "unyank"):
		return PagePublish, "known:crates-publish"
	case p.is(last, "owners"):
		return PageAdmin, "known:crates-owners"
	}
	return PageRead, ""
}

// crates.io: the sparse index with prefix directories that must match
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
