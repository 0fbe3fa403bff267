package classify

import "strings"

// Base paths: where a repository sits on a repository manager's host.
// Artifactory serves each repository under /artifactory/api/<eco>/<repo>,
// Nexus under /repository/<repo>, devpi under /<user>/<index>, GitLab under
// /api/v4/{projects,groups}/<id>/.../packages/<eco>; several repositories
// share one host, each its own mirror rule. The prefix is compared with the
// raw path as sent, byte for byte: a path that spells the prefix any other
// way (an escape, another case, a dot-segment) is outside it and denied.

// maxBasePath bounds a base_path: real ones are under 100 bytes.
const maxBasePath = 256

// BasePathOK checks a configured base_path: "/" or a path of one or more
// segments of unreserved path bytes (no escapes, no empty or dot-segments,
// no trailing '/'). It returns "" when valid, else what is wrong.
func BasePathOK(b string) string {
	switch {
	case b == "/":
		return ""
	case b == "" || b[0] != '/':
		return "must start with /"
	case len(b) > maxBasePath:
		return "longer than 256 bytes"
	case strings.HasSuffix(b, "/"):
		return "must not end with / (write /repository/npm-proxy, not /repository/npm-proxy/)"
	}
	n := 0
	for seg := range strings.SplitSeq(b[1:], "/") {
		n++
		switch {
		case seg == "":
			return "has an empty segment"
		case seg == "." || seg == "..":
			return "has a dot-segment"
		case n > maxMirrorSegs/2:
			return "has too many segments"
		}
		for i := 0; i < len(seg); i++ {
			if !pathChars[seg[i]] {
				return "may hold only letters, digits and -._~!$&'()*+,=:@ (no escapes)"
			}
		}
	}
	return ""
}

// UnderBasePath reports whether the raw path lies under base and returns
// the path below it, starting with '/'. The base itself maps to "/": an
// upload to the repository's own URL (twine to Artifactory or GitLab) is
// the grammar's root and is refused there by name.
func UnderBasePath(base, path string) (rest string, ok bool) {
	switch {
	case base == "/":
		return path, strings.HasPrefix(path, "/")
	case path == base:
		return "/", true
	case len(path) > len(base) && path[len(base)] == '/' && strings.HasPrefix(path, base):
		return path[len(base):], true
	}
	return "", false
}
