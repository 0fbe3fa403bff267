package classify

import "strings"

// Decoding helpers shared by the page-type classifier and the mirror
// grammars: one reading of hex escapes and media types for both, so the two
// cannot disagree about what a request says.

// unhex is the value of hex digit c, or -1.
func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// mediaType is ct without parameters or surrounding blanks, in the case it
// was sent: compare it with strings.EqualFold.
func mediaType(ct string) string {
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return strings.Trim(ct, " \t")
}
