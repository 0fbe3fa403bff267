package classify

import "strings"

// MirrorGoProxy is the Go module proxy protocol and checksum database.
var MirrorGoProxy = register(&ecosystem{
	name:        "goproxy",
	grammar:     checkGoProxy,
	knownWrites: goproxyKnownWrites,
	publish:     Probe{"PUT", "/example.com/egressd-selftest/@v/v0.0.0.zip", "application/zip", "egressd-selftest"},
})

// goproxyKnownWrites: the protocol has no write, but repository managers
// that serve it (Artifactory, Nexus, Athens' upload API) take module
// uploads as a write to /<module>/@v/<version>.{zip,mod,info}.
func goproxyKnownWrites(_ *Request, p *pgPath, _ *pgQuery, safe bool) (PageType, string) {
	if !safe && p.index("@v") > 0 {
		return PagePublish, "known:goproxy-upload"
	}
	return PageRead, ""
}

// Go module proxy: /<module>/@v/list, /@v/<version>.info|.mod|.zip,
// /@latest, and the checksum database, direct or under /sumdb/<host>/.
// Paths are case-encoded ("!b" for "B"), so only lower case is valid. The
// protocol has no query and no write.

func checkGoProxy(c *mirrorCheck) MirrorVerdict {
	if !c.read {
		return mdeny(methodReason(c.r.Method))
	}
	if c.r.Query != "" {
		return mdeny(rNoQuery)
	}
	s := c.segs()
	n := len(s)
	if c.p.dir || n == 0 {
		return mdeny("goproxy: path outside download grammar")
	}
	switch s[0] {
	case "sumdb":
		// A proxy that forwarded other sumdb hosts would fetch from
		// any host the path names.
		if n < 3 || s[1] != "sum.golang.org" {
			return mdeny("goproxy: sumdb host must be sum.golang.org")
		}
		if n == 3 && s[2] == "supported" {
			return mallow
		}
		return checkSumDB(c, 2)
	case "lookup", "tile", "latest":
		return checkSumDB(c, 0)
	}
	k := 0
	for k < n && s[k][0] != '@' {
		k++
	}
	if k == 0 || k == n || !isGoModule(s[:k]) {
		return mdeny("goproxy: path outside download grammar")
	}
	if !goModuleFile(s[k:]) {
		return mdeny("goproxy: path outside download grammar")
	}
	if !c.modulePrefixOK(s[:k]) {
		return mdeny("goproxy: module outside module-prefixes")
	}
	return mallow
}

// goModuleFile reports whether s, from the module's "@" segment on, is
// @latest, @v/list, @v/<version>.info|.mod|.zip or @v/<commit>.info.
func goModuleFile(s []string) bool {
	switch {
	case len(s) == 1:
		return s[0] == "@latest"
	case len(s) == 2 && s[0] == "@v":
		return s[1] == "list" || isGoVersionFile(s[1]) || isGoCommitInfo(s[1])
	}
	return false
}

// checkSumDB checks /latest, /lookup/<module>@<version> and
// /tile/<H>/<L|data>/(x<NNN>/)*<NNN>[.p/<W>] starting at segment i.
func checkSumDB(c *mirrorCheck, i int) MirrorVerdict {
	s := c.segs()[i:]
	n := len(s)
	switch s[0] {
	case "latest":
		if n == 1 {
			return mallow
		}
	case "lookup":
		if n < 2 {
			break
		}
		mod, ver, ok := strings.Cut(s[n-1], "@")
		if !ok || !isGoVersion(ver) {
			break
		}
		// Reuse the segment array: the module is s[1:n-1] plus mod.
		s[n-1] = mod
		m := s[1:]
		if !isGoModule(m) {
			break
		}
		if !c.modulePrefixOK(m) {
			return mdeny("goproxy: module outside module-prefixes")
		}
		return mallow
	case "tile":
		if isSumDBTile(s[1:]) {
			return mallow
		}
	}
	return mdeny("goproxy: sumdb path outside download grammar")
}

