package policy

import (
	"net/url"
	"strings"
)

// maxRawScan bounds the bytes HighRiskIn looks at: a request target is
// capped at MaxURLLen anyway.
const maxRawScan = MaxURLLen + 64

// maxRawCandidates bounds the host candidates tried per target.
const maxRawCandidates = 64

// HighRiskIn scans a raw request target (absolute URL, authority, or a Host
// header value) that may be too malformed to parse for any host that
// normalizes, as NormalizeHost would, to a high-risk name or address. The
// URL-confusion spellings of the metadata address ("a@169.254.169.254",
// "169.254.169.254#@a", backslashes, control characters, percent-escapes,
// Unicode digits) each name it somewhere between delimiters: every such
// piece is a candidate. It returns the normalized host found.
func (p *Policy) HighRiskIn(raw string) (string, bool) {
	if len(raw) > maxRawScan {
		raw = raw[:maxRawScan]
	}
	if i := strings.Index(raw, "://"); i >= 0 {
		raw = raw[i+3:]
	}
	seen := 0
	try := func(s string) (string, bool) {
		for _, piece := range strings.FieldsFunc(s, isRawDelim) {
			if seen++; seen > maxRawCandidates {
				return "", false
			}
			if h, ok := p.highRiskHost(piece); ok {
				return h, true
			}
		}
		return "", false
	}
	if h, ok := try(raw); ok {
		return h, true
	}
	// A percent-escaped host ("%31%36%39.254.169.254") names its address
	// once a lenient parser decodes it.
	if strings.IndexByte(raw, '%') >= 0 {
		if dec, err := url.PathUnescape(raw); err == nil && dec != raw {
			return try(dec)
		}
	}
	return "", false
}

// isRawDelim splits a raw target into host candidates: the URL and
// authority delimiters, and anything a host cannot hold.
func isRawDelim(r rune) bool {
	switch r {
	case '@', '#', '/', '\\', '?', '&', '=', ';', ',', '"', '\'', '<', '>', '`', '|', '{', '}', '^', ' ', '%':
		return true
	}
	return r < ' ' || r == 0x7f
}

// highRiskHost reports whether one candidate (host, host:port or [v6]:port)
// is a high-risk name or address.
func (p *Policy) highRiskHost(piece string) (string, bool) {
	cands := []string{piece}
	if h, _, err := SplitHostPort(piece, 1); err == nil && h != piece {
		cands = append(cands, h)
	} else if i := strings.LastIndexByte(piece, ':'); i > 0 && piece[0] != '[' {
		cands = append(cands, piece[:i]) // a port that is not one
	}
	for _, c := range cands {
		name, addr, err := NormalizeHost(c)
		if err != nil {
			continue
		}
		if addr.IsValid() {
			if ClassifyAddr(addr).Class == ClassHighRisk || p.deniedAddr(addr) {
				return addr.String(), true
			}
			continue
		}
		if p.HighRiskName(name) {
			return name, true
		}
	}
	return "", false
}
