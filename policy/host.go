package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// ErrBadTarget is wrapped by every error that rejects a host, URL or
// authority: the target is denied with reason bad-target.
var ErrBadTarget = errors.New("bad target")

func badTarget(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadTarget}, args...)...)
}

// idnaProfile maps Unicode hosts the way a browser's URL parser does
// (UTS #46 non-transitional), so that fullwidth digits and ideographic full
// stops become ASCII before the host is classified. Hyphen and STD3 checks are
// done by hand afterwards: real hosts such as "r3---sn-x.googlevideo.com"
// would fail CheckHyphens, and underscores appear in real hosts.
var idnaProfile = idna.New(
	idna.MapForLookup(),
	idna.BidiRule(),
	idna.Transitional(false),
	idna.StrictDomainName(false),
	idna.CheckHyphens(false),
)

const (
	maxHostLen  = 253
	maxLabelLen = 63
)

// NormalizeHost turns a host as it appears in a URL or CONNECT authority
// (without port; IPv6 in brackets) into its canonical name, or into an
// address when the host denotes one in any spelling. Exactly one of name and
// addr is set on success. Anything ambiguous is an error wrapping
// ErrBadTarget rather than a guess.
func NormalizeHost(h string) (name string, addr netip.Addr, err error) {
	if h == "" {
		return "", netip.Addr{}, badTarget("empty host")
	}
	if h[0] == '[' {
		a, err := parseBracketedV6(h)
		return "", a, err
	}
	ascii := true
	for i := 0; i < len(h); i++ {
		c := h[i]
		switch {
		case c >= 0x80:
			ascii = false
		case c == '%':
			return "", netip.Addr{}, badTarget("percent-escape in host %q", h)
		case c == '\\':
			return "", netip.Addr{}, badTarget("backslash in host %q", h)
		case c == '@':
			return "", netip.Addr{}, badTarget("userinfo in host %q", h)
		case c <= ' ' || c == 0x7f:
			return "", netip.Addr{}, badTarget("control or space character in host %q", h)
		case c == ':' || c == '[' || c == ']':
			return "", netip.Addr{}, badTarget("bare IPv6 or stray bracket in host %q (IPv6 needs [brackets])", h)
		}
	}
	s := h
	if !ascii && !utf8.ValidString(h) {
		return "", netip.Addr{}, badTarget("host %q is not valid UTF-8", h)
	}
	if !ascii || hasPunycode(s) {
		if s, err = idnaProfile.ToASCII(h); err != nil {
			return "", netip.Addr{}, badTarget("host %q: %v", h, err)
		}
		// The mapping must be stable: an A-label that does not map back to
		// itself (found by FuzzNormalizeHost) is refused, not passed on.
		if again, err := idnaProfile.ToASCII(s); err != nil || again != s {
			return "", netip.Addr{}, badTarget("host %q has no stable IDNA form", h)
		}
	}
	s = lowerASCII(s)
	s = strings.TrimSuffix(s, ".")
	if s == "" {
		return "", netip.Addr{}, badTarget("empty host %q", h)
	}
	if len(s) > maxHostLen {
		return "", netip.Addr{}, badTarget("host longer than %d bytes", maxHostLen)
	}
	if endsInNumber(s) {
		a, err := parseIPv4Loose(s)
		if err != nil {
			return "", netip.Addr{}, badTarget("host %q: %v", h, err)
		}
		return "", a, nil
	}
	if err := checkLabels(s); err != nil {
		return "", netip.Addr{}, badTarget("host %q: %v", h, err)
	}
	return s, netip.Addr{}, nil
}

func hasPunycode(s string) bool {
	for i := 0; i+4 <= len(s); i++ {
		if (i == 0 || s[i-1] == '.') && strings.EqualFold(s[i:i+4], "xn--") {
			return true
		}
	}
	return false
}

// lowerASCII lower-cases s, allocating only when it must.
func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' {
			return strings.ToLower(s)
		}
	}
	return s
}

// checkLabels enforces the letters-digits-hyphen(-underscore) alphabet and
// label lengths on an already lower-cased ASCII name.
func checkLabels(s string) error {
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '.' {
			switch n := i - start; {
			case n == 0:
				return errors.New("empty label")
			case n > maxLabelLen:
				return fmt.Errorf("label longer than %d bytes", maxLabelLen)
			}
			start = i + 1
			continue
		}
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("character %q not allowed in a host name", c)
		}
	}
	return nil
}

