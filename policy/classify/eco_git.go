package classify

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
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

// Git smart HTTP and LFS (A.9). The repository path is free (owner/repo,
// GitLab subgroups); what follows it decides.

func checkGit(c *mirrorCheck) MirrorVerdict {
	s := c.segs()
	n := len(s)
	for i, x := range s {
		if x == "git-receive-pack" {
			return mdeny("git push: git-receive-pack")
		}
		if x == "lfs" && i+1 < n && s[i+1] == "locks" {
			return mdeny("git lfs locks: info/lfs/locks")
		}
	}
	if c.p.dir || n < 2 {
		return mdeny("git: path outside download grammar")
	}
	var repo []string
	switch {
	case n >= 3 && s[n-2] == "info" && s[n-1] == "refs":
		repo = s[:n-2]
		if reason := gitRefsQuery(c.r.Query); reason != "" {
			return mdeny(reason)
		}
		if !c.read {
			return mdeny(methodReason(c.r.Method))
		}
	case s[n-1] == "git-upload-pack":
		repo = s[:n-1]
		if v := gitPost(c, uploadPackType, uploadPackBodyCap); !v.Allow {
			return v
		}
	case n >= 5 && s[n-4] == "info" && s[n-3] == "lfs" && s[n-2] == "objects" && s[n-1] == "batch":
		repo = s[:n-4]
		if v := gitPost(c, lfsType, lfsBatchBodyCap); !v.Allow {
			return v
		}
	case n >= 5 && s[n-4] == "info" && s[n-3] == "lfs" && s[n-2] == "objects" && isLowerHex(s[n-1], 64),
		n >= 4 && s[n-3] == "gitlab-lfs" && s[n-2] == "objects" && isLowerHex(s[n-1], 64):
		if !c.read {
			return mdeny("git lfs upload: PUT object")
		}
		if c.r.Query != "" {
			return mdeny(rNoQuery)
		}
		repo = s[:n-3]
		if s[n-3] == "lfs" {
			repo = s[:n-4]
		}
	default:
		return mdeny("git: path outside download grammar")
	}
	if len(repo) == 0 || len(repo) > 8 {
		return mdeny("git: path outside download grammar")
	}
	for _, x := range repo {
		if !csGitSeg.span(x, 100) {
			return mdeny("git: path outside download grammar")
		}
	}
	if c.read {
		return mallow
	}
	if s[n-1] == "batch" {
		return MirrorVerdict{Allow: true, BodyCap: lfsBatchBodyCap}
	}
	return MirrorVerdict{Allow: true, BodyCap: uploadPackBodyCap}
}

// gitRefsQuery allows exactly service=git-upload-pack. The same GET with
// service=git-receive-pack is the first request of every push (A.0(3)).
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
// "operation":"download" (A.9: the URL is the same both ways, the body
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

// checkUploadPackBody accepts the pkt-lines git sends to upload-pack in
// protocol v0/v1 (want/have/done) and v2 (command=..., capabilities,
// arguments); object ids must be hex, so the free text left is a few
// capability and ref-prefix words. git gzips bodies over 1 KiB.
func checkUploadPackBody(body []byte) (bool, string) {
	if len(body) >= 2 && body[0] == 0x1f && body[1] == 0x8b {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return false, "git-upload-pack body: bad gzip"
		}
		plain, err := io.ReadAll(io.LimitReader(zr, uploadPackInflatedCap+1))
		if err != nil {
			return false, "git-upload-pack body: bad gzip"
		}
		if len(plain) > uploadPackInflatedCap {
			return false, "git-upload-pack body: inflated body over cap"
		}
		body = plain
	}
	if len(body) == 0 {
		return false, "git-upload-pack body: empty"
	}
	for len(body) > 0 {
		if len(body) < 4 {
			return false, "git-upload-pack body: truncated pkt-line"
		}
		n := 0
		for _, c := range body[:4] {
			d := unhex(c)
			if d < 0 {
				return false, "git-upload-pack body: bad pkt-line length"
			}
			n = n<<4 | d
		}
		if n <= 2 { // flush, delim, response-end
			body = body[4:]
			continue
		}
		if n < 5 || n > len(body) || n-4 > maxPktLine {
			return false, "git-upload-pack body: bad pkt-line length"
		}
		line := body[4:n]
		body = body[n:]
		line = bytes.TrimSuffix(line, []byte("\n"))
		if !uploadPackLine(line) {
			return false, "git-upload-pack body: unexpected line"
		}
	}
	return true, ""
}

