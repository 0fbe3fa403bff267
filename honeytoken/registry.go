package honeytoken

import (
	"encoding/base64"
	"maps"
	"slices"
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
	lower  []string           // tokens' values, ASCII lower case
	heads  map[uint64][]int32 // first window bytes (lower case) → tokens
	filter [filterBits / 64]uint64
}

func newMatcher(ts []Token) *matcher {
	m := &matcher{heads: map[uint64][]int32{}}
	for _, t := range ts {
		if len(t.Value) < window {
			continue // never issued; a short value would match too much
		}
		v := strings.ToLower(t.Value)
		var w uint64
		for i := 0; i < window; i++ {
			w = w<<8 | uint64(v[i])
		}
		m.heads[w] = append(m.heads[w], int32(len(m.tokens)))
		m.tokens = append(m.tokens, t)
		m.lower = append(m.lower, v)
		h := filterHash(w)
		m.filter[h>>6] |= 1 << (h & 63)
	}
	return m
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
		for _, ti := range m.heads[w] {
			v := m.lower[ti]
			if len(b)-start >= len(v) && equalFoldASCII(b[start:start+len(v)], v) {
				return m.tokens[ti], true
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
