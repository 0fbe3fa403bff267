package honeytoken

import (
	"encoding/base64"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Registry holds the honeytokens egressd watches for, from several
// sources (the state directory, each run), and scans for them. Scans are
// lock-free; changes rebuild the matcher.
type Registry struct {
	mu      sync.Mutex
	sources map[string][]Token
	m       atomic.Pointer[matcher]
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{sources: map[string][]Token{}} }

// Set replaces the tokens of source (nil removes them).
func (r *Registry) Set(source string, ts []Token) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(ts) == 0 {
		delete(r.sources, source)
	} else {
		r.sources[source] = slices.Clone(ts)
	}
	var all []Token
	for _, s := range slices.Sorted(maps.Keys(r.sources)) {
		all = append(all, r.sources[s]...)
	}
	r.m.Store(newMatcher(all))
}

// Tokens lists every token watched for.
func (r *Registry) Tokens() []Token {
	if m := r.m.Load(); m != nil {
		return slices.Clone(m.tokens)
	}
	return nil
}

// Empty reports whether there is nothing to watch for (a nil registry is
// empty).
func (r *Registry) Empty() bool {
	if r == nil {
		return true
	}
	m := r.m.Load()
	return m == nil || len(m.tokens) == 0
}

// MaxLen is the length of the longest string the scan looks for (a
// token or one of its encodings): a stream scanner that keeps the last
// MaxLen-1 bytes of one chunk with the next finds one split between them.
func (r *Registry) MaxLen() int {
	if r.Empty() {
		return 0
	}
	return r.m.Load().maxLen
}

// Scan returns the first honeytoken in b (ASCII case folded).
func (r *Registry) Scan(b []byte) (Token, bool) {
	if r.Empty() {
		return Token{}, false
	}
	return scan(r.m.Load(), b)
}

// ScanString is Scan for a string.
func (r *Registry) ScanString(s string) (Token, bool) {
	if r.Empty() {
		return Token{}, false
	}
	return scan(r.m.Load(), s)
}

// ScanHeader looks in a header's name and value, and in the decoded
// credentials of a Basic Authorization or Proxy-Authorization value (how
// git and most HTTP clients send a token).
func (r *Registry) ScanHeader(name, value string) (Token, bool) {
	if t, ok := r.ScanString(name); ok {
		return t, true
	}
	if t, ok := r.ScanString(value); ok {
		return t, true
	}
	if !strings.EqualFold(name, "Authorization") && !strings.EqualFold(name, "Proxy-Authorization") {
		return Token{}, false
	}
	scheme, cred, ok := strings.Cut(strings.TrimSpace(value), " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return Token{}, false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	if err != nil {
		return Token{}, false
	}
	return r.Scan(raw)
}

// window is the length of the rolling window; every token is longer.
const window = 8

// filterBits sizes the bit filter in front of the exact set.
const filterBits = 1 << 16

// matcher is an immutable scan structure over a token set.
type matcher struct {
	tokens []Token
	lower  []string           // patterns: each token's forms, ASCII lower case
	owner  []int32            // lower[i] is a form of tokens[owner[i]]
	heads  map[uint64][]int32 // first window bytes (lower case) → patterns
	filter [filterBits / 64]uint64
	maxLen int // the longest pattern
}

func newMatcher(ts []Token) *matcher {
	m := &matcher{heads: map[uint64][]int32{}}
	for _, t := range ts {
		if len(t.Value) < window {
			continue // never issued; a short value would match too much
		}
		m.tokens = append(m.tokens, t)
		for _, f := range forms(t.Value) {
			m.add(strings.ToLower(f), int32(len(m.tokens)-1))
		}
	}
	return m
}

func (m *matcher) add(v string, owner int32) {
	if len(v) < window || slices.Contains(m.lower, v) {
		return
	}
	var w uint64
	for i := 0; i < window; i++ {
		w = w<<8 | uint64(v[i])
	}
	m.heads[w] = append(m.heads[w], int32(len(m.lower)))
	m.lower = append(m.lower, v)
	m.owner = append(m.owner, owner)
	m.maxLen = max(m.maxLen, len(v))
	h := filterHash(w)
	m.filter[h>>6] |= 1 << (h & 63)
}

func filterHash(w uint64) uint64 { return (w * 0x9E3779B97F4A7C15) >> (64 - 16) }

// scan is one pass over b: a rolling window of its last 8 bytes (lower
// case), checked against the filter, then the exact set.
func scan[T string | []byte](m *matcher, b T) (Token, bool) {
	if len(m.tokens) == 0 {
		return Token{}, false
	}
	var w uint64
	for i := 0; i < len(b); i++ {
		w = w<<8 | uint64(lowerByte(b[i]))
		if i < window-1 {
			continue
		}
		h := filterHash(w)
		if m.filter[h>>6]&(1<<(h&63)) == 0 {
			continue
		}
		start := i - (window - 1)
		for _, pi := range m.heads[w] {
			v := m.lower[pi]
			if len(b)-start >= len(v) && equalFoldASCII(b[start:start+len(v)], v) {
				return m.tokens[m.owner[pi]], true
			}
		}
	}
	return Token{}, false
}

func lowerByte(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// equalFoldASCII compares b with lower, already lower case.
func equalFoldASCII[T string | []byte](b T, lower string) bool {
	for i := 0; i < len(lower); i++ {
		if lowerByte(b[i]) != lower[i] {
			return false
		}
	}
	return true
}

// maxUnescape bounds how many layers of percent-encoding ScanEscaped
// peels (a server decodes once; a chain of proxies and frameworks may
// decode again).
const maxUnescape = 3

// ScanEscaped is ScanString that also looks through percent-escapes (any
// case, some bytes or all, up to maxUnescape layers; a malformed escape is
// kept as it is): a URL path, query or header value is decoded by the
// server, so "%41KIA..." reaches it as the token.
func (r *Registry) ScanEscaped(s string) (Token, bool) {
	if r.Empty() {
		return Token{}, false
	}
	m := r.m.Load()
	for range maxUnescape + 1 {
		if t, ok := scan(m, s); ok {
			return t, true
		}
		d, changed := unescapeLax(s)
		if !changed {
			break
		}
		s = d
	}
	return Token{}, false
}

// unescapeLax decodes every well-formed %XX in s once.
func unescapeLax(s string) (string, bool) {
	if strings.IndexByte(s, '%') < 0 {
		return s, false
	}
	b := make([]byte, 0, len(s))
	changed := false
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if d, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b = append(b, byte(d))
				i += 2
				changed = true
				continue
			}
		}
		b = append(b, s[i])
	}
	return string(b), changed
}

// ScanName is ScanString for a DNS name, which also looks at the name with
// its dots removed: a token split over labels ("akia1234.5678abcd...")
// reaches the zone's server whole. Tokens hold no dot, so nothing else
// matches that did not before.
func (r *Registry) ScanName(name string) (Token, bool) {
	if t, ok := r.ScanString(name); ok || strings.IndexByte(name, '.') < 0 {
		return t, ok
	}
	return r.ScanString(strings.ReplaceAll(name, ".", ""))
}