func uploadPackLine(line []byte) bool {
	kw, arg, hasArg := bytes.Cut(line, []byte(" "))
	if !hasArg {
		if k, v, ok := bytes.Cut(line, []byte("=")); ok {
			switch string(k) {
			case "command":
				switch string(v) {
				case "fetch", "ls-refs", "object-info", "bundle-uri":
					return true
				}
				return false
			case "agent", "object-format", "session-id", "server-option":
				return printable(v)
			}
			return false
		}
	}
	switch string(kw) {
	case "done", "thin-pack", "no-progress", "include-tag", "ofs-delta", "deepen-relative",
		"sideband-all", "wait-for-done", "peel", "symrefs", "unborn", "size":
		return !hasArg
	case "have", "shallow", "oid":
		return isOID(arg)
	case "want":
		// The first v0 want carries the capability list after the id.
		oid, caps, hasCaps := bytes.Cut(arg, []byte(" "))
		if hasCaps {
			for _, cp := range bytes.Split(caps, []byte(" ")) {
				if !printable(cp) {
					return false
				}
			}
		}
		return isOID(oid)
	case "deepen", "deepen-since":
		return len(arg) > 0 && len(arg) <= 20 && csDigit.span(string(arg), 20)
	case "deepen-not", "want-ref", "ref-prefix", "filter", "packfile-uris":
		return printable(arg)
	}
	return false
}

func isOID(b []byte) bool {
	return len(b) == 40 && csLowerHex.span(string(b), 40) || len(b) == 64 && csLowerHex.span(string(b), 64)
}

func printable(b []byte) bool { return len(b) > 0 && csPrintable.span(string(b), maxPktLine) }

// lfsBatch keys a batch request may hold (git-lfs docs/api/batch.md).
const (
	lfsOperation = 1 << iota
	lfsTransfers
	lfsRef
	lfsObjects
	lfsHashAlgo
)

// checkLFSBatch walks the JSON tokens rather than decoding into a struct:
// encoding/json matches keys case-insensitively and keeps the last of
// duplicate keys, while the server may read another one. A duplicate or
// case-variant "operation", an unknown key, or trailing data is denied.
func checkLFSBatch(body []byte) (bool, string) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if !jsonDelim(dec, '{') {
		return false, "lfs batch: body is not a JSON object"
	}
	seen := 0
	op := ""
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return false, "lfs batch: bad JSON"
		}
		key, _ := t.(string)
		var bit int
		var ok bool
		switch key {
		case "operation":
			bit = lfsOperation
			op, ok = jsonString(dec)
		case "transfers":
			bit, ok = lfsTransfers, jsonArray(dec, func() bool { _, ok := jsonString(dec); return ok })
		case "ref":
			bit, ok = lfsRef, jsonObject(dec, func(k string) bool {
				_, ok := jsonString(dec)
				return ok && k == "name"
			})
		case "objects":
			bit, ok = lfsObjects, jsonArray(dec, func() bool { return lfsObject(dec) })
		case "hash_algo":
			bit = lfsHashAlgo
			_, ok = jsonString(dec)
		default:
			if strings.EqualFold(key, "operation") {
				return false, "lfs batch: ambiguous operation key"
			}
			return false, "lfs batch: unexpected key"
		}
		if !ok {
			return false, "lfs batch: bad JSON"
		}
		if seen&bit != 0 {
			return false, "lfs batch: duplicate key"
		}
		seen |= bit
	}
	if !jsonDelim(dec, '}') {
		return false, "lfs batch: bad JSON"
	}
	if _, err := dec.Token(); err != io.EOF {
		return false, "lfs batch: trailing data"
	}
	switch op {
	case "download":
		return true, ""
	case "upload":
		return false, "git lfs upload: batch operation upload"
	}
	return false, "lfs batch: operation must be download"
}

func lfsObject(dec *json.Decoder) bool {
	return jsonObject(dec, func(k string) bool {
		t, err := dec.Token()
		if err != nil {
			return false
		}
		switch k {
		case "oid":
			s, ok := t.(string)
			return ok && isOID([]byte(s))
		case "size":
			_, ok := t.(json.Number)
			return ok
		}
		return false
	})
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
