package honeytoken

import (
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"
)

// TestScanEncoded: an agent that found a canary re-encodes it with a
// standard codec before sending it; each codec is an exact, cheap check
// (the token's encoded form at every alignment), so each must be caught.
func TestScanEncoded(t *testing.T) {
	r := NewRegistry()
	ts := mustIssue(t, "agent-a")
	r.Set("run", ts)
	type codec struct {
		name string
		enc  func([]byte) string
	}
	codecs := []codec{
		{"base64", base64.StdEncoding.EncodeToString},
		{"base64 raw", base64.RawStdEncoding.EncodeToString},
		{"base64url", base64.URLEncoding.EncodeToString},
		{"hex", hex.EncodeToString},
		{"HEX", func(b []byte) string { return strings.ToUpper(hex.EncodeToString(b)) }},
		{"base32", base32.StdEncoding.EncodeToString},
		{"base32 lower", func(b []byte) string { return strings.ToLower(base32.StdEncoding.EncodeToString(b)) }},
	}
	for _, tk := range ts {
		for _, c := range codecs {
			// Every alignment: the token at each offset of the plaintext.
			for pad := 0; pad < 5; pad++ {
				plain := []byte(`{"k":"` + strings.Repeat("x", pad) + tk.Value + `","n":1}`)
				in := "payload=" + c.enc(plain)
				got, ok := r.ScanString(in)
				if !ok || got.Value != tk.Value {
					t.Errorf("%s %s, offset %d: not found in %q", tk.Kind, c.name, pad, in)
				}
			}
		}
	}
	// Encoded forms of other text, and of a token cut short, match nothing.
	for _, in := range []string{
		base64.StdEncoding.EncodeToString([]byte(strings.Repeat("requests==2.32.3 ", 20))),
		hex.EncodeToString([]byte(ts[0].Value[:15])),
		base64.StdEncoding.EncodeToString([]byte(ts[1].Value[:12])),
	} {
		if got, ok := r.ScanString(in); ok {
			t.Errorf("ScanString(%q) = %s: false positive", in, got.Kind)
		}
	}
	if r.MaxLen() != 2*len(ts[1].Value) { // the hex form of a 40-character token
		t.Errorf("MaxLen() = %d, want %d", r.MaxLen(), 2*len(ts[1].Value))
	}
	if n := len(r.Tokens()); n != len(ts) {
		t.Fatalf("Tokens() = %d, want %d: encoded forms are not tokens", n, len(ts))
	}
}

// TestScanEscapedAndName: percent-escapes (any case, partial, doubled) and
// a DNS name whose labels split a token.
func TestScanEscapedAndName(t *testing.T) {
	r := NewRegistry()
	ts := mustIssue(t, "agent-a")
	r.Set("run", ts)
	v := ts[0].Value
	esc := func(s string) string {
		var b strings.Builder
		for i := 0; i < len(s); i++ {
			if i%2 == 0 {
				b.WriteString("%" + strings.ToLower(hex.EncodeToString([]byte{s[i]})))
			} else {
				b.WriteByte(s[i])
			}
		}
		return b.String()
	}
	for _, tt := range []struct {
		name, in string
		want     bool
	}{
		{"plain", "k=" + v, true},
		{"every byte escaped", "k=" + esc(v), true},
		{"upper-case escape", "k=%" + strings.ToUpper(hex.EncodeToString([]byte{v[0]})) + v[1:], true},
		{"double-encoded", "k=%25" + hex.EncodeToString([]byte{v[0]}) + v[1:], true},
		{"malformed escape before", "k=%zz" + "%" + hex.EncodeToString([]byte{v[0]}) + v[1:], true},
		{"no token", "k=%41%42%43", false},
	} {
		if _, ok := r.ScanEscaped(tt.in); ok != tt.want {
			t.Errorf("ScanEscaped %s (%q) = %v, want %v", tt.name, tt.in, ok, tt.want)
		}
	}
	for _, tt := range []struct {
		name string
		want bool
	}{
		{strings.ToLower(v[:7]) + "." + strings.ToLower(v[7:]) + ".exfil.example.com", true},
		{v[:3] + "." + v[3:9] + "." + v[9:] + ".example.com", true},
		{"www.example.com", false},
	} {
		if _, ok := r.ScanName(tt.name); ok != tt.want {
			t.Errorf("ScanName(%q) = %v, want %v", tt.name, ok, tt.want)
		}
	}
}
