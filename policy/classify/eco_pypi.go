package classify

import "strings"

// MirrorPyPI is the Python Package Index and its mirrors.
var MirrorPyPI = register(&ecosystem{
	name:        "pypi",
	grammar:     checkPyPI,
	knownWrites: pypiKnownWrites,
	publish: Probe{"POST", "/legacy/", "multipart/form-data; boundary=egressd",
		"--egressd\r\nContent-Disposition: form-data; name=\":action\"\r\n\r\nfile_upload\r\n--egressd--\r\n"},
})

// pypiKnownWrites: twine uploads to /legacy/ (upload.pypi.org, or the
// index host itself on test and private indexes); trusted publishing mints
// a token under /_/oidc/.
func pypiKnownWrites(r *Request, p *pgPath, _ *pgQuery, safe bool) (PageType, string) {
	switch {
	case r.Host == "upload.pypi.org":
		return PagePublish, "known:pypi-upload"
	case p.is(0, "_") && p.is(1, "oidc") && (r.Host == "pypi.org" || r.Host == "test.pypi.org"):
		return PageLogin, "known:pypi-oidc"
	case !safe && p.is(0, "legacy") && len(p.segs) == 1:
		return PagePublish, "known:pypi-upload"
	}
	return PageRead, ""
}

// PyPI: /simple/ and /simple/<normalized>/, the JSON API, and
// files.pythonhosted.org/packages/<2hex>/<2hex>/<60hex>/<file>. Grammars
// do not look at Host: one rule may cover both hosts, and a /packages/ path
// sent to pypi.org is merely a 404.

func checkPyPI(c *mirrorCheck) MirrorVerdict {
	s := c.segs()
	if why := pypiWritePath(s); why != "" {
		return mdeny(why)
	}
	if !c.read {
		switch {
		case len(s) == 1 && s[0] == "pypi":
			return mdeny("pypi xml-rpc: POST /pypi")
		case len(s) == 0 && c.r.Method == "POST":
			// twine uploads to the repository URL itself on Artifactory,
			// Nexus, devpi and GitLab.
			return mdeny("pypi upload: POST to the repository root")
		}
		return mdeny(methodReason(c.r.Method))
	}
	if c.r.Query != "" {
		return mdeny(rNoQuery)
	}
	if pypiReadPath(s, c.p.dir) || !c.p.dir && pypiLinkedFile(s, c.based) {
		return mallow
	}
	return mdeny("pypi: path outside download grammar")
}

// maxPyFileDepth bounds the directories above a linked distribution file:
// the deepest real layout, Artifactory's packages/packages/<2>/<2>/<60>/,
// has five.
const maxPyFileDepth = 8

// pypiLinkedFile accepts a distribution file that a PEP 503 page links
// (PEP 503 lets the link point anywhere): next to its page
// (/simple/<name>/<file>) always, and under a base_path in any directory
// of package-name-like segments (devpi /+f/<hex>/<hex>/, GitLab
// /files/<sha256>/, Nexus /packages/<name>/<version>/). At a public
// index's root the stricter pythonhosted layout of pypiReadPath stands.
func pypiLinkedFile(s []string, based bool) bool {
	n := len(s)
	if n < 2 || !isPyDistFile(s[n-1]) {
		return false
	}
	if (s[0] == "simple" || s[0] == "+simple") && n == 3 && isPEP503(s[1]) {
		return true
	}
	if !based || n-1 > maxPyFileDepth {
		return false
	}
	for _, d := range s[:n-1] {
		if !csPyFile.span(d, 128) {
			return false
		}
	}
	return true
}

// pyDistExts are the file types pip installs from (and the PEP 658
// metadata beside a file).
var pyDistExts = [...]string{".whl", ".tar.gz", ".zip", ".tar.bz2", ".tar.xz", ".tgz", ".egg"}

// isPyDistFile reports whether f names a distribution: <name>-<version...>
// with a known extension, optionally followed by ".metadata".
func isPyDistFile(f string) bool {
	f = strings.TrimSuffix(f, ".metadata")
	if !csPyFile.span(f, 200) || !csLowerAlnum[f[0]|0x20] {
		return false
	}
	ext := false
	for _, e := range pyDistExts {
		if strings.HasSuffix(f, e) && len(f) > len(e) {
			f, ext = f[:len(f)-len(e)], true
			break
		}
	}
	return ext && hasDashDigit(f)
}

// hasDashDigit reports whether a '-' followed by a digit occurs in f:
// where the version starts (also in a legacy sdist name such as
// "python-dateutil-2.8.2").
func hasDashDigit(f string) bool {
	for i := 1; i+1 < len(f); i++ {
		if f[i] == '-' && csDigit[f[i+1]] {
			return true
		}
	}
	return false
}

// pypiWritePath names the upload, token and account trees, or returns "".
func pypiWritePath(s []string) string {
	if len(s) == 0 {
		return ""
	}
	switch s[0] {
	case "legacy":
		return "pypi upload: POST /legacy/"
	case "_":
		return "pypi trusted-publishing token: /_/oidc/"
	case "account", "manage":
		return "pypi account: /account/ and /manage/ pages"
	}
	return ""
}

// pypiReadPath reports whether s (a directory if dir) is the simple index,
// a project's JSON or a distribution file.
func pypiReadPath(s []string, dir bool) bool {
	n := len(s)
	if n == 0 {
		return false
	}
	switch s[0] {
	case "simple", "+simple": // devpi spells it +simple
		return n == 1 && dir || n == 2 && isPEP503(s[1])
	case "pypi":
		return !dir && n >= 3 && csPyName.span(s[1], 128) &&
			(n == 3 && s[2] == "json" || n == 4 && csPyVer.span(s[2], 64) && s[3] == "json")
	case "packages":
		return n == 5 && !dir && csPyFile.span(s[4], 200) && pypiFileDirs(s[1], s[2], s[3])
	}
	return false
}

// isPEP503 reports whether s is a normalized project name: [a-z0-9]+(-[a-z0-9]+)*.
func isPEP503(s string) bool {
	if len(s) == 0 || len(s) > 128 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !csLowerAlnum[s[i]] && (s[i] != '-' || s[i-1] == '-') {
			return false
		}
	}
	return true
}

// pypiFileDirs accepts the blake2b directories (2/2/60 hex) or the legacy
// /packages/<pyver or "source">/<c>/<name>/ form, where <c> is the name's
// first character.
func pypiFileDirs(a, b, h string) bool {
	if isLowerHex(a, 2) && isLowerHex(b, 2) && isLowerHex(h, 60) {
		return true
	}
	return csPyName.span(a, 16) && len(b) == 1 && csPyName.span(h, 128) && h[0] == b[0]
}
