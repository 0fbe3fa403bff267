package classify

import (
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// foldUnicode maps a decoded path that holds non-ASCII bytes to the ASCII a
// reader would see: compatibility forms (fullwidth ｌｏｇｉｎ) by NFKD,
// combining marks dropped (lógin), and the common confusables (Turkish
// dotless ı, Cyrillic and Greek look-alikes, dash and slash variants)
// mapped to their Latin twin. Servers and browsers fold some of these;
// signal words must match whichever spelling an agent sends. Runes with no
// ASCII twin are kept. changed reports whether anything was folded.
func foldUnicode(b []byte) (out []byte, changed bool) {
	d := norm.NFKD.Bytes(b)
	out = make([]byte, 0, len(d))
	for i := 0; i < len(d); {
		r, n := utf8.DecodeRune(d[i:])
		i += n
		if r == utf8.RuneError && n == 1 {
			out = append(out, d[i-1]) // not UTF-8: keep the byte
			continue
		}
		if unicode.Is(unicode.Mn, r) {
			continue
		}
		if c, ok := confusables[r]; ok {
			r = c
		}
		out = utf8.AppendRune(out, r)
	}
	return out, string(out) != string(b)
}

// confusables are look-alikes of ASCII letters and separators (after NFKD),
// from Unicode's confusables.txt: the Latin, Cyrillic and Greek letters an
// agent can use to spell a signal word another way.
var confusables = map[rune]rune{
	'ı': 'i', 'ȷ': 'j', 'ſ': 's', 'ꞵ': 'b', 'ɑ': 'a', 'ɡ': 'g', 'ɩ': 'i', 'ʟ': 'l', 'ɴ': 'n', 'ʀ': 'r',
	// Cyrillic
	'а': 'a', 'в': 'b', 'е': 'e', 'ё': 'e', 'һ': 'h', 'і': 'i', 'ї': 'i', 'ј': 'j', 'к': 'k', 'м': 'm',
	'н': 'h', 'о': 'o', 'р': 'p', 'с': 'c', 'т': 't', 'у': 'y', 'х': 'x', 'ѕ': 's', 'ԁ': 'd', 'ԛ': 'q',
	'ԝ': 'w', 'ӏ': 'l', 'ѵ': 'v', 'ь': 'b', 'п': 'n', 'г': 'r',
	'А': 'A', 'В': 'B', 'Е': 'E', 'Н': 'H', 'І': 'I', 'Ј': 'J', 'К': 'K', 'М': 'M', 'О': 'O', 'Р': 'P',
	'С': 'C', 'Т': 'T', 'Х': 'X', 'Ѕ': 'S', 'Ү': 'Y', 'Ԁ': 'D', 'Ԛ': 'Q', 'Ԝ': 'W', 'Ӏ': 'I',
	// Greek
	'α': 'a', 'β': 'b', 'γ': 'y', 'ε': 'e', 'ι': 'i', 'κ': 'k', 'ν': 'v', 'ο': 'o', 'ρ': 'p', 'τ': 't',
	'υ': 'u', 'χ': 'x', 'ω': 'w', 'Α': 'A', 'Β': 'B', 'Ε': 'E', 'Η': 'H', 'Ι': 'I', 'Κ': 'K', 'Μ': 'M',
	'Ν': 'N', 'Ο': 'O', 'Ρ': 'P', 'Τ': 'T', 'Υ': 'Y', 'Χ': 'X', 'Ζ': 'Z',
	// separators
	'‐': '-', '‑': '-', '‒': '-', '–': '-', '—': '-', '―': '-', '−': '-', '⁄': '/', '∕': '/', '⧸': '/',
	'＿': '_', '․': '.', '·': '.',
}