func isSumDBTile(s []string) bool {
	if len(s) < 3 || !csDigit.span(s[0], 2) || s[1] != "data" && !csDigit.span(s[1], 2) {
		return false
	}
	s = s[2:]
	for len(s) > 1 && len(s[0]) == 4 && s[0][0] == 'x' && csDigit.span(s[0][1:], 3) {
		s = s[1:]
	}
	switch {
	case len(s) == 1:
		return len(s[0]) == 3 && csDigit.span(s[0], 3)
	case len(s) == 2:
		return len(s[0]) == 5 && csDigit.span(s[0][:3], 3) && s[0][3:] == ".p" && csDigit.span(s[1], 3)
	}
	return false
}

// isGoModule checks a case-encoded module path: the first element is a host
// name with a dot and an alphabetic top-level label, the rest are
// [a-z0-9._~-] with "!x" for an upper-case X.
func isGoModule(m []string) bool {
	h := m[0]
	dot := strings.LastIndexByte(h, '.')
	if !csGoHost.span(h, 128) || dot <= 0 || h[0] == '-' || len(h)-dot < 3 {
		return false
	}
	for i := dot + 1; i < len(h); i++ {
		if h[i] < 'a' || h[i] > 'z' {
			return false
		}
	}
	total := len(h)
	for _, e := range m[1:] {
		if !csGoElem.span(e, 128) || !goBangsOK(e) {
			return false
		}
		total += 1 + len(e)
	}
	return total <= 300
}

// goBangsOK reports whether every '!' in s starts a case-encoded letter.
func goBangsOK(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '!' && (i+1 == len(s) || s[i+1] < 'a' || s[i+1] > 'z') {
			return false
		}
	}
	return true
}

// isGoVersion accepts v<semver> with a case-encoded tail. Branch queries
// (@v/master.info) are denied: the version must not carry free text
// (commit hashes are isGoCommitInfo's).
func isGoVersion(v string) bool {
	if len(v) < 6 || v[0] != 'v' || len(v) > 128 {
		return false
	}
	return isSemver(v[1:], csGoVerTail) && goBangsOK(v)
}

// isGoCommitInfo accepts <commit>.info: `go get m@<commit>` asks the proxy
// to resolve a commit hash (7 to 40 hex digits, as typed) to a
// pseudo-version. A hash names one immutable commit; the .mod and .zip that
// follow use the pseudo-version. Branch and tag names stay denied: they are
// free text, and what they name moves.
func isGoCommitInfo(f string) bool {
	h, ok := strings.CutSuffix(f, ".info")
	return ok && len(h) >= 7 && len(h) <= 40 && csLowerHex.span(h, 40)
}

func isGoVersionFile(f string) bool {
	for _, ext := range [...]string{".info", ".mod", ".zip"} {
		if v, ok := strings.CutSuffix(f, ext); ok {
			return isGoVersion(v)
		}
	}
	return false
}

// modulePrefixOK reports whether the case-encoded module m lies under one of
// the configured prefixes, compared element by element.
func (c *mirrorCheck) modulePrefixOK(m []string) bool {
	if c.o == nil || len(c.o.ModulePrefixes) == 0 {
		return true
	}
	for _, p := range c.o.ModulePrefixes {
		if modulePrefixMatch(m, p) {
			return true
		}
	}
	return false
}

func modulePrefixMatch(m []string, prefix string) bool {
	if prefix == "" {
		return false
	}
	for i := 0; ; i++ {
		e, rest, more := strings.Cut(prefix, "/")
		if i == len(m) || !encodedEqual(m[i], e) {
			return false
		}
		if !more {
			return true
		}
		prefix = rest
	}
}

// encodedEqual reports whether enc is the case encoding of plain.
func encodedEqual(enc, plain string) bool {
	if plain == "" {
		return false
	}
	j := 0
	for i := 0; i < len(plain); i++ {
		c := plain[i]
		if 'A' <= c && c <= 'Z' {
			if j+1 >= len(enc) || enc[j] != '!' || enc[j+1] != c+('a'-'A') {
				return false
			}
			j += 2
			continue
		}
		if j >= len(enc) || enc[j] != c {
			return false
		}
		j++
	}
	return j == len(enc)
}
