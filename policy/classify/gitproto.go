package classify

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Strict parsers of the two git request bodies a download-only rule
// forwards: the upload-pack negotiation (pkt-lines, protocol v0/v1 and v2)
// and the LFS batch request (JSON). Every line kind has a count cap and a
// length cap, every argument a grammar; nothing carries free text beyond
// what the caps allow.
//
// The caps come from real clients (git 2.39.5 against git http-backend on
// 127.0.0.1, a repository of 900 refs and 351 commits; the figures are in
// README "Git caps"): a clone sends 602 want lines, a fetch from a clone
// with 2,000 local commits the server lacks sends have lines in rounds of
// 16, 32, ... 1,024, a fetch --tags 8 ref-prefix lines of at most 44
// bytes, the first v0 want with capabilities 171 bytes.

// pktCap bounds one kind of pkt-line in one upload-pack request.
type pktCap struct {
	count int // most lines of this kind
	size  int // longest line, keyword included, newline excluded
}

// uploadPackCaps are per request. want: 20,000 is 33× a 900-ref clone
// (the 1 MiB body cap binds first at about 45,000). have: 4,096 is 4× the
// largest round measured; git doubles rounds up to 16,384 only when
// thousands of local commits are unknown to the server (a fork that
// diverged: fetch.negotiationAlgorithm=skipping keeps it under the cap).
// ref-prefix: 32 is 4× fetch --tags. Lines absent here are refused.
var uploadPackCaps = map[string]pktCap{
	"want":            {20000, 1024}, // the first v0 want carries the capability list
	"have":            {4096, 5 + 64},
	"shallow":         {4096, 8 + 64},
	"oid":             {1024, 4 + 64},
	"ref-prefix":      {32, 11 + maxRefName},
	"want-ref":        {32, 9 + maxRefName},
	"deepen-not":      {16, 11 + maxRefName},
	"deepen":          {1, 7 + 10},
	"deepen-since":    {1, 13 + 20},
	"filter":          {1, 7 + 64},
	"packfile-uris":   {1, 14 + 32},
	"command=":        {1, 8 + 12},
	"agent=":          {1, 6 + 64},
	"object-format=":  {1, 14 + 6},
	"session-id=":     {1, 11 + 64},
	"done":            {1, 4},
	"thin-pack":       {1, 9},
	"no-progress":     {1, 11},
	"include-tag":     {1, 11},
	"ofs-delta":       {1, 9},
	"deepen-relative": {1, 15},
	"sideband-all":    {1, 12},
	"wait-for-done":   {1, 13},
	"peel":            {1, 4},
	"symrefs":         {1, 7},
	"unborn":          {1, 6},
	"size":            {1, 4},
}

// maxRefName bounds a ref name or ref prefix: real branch names (dependabot
// and release branches included) stay under 100 bytes.
const maxRefName = 200

// v0Capabilities are the words a v0/v1 client appends to its first want.
var v0Capabilities = map[string]bool{
	"multi_ack": true, "multi_ack_detailed": true, "no-done": true, "thin-pack": true, "side-band": true,
	"side-band-64k": true, "ofs-delta": true, "shallow": true, "deepen-since": true, "deepen-not": true,
	"deepen-relative": true, "no-progress": true, "include-tag": true, "allow-tip-sha1-in-want": true,
	"allow-reachable-sha1-in-want": true, "filter": true,
}

// checkUploadPackBody accepts the pkt-lines git sends to upload-pack:
// v0/v1 want/have/done, v2 command=..., capabilities and arguments; git
// gzips bodies over 1 KiB.
func checkUploadPackBody(body []byte) (bool, string) {
	body, why := inflated(body)
	if why != "" {
		return false, "git-upload-pack body: " + why
	}
	if len(body) == 0 {
		return false, "git-upload-pack body: empty"
	}
	counts := make([]int, len(pktKinds))
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
		kind, ok := uploadPackLine(line)
		if !ok {
			return false, "git-upload-pack body: unexpected line"
		}
		if kind == wantKind && counts[kind] > 0 && bytes.Count(line, []byte(" ")) > 1 {
			// git sends capabilities after the first want only
			return false, "git-upload-pack body: capabilities after a later want"
		}
		c := uploadPackCaps[pktKinds[kind]]
		counts[kind]++
		if len(line) > c.size {
			return false, "git-upload-pack body: " + pktKinds[kind] + " line too long"
		}
		if counts[kind] > c.count {
			return false, "git-upload-pack body: too many " + pktKinds[kind] + " lines"
		}
	}
	return true, ""
}

