package classify

import "strings"

// MirrorOCI is the OCI distribution (container registry) protocol.
var MirrorOCI = register(&ecosystem{
	name:        "oci",
	grammar:     checkOCI,
	knownWrites: ociKnownWrites,
	headers:     []string{"Docker-Distribution-Api-Version"},
	publish:     Probe{"POST", "/v2/egressd/selftest/blobs/uploads/", "application/octet-stream", ""},
	maxQuery:    512, // token scope/service, tags/list n/last, referrers artifactType
})

// ociKnownWrites: blob uploads and manifest pushes under /v2/, and token
// requests that ask for push or delete scopes.
func ociKnownWrites(_ *Request, p *pgPath, q *pgQuery, safe bool) (PageType, string) {
	n := len(p.segs)
	if q.scopeWrite && p.is(n-1, "token") {
		return PageLogin, "known:registry-token-write"
	}
	if !p.is(0, "v2") {
		return PageRead, ""
	}
	for i := 2; i < n; i++ {
		if p.is(i, "blobs") && p.is(i+1, "uploads") {
			return PageUpload, "known:oci-blob-upload"
		}
		if !safe && (p.is(i, "manifests") || p.is(i, "blobs")) {
			return PagePublish, "known:oci-push"
		}
	}
	return PageRead, ""
}

// OCI distribution: /v2/ ping, manifests and blobs by reference,
// tags/list, referrers, and the token endpoint with pull-only scope. Writes
// are named after the spec's endpoint table (end-4 ... end-13).

func checkOCI(c *mirrorCheck) MirrorVerdict {
	s := c.segs()
	n := len(s)
	if n == 1 && s[0] == "token" || n == 2 && s[0] == "v2" && s[1] == "token" {
		return checkOCIToken(c)
	}
	if n == 0 || s[0] != "v2" {
		return mdeny("oci: path outside download grammar")
	}
	if why := ociWrite(c, s); why != "" {
		return mdeny(why)
	}
	if n == 1 && c.p.dir {
		if c.r.Query != "" {
			return mdeny(rNoQuery)
		}
		return mallow
	}
	if n < 4 || c.p.dir || !isOCIName(s[1:n-2]) {
		return mdeny("oci: path outside download grammar")
	}
	if ociObject(s[n-2], s[n-1], c.r.Query) {
		return mallow
	}
	if c.r.Query != "" {
		return mdeny(rNoQuery)
	}
	return mdeny("oci: path outside download grammar")
}

// ociWrite names the push endpoint s under /v2/ is, or the method a write
// uses; "" for a read of anything but an upload.
func ociWrite(c *mirrorCheck, s []string) string {
	n := len(s)
	if n >= 3 && s[n-2] == "blobs" && s[n-1] == "uploads" {
		return "oci blob upload: POST /v2/<name>/blobs/uploads/"
	}
	if n >= 4 && s[n-3] == "blobs" && s[n-2] == "uploads" {
		if c.read {
			// end-13: reading an upload's status is part of a push.
			return "oci blob upload status: GET /v2/<name>/blobs/uploads/<ref>"
		}
		return "oci blob upload: PATCH/PUT /v2/<name>/blobs/uploads/<ref>"
	}
	if c.read {
		return ""
	}
	if n >= 4 && s[n-2] == "manifests" && c.r.Method == "PUT" {
		return "oci manifest push: PUT /v2/<name>/manifests/<ref>"
	}
	if n >= 4 && (s[n-2] == "manifests" || s[n-2] == "blobs") && c.r.Method == "DELETE" {
		return "oci delete: DELETE /v2/<name>/..."
	}
	return methodReason(c.r.Method)
}

// ociObject reports whether /v2/<name>/<kind>/<ref>?<q> is a read: a
// manifest or blob by reference, the tag list, or the referrers of a
// digest.
func ociObject(kind, ref, q string) bool {
	switch kind {
	case "manifests":
		return q == "" && (isOCIDigest(ref) || isOCITag(ref))
	case "blobs":
		return q == "" && isOCIDigest(ref)
	case "tags":
		return ref == "list" && ociTagsQuery(q)
	case "referrers":
		return isOCIDigest(ref) && ociReferrersQuery(q)
	}
	return false
}

