package classify

import (
	"encoding/json"
	"strings"
)

// MirrorGit is git smart HTTP (fetch and clone) and Git LFS downloads.
var MirrorGit = register(&ecosystem{
	name:        "git",
	grammar:     checkGit,
	knownWrites: gitKnownWrites,
	body:        checkGitBody,
	headers:     []string{"Git-Protocol"},
	publish:     Probe{"POST", "/egressd/selftest.git/git-receive-pack", "application/x-git-receive-pack-request", "0000"},
	maxQuery:    len("service=git-upload-pack"),
})

// gitKnownWrites: git push (receive-pack discovery and POST) and LFS
// batch and lock calls, whose body may say upload.
func gitKnownWrites(r *Request, p *pgPath, q *pgQuery, safe bool) (PageType, string) {
	if p.is(len(p.segs)-1, "git-receive-pack") || q.receivePack ||
		strings.EqualFold(mediaType(r.ContentType), "application/x-git-receive-pack-request") {
		return PagePublish, "known:git-receive-pack"
	}
	if i := p.index("lfs"); !safe && i > 0 && p.is(i-1, "info") {
		return PageUpload, "known:git-lfs" // the batch body may say upload; we do not see it
	}
	return PageRead, ""
}

// Git smart HTTP and LFS. The repository path is free (owner/repo,
// GitLab subgroups); what follows it decides.

func checkGit(c *mirrorCheck) MirrorVerdict {
	s := c.segs()
	n := len(s)
	if why := gitWritePath(s); why != "" {
		return mdeny(why)
	}
	if c.p.dir || n < 2 {
		return mdeny("git: path outside download grammar")
	}
	repo, v := gitEndpoint(c, s)
	if !v.Allow {
		return v
	}
	if !gitRepoPath(repo) {
		return mdeny("git: path outside download grammar")
	}
	if c.read {
		return mallow
	}
	if s[n-1] == "batch" {
		return MirrorVerdict{Allow: true, BodyCap: lfsBatchBodyCap}
	}
	return MirrorVerdict{Allow: true, BodyCap: uploadPackBodyCap}
}

// gitWritePath names a push or an LFS lock anywhere in the path, or
// returns "".
func gitWritePath(s []string) string {
	for i, x := range s {
		if x == "git-receive-pack" {
			return "git push: git-receive-pack"
		}
		if x == "lfs" && i+1 < len(s) && s[i+1] == "locks" {
			return "git lfs locks: info/lfs/locks"
		}
	}
	return ""
}

// gitEndpoint checks the protocol endpoint that ends s (ref discovery,
// upload-pack, the LFS batch or an LFS object) and returns the repository
// path before it, with an allowing verdict, or the deny.
func gitEndpoint(c *mirrorCheck, s []string) (repo []string, v MirrorVerdict) {
	n := len(s)
	switch {
	case n >= 3 && s[n-2] == "info" && s[n-1] == "refs":
		if reason := gitRefsQuery(c.r.Query); reason != "" {
			return nil, mdeny(reason)
		}
		if !c.read {
			return nil, mdeny(methodReason(c.r.Method))
		}
		return s[:n-2], mallow
	case s[n-1] == "git-upload-pack":
		return s[:n-1], gitPost(c, uploadPackType, uploadPackBodyCap)
	case n >= 5 && s[n-4] == "info" && s[n-3] == "lfs" && s[n-2] == "objects" && s[n-1] == "batch":
		return s[:n-4], gitPost(c, lfsType, lfsBatchBodyCap)
	case n >= 5 && s[n-4] == "info" && s[n-3] == "lfs" && s[n-2] == "objects" && isLowerHex(s[n-1], 64),
		n >= 4 && s[n-3] == "gitlab-lfs" && s[n-2] == "objects" && isLowerHex(s[n-1], 64):
		if !c.read {
			return nil, mdeny("git lfs upload: PUT object")
		}
		if c.r.Query != "" {
			return nil, mdeny(rNoQuery)
		}
		if s[n-3] == "lfs" {
			return s[:n-4], mallow
		}
		return s[:n-3], mallow
	}
	return nil, mdeny("git: path outside download grammar")
}

// gitRepoPath reports whether repo is 1 to 8 plain segments.
func gitRepoPath(repo []string) bool {
	if len(repo) == 0 || len(repo) > 8 {
		return false
	}
	for _, x := range repo {
		if !csGitSeg.span(x, 100) {
			return false
		}
	}
	return true
}

// gitRefsQuery allows exactly service=git-upload-pack. The same GET with
// service=git-receive-pack is the first request of every push.
func gitRefsQuery(q string) string {
	if q == "service=git-upload-pack" {
		return ""
	}
	for q != "" {
		var k, v string
		k, v, q = cutParam(q)
		if k == "service" && strings.Contains(queryValue(v), "receive-pack") {
			return "git push discovery: service=git-receive-pack"
		}
	}
	return "git info/refs: query must be service=git-upload-pack"
}

// gitPost checks the POST of a protocol read: exact content type, no
// query, declared length within cap (unknown length is fine: the proxy
// reads at most BodyCap).
func gitPost(c *mirrorCheck, ctype string, bodyCap int64) MirrorVerdict {
	switch {
	case c.r.Method != "POST":
		return mdeny("git: " + ctype + " endpoint takes POST")
	case c.r.Query != "":
		return mdeny(rNoQuery)
	case !strings.EqualFold(mediaType(c.r.ContentType), ctype):
		return mdeny("git: content type must be " + ctype)
	case c.r.ContentLength < -1:
		return mdeny("git: bad content length")
	case c.r.ContentLength > bodyCap:
		return mdeny("git: request body over cap")
	}
	return mallow
}

// checkGitBody checks the body of the requests checkGit allowed with
// BodyCap > 0: a git-upload-pack body must be pkt-lines of a fetch,
// ls-refs or object-info request; an LFS batch must say
// "operation":"download" (the URL is the same both ways, the body
// decides).
func checkGitBody(r *Request, body []byte) (ok bool, reason string) {
	switch {
	case strings.HasSuffix(r.Path, "/git-upload-pack") && strings.EqualFold(mediaType(r.ContentType), uploadPackType):
		if len(body) > uploadPackBodyCap {
			return false, "git-upload-pack body: over cap"
		}
		return checkUploadPackBody(body)
	case strings.HasSuffix(r.Path, "/info/lfs/objects/batch") && strings.EqualFold(mediaType(r.ContentType), lfsType):
		if len(body) > lfsBatchBodyCap {
			return false, "lfs batch body: over cap"
		}
		return checkLFSBatch(body)
	}
	return false, rNoBody
}

func jsonDelim(dec *json.Decoder, d json.Delim) bool {
	t, err := dec.Token()
	return err == nil && t == d
}

func jsonString(dec *json.Decoder) (string, bool) {
	t, err := dec.Token()
	s, ok := t.(string)
	return s, err == nil && ok
}

func jsonArray(dec *json.Decoder, elem func() bool) bool {
	if !jsonDelim(dec, '[') {
		return false
	}
	for dec.More() {
		if !elem() {
			return false
		}
	}
	return jsonDelim(dec, ']')
}

// jsonObject calls field for each key; field must consume the value.
func jsonObject(dec *json.Decoder, field func(key string) bool) bool {
	if !jsonDelim(dec, '{') {
		return false
	}
	for dec.More() {
		t, err := dec.Token()
		k, ok := t.(string)
		if err != nil || !ok || !field(k) {
			return false
		}
	}
	return jsonDelim(dec, '}')
}
