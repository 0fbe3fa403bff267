package classify

// Query scanning for page types: the keys and values that make a request
// a write (a message body, an action verb, a GraphQL mutation), decoded
// as the server would.

import (
	"bytes"
	"strings"
)

// pgQueryKeysIn reports whether every parameter of query has a key, spelled
// raw, in keys.
func pgQueryKeysIn(query string, keys []string) bool {
	for query != "" {
		var pair string
		if i := strings.IndexAny(query, "&;"); i >= 0 {
			pair, query = query[:i], query[i+1:]
		} else {
			pair, query = query, ""
		}
		k, _, _ := strings.Cut(pair, "=")
		found := false
		for _, key := range keys {
			found = found || k == key
		}
		if !found {
			return false
		}
	}
	return true
}

// pgQuery holds what ClassifyPage reads of a query string.
type pgQuery struct {
	clientID, responseType, redirectURI, grantType bool
	receivePack, uploadPack, writeTrue, scopeWrite bool
	text, mutation                                 bool
	login, upload, posting                         string
	special                                        [96]byte // title=Special:… name, for MediaWiki's index.php
	specialN                                       int
}

// scan reads the query's parameters; both '&' and ';' separate them, as
// some servers split on either. Keys and values are decoded until stable
// and lower-cased, so escapes cannot hide a parameter.
func (q *pgQuery) scan(raw string) {
	for raw != "" {
		var pair string
		if i := strings.IndexAny(raw, "&;"); i >= 0 {
			pair, raw = raw[:i], raw[i+1:]
		} else {
			pair, raw = raw, ""
		}
		k, v, _ := strings.Cut(pair, "=")
		var kb [64]byte
		key, ok := pgDecode(kb[:0], k)
		if !ok {
			continue // longer than any key we know
		}
		if pgHasPrefix(key, "entry.") {
			pgSet(&q.posting, "query:entry") // Google Forms formResponse?entry.N=…
			continue
		}
		if kind := pgQueryKeys[string(key)]; kind != 0 {
			q.param(kind, key, v)
		}
	}
}

// param records one parameter of a kind ClassifyPage reads; v is raw.
func (q *pgQuery) param(kind int, key []byte, v string) {
	switch kind {
	case qClientID:
		q.clientID = true
	case qResponseType:
		q.responseType = true
	case qRedirectURI:
		q.redirectURI = true
	case qGrantType:
		q.grantType = true
	case qWriteArg:
		pgSet(&q.posting, pgQueryKeyWhy[string(key)])
	case qText:
		q.text = true
	case qQuery:
		q.mutation = q.mutation || pgHasMutation(v)
	default:
		var vb [256]byte
		val, whole := pgDecode(vb[:0], v)
		q.valueParam(kind, val, whole)
	}
}

// valueParam records a parameter whose decoded value val matters; whole
// is false when val was too long to decode in full.
func (q *pgQuery) valueParam(kind int, val []byte, whole bool) {
	switch kind {
	case qService:
		q.receivePack = q.receivePack || string(val) == "git-receive-pack"
		q.uploadPack = q.uploadPack || string(val) == "git-upload-pack"
	case qWrite:
		q.writeTrue = q.writeTrue || string(val) == "true"
	case qScope:
		// Registry tokens: repository:x:pull,push. A scope too long to read is a write.
		q.scopeWrite = q.scopeWrite || !whole || bytes.Contains(val, []byte("push")) ||
			bytes.Contains(val, []byte("delete")) || bytes.IndexByte(val, '*') >= 0
	case qAction:
		if a, ok := pgQueryActions[string(val)]; ok && whole {
			q.action(a.page, a.why)
		}
	case qMethod:
		if string(val) != "get" && string(val) != "head" {
			pgSet(&q.posting, "query:_method") // Rails/Laravel method override
		}
	case qTitle:
		if name, ok := bytes.CutPrefix(val, []byte("special:")); ok && q.specialN == 0 {
			q.specialN = copy(q.special[:], name)
		}
	}
}

// action records an action= or mode= value that names a function.
func (q *pgQuery) action(page PageType, why string) {
	switch page {
	case PageLogin:
		pgSet(&q.login, why)
	case PageUpload:
		pgSet(&q.upload, why)
	default:
		pgSet(&q.posting, why)
	}
}

// pgDecode percent-decodes s ('+' is a space) into dst until stable, lower
// case. ok is false when the result did not fit; dst then holds a prefix.
func pgDecode(dst []byte, s string) (out []byte, ok bool) {
	ok = true
	for i := 0; i < len(s); i++ {
		if len(dst) == cap(dst) {
			ok = false
			break
		}
		c := s[i]
		switch {
		case c == '+':
			c = ' '
		case c == '%' && i+2 < len(s) && unhex(s[i+1]) >= 0 && unhex(s[i+2]) >= 0:
			c = byte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
		}
		dst = append(dst, c)
	}
	for range pgMaxDecode {
		var changed bool
		if dst, changed, _ = pgUnescape(dst); !changed {
			break
		}
	}
	for i, c := range dst {
		if 'A' <= c && c <= 'Z' {
			dst[i] = c + 'a' - 'A'
		}
	}
	return dst, ok
}

// pgHasMutation reports whether a GraphQL query parameter names a mutation,
// however long it is (decoded once, case-insensitive).
func pgHasMutation(v string) bool {
	const word = "mutation"
	m := 0
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '+':
			c = ' '
		case c == '%' && i+2 < len(v) && unhex(v[i+1]) >= 0 && unhex(v[i+2]) >= 0:
			c = byte(unhex(v[i+1])<<4 | unhex(v[i+2]))
			i += 2
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		switch {
		case c == word[m]:
			m++
			if m == len(word) {
				return true
			}
		case c == word[0]:
			m = 1 // "mutation" repeats no prefix but its first letter
		default:
			m = 0
		}
	}
	return false
}