// checkOCIToken allows GET /token with pull-only scopes: a
// push scope or offline_token asks for a credential a pull never needs.
func checkOCIToken(c *mirrorCheck) MirrorVerdict {
	if !c.read {
		return mdeny("oci token: POST /token (credential grant)")
	}
	scopes := 0
	for q := c.r.Query; q != ""; {
		var k, v string
		k, v, q = cutParam(q)
		v = queryValue(v)
		switch k {
		case "scope":
			for v != "" {
				var sc string
				sc, v, _ = strings.Cut(v, " ")
				if reason := ociScope(sc); reason != "" {
					return mdeny(reason)
				}
				scopes++
			}
		case "service", "account", "client_id":
			if !csOCIWord.span(v, 128) {
				return mdeny("oci token: bad " + k)
			}
		case "offline_token":
			return mdeny("oci token: offline_token asks for a refresh token")
		default:
			return mdeny("oci token: unexpected query parameter")
		}
	}
	if scopes == 0 {
		// docker login checks credentials with a scope-less token request.
		return mdeny("oci token: scope must be repository:<name>:pull")
	}
	return mallow
}

func ociScope(sc string) string {
	name, ok := strings.CutPrefix(sc, "repository:")
	i := strings.LastIndexByte(name, ':')
	if !ok || i < 0 {
		return "oci token: scope must be repository:<name>:pull"
	}
	name, actions := name[:i], name[i+1:]
	if actions != "pull" {
		return "oci token: push-scoped token (scope must be :pull)"
	}
	if !isOCINamePath(name) {
		return "oci token: scope must be repository:<name>:pull"
	}
	return ""
}

func ociTagsQuery(q string) bool {
	for q != "" {
		var k, v string
		k, v, q = cutParam(q)
		switch k {
		case "n":
			if !csDigit.span(v, 5) {
				return false
			}
		case "last":
			if !isOCITag(queryValue(v)) {
				return false
			}
		default:
			return false
		}
	}
	return true
}

func ociReferrersQuery(q string) bool {
	if q == "" {
		return true
	}
	k, v, rest := cutParam(q)
	return k == "artifactType" && rest == "" && !strings.Contains(q, "&") && csOCIMedia.span(queryValue(v), 255)
}

// isOCINamePath checks a slash-separated repository name.
func isOCINamePath(name string) bool {
	if name == "" || len(name) > 255 {
		return false
	}
	for name != "" {
		var comp string
		comp, name, _ = strings.Cut(name, "/")
		if !isOCIComponent(comp) {
			return false
		}
	}
	return true
}

func isOCIName(comps []string) bool {
	total := -1
	for _, x := range comps {
		if !isOCIComponent(x) {
			return false
		}
		total += 1 + len(x)
	}
	return len(comps) > 0 && total <= 255
}

// isOCIComponent checks [a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*.
func isOCIComponent(s string) bool {
	if s == "" || !csLowerAlnum[s[0]] || !csLowerAlnum[s[len(s)-1]] {
		return false
	}
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '.':
			if !csLowerAlnum[s[i+1]] {
				return false
			}
		case '_':
			if s[i+1] == '_' {
				i++
			}
			if !csLowerAlnum[s[i+1]] {
				return false
			}
		case '-':
			for s[i+1] == '-' {
				i++
			}
			if !csLowerAlnum[s[i+1]] {
				return false
			}
		default:
			if !csLowerAlnum[s[i]] {
				return false
			}
		}
	}
	return true
}

func isOCITag(s string) bool {
	return csOCITag.span(s, 128) && s[0] != '.' && s[0] != '-'
}

func isOCIDigest(s string) bool {
	if h, ok := strings.CutPrefix(s, "sha256:"); ok {
		return isLowerHex(h, 64)
	}
	if h, ok := strings.CutPrefix(s, "sha512:"); ok {
		return isLowerHex(h, 128)
	}
	return false
}