// endsInNumber reports whether the last label of s looks like a number (all
// digits, or 0x followed by hex digits), the WHATWG URL rule for "this host is
// an IPv4 address or invalid". A host like "1.2.3.foo" is a name; "foo.123"
// is not a valid name and not an address, and parseIPv4Loose rejects it.
func endsInNumber(s string) bool {
	last := s[strings.LastIndexByte(s, '.')+1:]
	if last == "" {
		return false
	}
	if len(last) >= 2 && last[0] == '0' && last[1] == 'x' {
		for i := 2; i < len(last); i++ {
			if !isHex(last[i]) {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(last); i++ {
		if last[i] < '0' || last[i] > '9' {
			return false
		}
	}
	return true
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' }

// parseIPv4Loose parses every IPv4 spelling that inet_aton(3) accepts: one to
// four parts, each decimal, octal (leading 0) or hex (0x); the last part fills
// the remaining bytes. Values that overflow their bytes are rejected, not
// wrapped: some parsers wrap, so such a host has no single meaning.
func parseIPv4Loose(s string) (netip.Addr, error) {
	var parts [4]uint64
	n := 0
	for s != "" {
		if n == 4 {
			return netip.Addr{}, errors.New("numeric host with more than 4 parts")
		}
		p := s
		if i := strings.IndexByte(s, '.'); i >= 0 {
			p, s = s[:i], s[i+1:]
			if s == "" {
				return netip.Addr{}, errors.New("empty part in numeric host")
			}
		} else {
			s = ""
		}
		v, err := parseIPv4Part(p)
		if err != nil {
			return netip.Addr{}, err
		}
		parts[n] = v
		n++
	}
	var v uint64
	switch n {
	case 1:
		v = parts[0]
		if v > 0xffffffff {
			return netip.Addr{}, errors.New("numeric host out of range")
		}
	default:
		for i := 0; i < n-1; i++ {
			if parts[i] > 0xff {
				return netip.Addr{}, errors.New("numeric host part out of range")
			}
			v = v<<8 | parts[i]
		}
		rest := uint(8 * (5 - n))
		if parts[n-1] >= 1<<rest {
			return netip.Addr{}, errors.New("numeric host part out of range")
		}
		v = v<<rest | parts[n-1]
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), nil
}

func parseIPv4Part(p string) (uint64, error) {
	if p == "" {
		return 0, errors.New("empty part in numeric host")
	}
	base := 10
	digits := p
	switch {
	case len(p) >= 2 && p[0] == '0' && p[1] == 'x':
		base, digits = 16, p[2:]
		if digits == "" { // inet_aton reads a bare "0x" as 0
			return 0, nil
		}
	case len(p) >= 2 && p[0] == '0':
		base, digits = 8, p[1:]
	}
	if len(digits) > 32 {
		return 0, errors.New("numeric host part out of range")
	}
	v, err := strconv.ParseUint(digits, base, 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return 0, errors.New("numeric host part out of range")
		}
		return 0, fmt.Errorf("%q is neither a name nor a number", p)
	}
	return v, nil
}

func parseBracketedV6(h string) (netip.Addr, error) {
	if len(h) < 2 || h[len(h)-1] != ']' {
		return netip.Addr{}, badTarget("unterminated IPv6 literal %q", h)
	}
	inner := h[1 : len(h)-1]
	if strings.IndexByte(inner, '%') >= 0 {
		return netip.Addr{}, badTarget("IPv6 zone in host %q", h)
	}
	a, err := netip.ParseAddr(inner)
	if err != nil || !a.Is6() {
		return netip.Addr{}, badTarget("invalid IPv6 literal %q", h)
	}
	return a, nil
}

// SplitHostPort splits a CONNECT authority or URL host into host and port.
// The host keeps IPv6 brackets. The port must be 1-65535 in plain decimal.
func SplitHostPort(hp string, defaultPort uint16) (host string, port uint16, err error) {
	host = hp
	if i := strings.LastIndexByte(hp, ':'); i >= 0 && (hp[0] != '[' || i > strings.LastIndexByte(hp, ']')) {
		host = hp[:i]
		ps := hp[i+1:]
		if ps == "" {
			return "", 0, badTarget("empty port in %q", hp)
		}
		if len(ps) > 5 {
			return "", 0, badTarget("port out of range in %q", hp)
		}
		v := 0
		for j := 0; j < len(ps); j++ {
			if ps[j] < '0' || ps[j] > '9' {
				return "", 0, badTarget("port %q is not a number", ps)
			}
			v = v*10 + int(ps[j]-'0')
		}
		if v < 1 || v > 65535 {
			return "", 0, badTarget("port out of range in %q", hp)
		}
		port = uint16(v)
	} else {
		port = defaultPort
	}
	if port == 0 {
		return "", 0, badTarget("no port in %q", hp)
	}
	return host, port, nil
}
