package honeytoken

import (
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"strings"
)

// forms returns the strings the scan looks for to find v: v itself and
// its encodings under the standard codecs an agent reaches for first
// (base64 in both alphabets, hex, base32), each at every alignment the
// token can have inside a longer encoded text. An encoded form keeps only
// the characters that depend on the token's bytes alone (whole groups), so
// it is found whatever precedes or follows the token. Each form encodes at
// least 14 random characters of the token: an exact match of it is the token,
// never chance. Case is folded by the scan, which covers upper- and
// lower-case hex and base32.
func forms(v string) []string {
	out := []string{v, hex.EncodeToString([]byte(v))}
	grouped := func(group, chars int, enc func([]byte) string) {
		for skip := range group {
			s := []byte(v[skip:])
			n := len(s) / group * group
			if n == 0 {
				continue
			}
			out = append(out, enc(s[:n])[:n/group*chars])
		}
	}
	grouped(3, 4, base64.StdEncoding.EncodeToString)
	grouped(5, 8, base32.StdEncoding.EncodeToString)
	// base64url differs only in '+' and '/'.
	for _, f := range out[2:] {
		if strings.ContainsAny(f, "+/") {
			out = append(out, strings.NewReplacer("+", "-", "/", "_").Replace(f))
		}
	}
	return out
}