// inflated returns a gzip body inflated (at most uploadPackInflatedCap
// bytes), any other body as it is, or why it cannot.
func inflated(body []byte) ([]byte, string) {
	if !isGzip(body) {
		return body, ""
	}
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		return nil, "bad gzip"
	}
	plain, err := io.ReadAll(io.LimitReader(zr, uploadPackInflatedCap+1))
	if err != nil {
		return nil, "bad gzip"
	}
	if len(plain) > uploadPackInflatedCap {
		return nil, "inflated body over cap"
	}
	return plain, ""
}

// CheckedBody returns a body a check passed in the one spelling of what
// the check read: a gzip body inflated (gzipped reports that it was), a
// JSON body re-encoded compact (keys sorted, strings without needless
// escapes). Forward this, not the body as sent: a gzip header's name,
// comment and extra fields, a deflate encoding's choices, and JSON's
// whitespace and \u escapes are bytes no check reads.
func CheckedBody(contentType string, body []byte) (plain []byte, gzipped bool, err error) {
	plain, why := inflated(body)
	if why != "" {
		return nil, false, fmt.Errorf("request body: %s", why)
	}
	if strings.HasSuffix(strings.ToLower(mediaType(contentType)), "json") {
		if plain, err = canonicalJSON(plain); err != nil {
			return nil, false, fmt.Errorf("request body: %w", err)
		}
	}
	return plain, isGzip(body), nil
}

func canonicalJSON(body []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after JSON")
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n")), nil
}

func isGzip(body []byte) bool { return len(body) >= 2 && body[0] == 0x1f && body[1] == 0x8b }

// pktKinds indexes uploadPackCaps for counting without a map per request.
var pktKinds, pktKindIndex = func() ([]string, map[string]int) {
	kinds := make([]string, 0, len(uploadPackCaps))
	for k := range uploadPackCaps {
		kinds = append(kinds, k)
	}
	idx := make(map[string]int, len(kinds))
	for i, k := range kinds {
		idx[k] = i
	}
	return kinds, idx
}()

var wantKind = pktKindIndex["want"]

// uploadPackLine returns the kind of a valid line.
func uploadPackLine(line []byte) (int, bool) {
	kw, arg, hasArg := bytes.Cut(line, []byte(" "))
	if !hasArg {
		if k, v, ok := bytes.Cut(line, []byte("=")); ok {
			key := string(k) + "="
			var valid bool
			switch key {
			case "command=":
				switch string(v) {
				case "fetch", "ls-refs", "object-info", "bundle-uri":
					valid = true
				}
			case "object-format=":
				valid = string(v) == "sha1" || string(v) == "sha256"
			case "agent=", "session-id=":
				valid = csAgent.span(string(v), 64)
			}
			i, known := pktKindIndex[key]
			return i, valid && known
		}
	}
	i, known := pktKindIndex[string(kw)]
	if !known || strings.HasSuffix(string(kw), "=") {
		return 0, false
	}
	switch string(kw) {
	case "have", "shallow", "oid":
		return i, isOID(arg)
	case "want":
		// The first v0 want carries the capability list after the id.
		oid, caps, hasCaps := bytes.Cut(arg, []byte(" "))
		if hasCaps && !v0CapList(caps) {
			return i, false
		}
		return i, isOID(oid)
	case "deepen":
		return i, csDigit.span(string(arg), 10)
	case "deepen-since":
		return i, csDigit.span(string(arg), 20)
	case "ref-prefix", "want-ref", "deepen-not":
		return i, isRefName(string(arg))
	case "filter":
		return i, isFilterSpec(string(arg))
	case "packfile-uris":
		return i, csLowerAlnum.span(string(arg), 32) // protocol names: "https"
	}
	return i, !hasArg
}

var csAgent = mkCharset("A-Za-z0-9._/+:-")

// v0CapList checks the capabilities after the first want: known words and
// agent=, object-format=, session-id= with short values, each once.
func v0CapList(caps []byte) bool {
	n := 0
	var seen [32]string
	for cp := range bytes.SplitSeq(caps, []byte(" ")) {
		if n == len(seen) {
			return false
		}
		k, v, hasV := strings.Cut(string(cp), "=")
		if slices.Contains(seen[:n], k) {
			return false // each capability once
		}
		seen[n] = k
		n++
		switch {
		case !hasV && v0Capabilities[k]:
		case hasV && (k == "agent" || k == "session-id") && csAgent.span(v, 64):
		case hasV && k == "object-format" && (v == "sha1" || v == "sha256"):
		default:
			return false
		}
	}
	return true
}

