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
	if why := cratesAPIWrite(s, c.read); why != "" {
		return mdeny(why)
	}
	if !c.read {
		return mdeny(methodReason(c.r.Method))
	}
	if c.r.Query != "" {
		return mdeny(rNoQuery)
	}
	if !c.p.dir && len(s) > 0 && (cratesIndexPath(s) || cratesFilePath(s)) {
		return mallow
	}
	return mdeny("crates: path outside download grammar")
}

// cratesAPIWrite names the /api/v1/ token, publish, yank and owner
// endpoints s is, or returns "". Reading the owner list is a read.
func cratesAPIWrite(s []string, read bool) string {
	n := len(s)
	if n < 3 || s[0] != "api" || s[1] != "v1" {
		return ""
	}
	switch {
	case s[2] == "me":
		return "crates token/account: /api/v1/me/"
	case s[2] == "trusted_publishing":
		return "crates trusted-publishing token: /api/v1/trusted_publishing/"
	case s[2] != "crates":
		return ""
	case n == 4 && s[3] == "new":
		return "crates publish: PUT /api/v1/crates/new"
	case n == 6 && s[5] == "yank":
		return "crates yank: DELETE /api/v1/crates/<name>/<version>/yank"
	case n == 6 && s[5] == "unyank":
		return "crates unyank: PUT /api/v1/crates/<name>/<version>/unyank"
	case n == 5 && s[4] == "owners" && !read:
		return "crates owner change: /api/v1/crates/<name>/owners"
	}
	return ""
}

// cratesIndexPath reports whether s is config.json or a sparse-index file
// under the prefix directories its name implies (1/, 2/, 3/<c>/, <ab>/<cd>/).
func cratesIndexPath(s []string) bool {
	switch n := len(s); {
	case n == 1:
		return s[0] == "config.json"
	case n == 2 && s[0] == "1":
		return len(s[1]) == 1 && csCrateIdx.span(s[1], 1)
	case n == 2 && s[0] == "2":
		return len(s[1]) == 2 && csCrateIdx.span(s[1], 2)
	case n != 3:
		return false
	case s[0] == "3" && len(s[1]) == 1 && len(s[2]) == 3 && s[2][0] == s[1][0] && csCrateIdx.span(s[2], 3):
		return true
	}
	return len(s[0]) == 2 && len(s[1]) == 2 && len(s[2]) >= 4 &&
		s[2][:2] == s[0] && s[2][2:4] == s[1] && csCrateIdx.span(s[2], 64)
}

// cratesFilePath reports whether s is a crate file or a download redirect.
func cratesFilePath(s []string) bool {
	switch len(s) {
	case 3:
		return s[0] == "crates" && isCrateName(s[1]) && crateFile(s[2], s[1])
	case 4:
		// crates.io's config.json "dl" has no {crate} marker, so cargo
		// appends /{crate}/{version}/download (Cargo registry index docs).
		return s[0] == "crates" && isCrateName(s[1]) && isSemver(s[2], csSemverTail) && s[3] == "download"
	case 6:
		return s[0] == "api" && s[1] == "v1" && s[2] == "crates" && isCrateName(s[3]) &&
			isSemver(s[4], csSemverTail) && s[5] == "download"
	}
	return false
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
