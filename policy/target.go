package policy

import (
	"net/netip"
	"strings"
)

// Target is a normalized request target: exactly one of Name and Addr is set.
type Target struct {
	Scheme string // "http" or "https" for a URL; "" for a CONNECT authority
	Name   string // normalized host name (lower case, A-labels, no trailing dot)
	Addr   netip.Addr
	Port   uint16
	Path   string // as sent (escaped); "/" at least for URLs, "" for CONNECT
	Query  string // without '?'
}

// Host is the normalized host: the name, or the address in canonical form.
func (t *Target) Host() string {
	if t.Addr.IsValid() {
		return t.Addr.String()
	}
	return t.Name
}

// MaxURLLen bounds what ParseURL accepts at all (and the proxy the request
// target of every head); mirror rules cap far lower.
const MaxURLLen = 8192

// ParseURL parses an absolute-form request target ("http://host:port/p?q").
// It reads the raw string itself instead of net/url, which would decode
// percent-escapes in the host and accept userinfo.
func ParseURL(raw string) (Target, error) {
	if len(raw) > MaxURLLen {
		return Target{}, badTarget("URL longer than %d bytes", MaxURLLen)
	}
	var t Target
	i := strings.Index(raw, "://")
	if i < 0 {
		return Target{}, badTarget("not an absolute URL: %.80q", raw)
	}
	t.Scheme = lowerASCII(raw[:i])
	var defPort uint16
	switch t.Scheme {
	case "http":
		defPort = 80
	case "https":
		defPort = 443
	default:
		return Target{}, badTarget("scheme %q not supported (http or https)", t.Scheme)
	}
	rest := raw[i+3:]
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority := rest[:end]
	rest = rest[end:]
	if strings.IndexByte(rest, '#') >= 0 {
		return Target{}, badTarget("fragment in request URL")
	}
	for j := 0; j < len(rest); j++ {
		if c := rest[j]; c <= ' ' || c == 0x7f || c == '\\' {
			return Target{}, badTarget("control character, space or backslash in URL path")
		}
	}
	t.Path, t.Query, _ = strings.Cut(rest, "?")
	if t.Path == "" {
		t.Path = "/"
	}
	if err := t.setAuthority(authority, defPort); err != nil {
		return Target{}, err
	}
	return t, nil
}

// ParseAuthority parses a CONNECT target "host:port"; the port is required.
func ParseAuthority(hp string) (Target, error) {
	var t Target
	if err := t.setAuthority(hp, 0); err != nil {
		return Target{}, err
	}
	return t, nil
}

func (t *Target) setAuthority(hp string, defPort uint16) error {
	if hp == "" {
		return badTarget("empty authority")
	}
	if strings.IndexByte(hp, '@') >= 0 {
		return badTarget("userinfo in authority %q", hp)
	}
	host, port, err := SplitHostPort(hp, defPort)
	if err != nil {
		return err
	}
	t.Port = port
	t.Name, t.Addr, err = NormalizeHost(host)
	return err
}