// csRef are the bytes git check-ref-format allows that real refs use.
var csRef = mkCharset("A-Za-z0-9._/+-")

// isRefName accepts a ref name or prefix ("HEAD", "main", "refs/tags/")
// as git check-ref-format would, restricted to the bytes real refs use: no
// "..", no "//", no component starting with '.' or ending in ".lock".
func isRefName(s string) bool {
	if !csRef.span(s, maxRefName) || strings.Contains(s, "..") || strings.Contains(s, "//") ||
		s[0] == '/' || s[0] == '-' || strings.HasSuffix(s, ".") {
		return false
	}
	for c := range strings.SplitSeq(s, "/") {
		if strings.HasPrefix(c, ".") || strings.HasSuffix(c, ".lock") {
			return false
		}
	}
	return true
}

var csFilter = mkCharset("a-z0-9:=.")

// isFilterSpec accepts the partial-clone filters git sends: blob:none,
// blob:limit=<n>[kmg], tree:<depth>, object:type=<type>, sparse:oid=<oid>.
func isFilterSpec(s string) bool {
	if !csFilter.span(s, 64) {
		return false
	}
	switch {
	case s == "blob:none":
		return true
	case strings.HasPrefix(s, "blob:limit="):
		v := strings.TrimRight(s[len("blob:limit="):], "kmg")
		return csDigit.span(v, 12)
	case strings.HasPrefix(s, "tree:"):
		return csDigit.span(s[len("tree:"):], 6)
	case strings.HasPrefix(s, "object:type="):
		switch s[len("object:type="):] {
		case "blob", "tree", "commit", "tag":
			return true
		}
	case strings.HasPrefix(s, "sparse:oid="):
		return isOID([]byte(s[len("sparse:oid="):]))
	}
	return false
}

func isOID(b []byte) bool {
	return len(b) == 40 && csLowerHex.span(string(b), 40) || len(b) == 64 && csLowerHex.span(string(b), 64)
}

// LFS batch caps: git-lfs sends at most lfs.transfer.batchSize (100)
// objects per batch; transfers lists adapter names ("basic",
// "lfs-standalone-file", "ssh"); the ref is a ref name.
const (
	lfsMaxObjects   = 256
	lfsMaxTransfers = 8
)

var csTransfer = mkCharset("a-z0-9_-")

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
// case-variant "operation", an unknown key, a value outside its grammar or
// trailing data is denied.
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
			n := 0
			bit, ok = lfsTransfers, jsonArray(dec, func() bool {
				s, ok := jsonString(dec)
				n++
				return ok && n <= lfsMaxTransfers && csTransfer.span(s, 32)
			})
		case "ref":
			named := false
			bit, ok = lfsRef, jsonObject(dec, func(k string) bool {
				s, ok := jsonString(dec)
				ok = ok && k == "name" && !named && isRefName(s)
				named = true
				return ok
			})
			ok = ok && named
		case "objects":
			n := 0
			bit, ok = lfsObjects, jsonArray(dec, func() bool { n++; return n <= lfsMaxObjects && lfsObject(dec) })
		case "hash_algo":
			bit = lfsHashAlgo
			var s string
			s, ok = jsonString(dec)
			ok = ok && s == "sha256"
		default:
			if strings.EqualFold(key, "operation") {
				return false, "lfs batch: ambiguous operation key"
			}
			return false, "lfs batch: unexpected key"
		}
		if !ok {
			return false, "lfs batch: bad value of " + key
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

// lfsObject accepts {"oid": <sha256 hex>, "size": <integer>}, each once.
func lfsObject(dec *json.Decoder) bool {
	var seenOID, seenSize bool
	return jsonObject(dec, func(k string) bool {
		t, err := dec.Token()
		if err != nil {
			return false
		}
		switch {
		case k == "oid" && !seenOID:
			seenOID = true
			s, ok := t.(string)
			return ok && isLowerHex(s, 64)
		case k == "size" && !seenSize:
			seenSize = true
			n, ok := t.(json.Number)
			return ok && csDigit.span(string(n), 16)
		}
		return false
	}) && seenOID && seenSize
}
