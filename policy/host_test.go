package policy

import (
	"errors"
	"net/netip"
	"testing"
)

func TestNormalizeHost(t *testing.T) {
	tests := []struct {
		name, in string
		wantName string
		wantAddr string
		wantErr  bool
	}{
		{"plain", "example.com", "example.com", "", false},
		{"upper", "EXAMPLE.Com", "example.com", "", false},
		{"trailing dot", "example.com.", "example.com", "", false},
		{"two trailing dots", "example.com..", "", "", true},
		{"leading dot", ".example.com", "", "", true},
		{"empty label", "a..example.com", "", "", true},
		{"underscore", "_acme.example.com", "_acme.example.com", "", false},
		{"googlevideo hyphens", "rr3---sn-abc.googlevideo.com", "rr3---sn-abc.googlevideo.com", "", false},
		{"idna", "bücher.example", "xn--bcher-kva.example", "", false},
		{"idna upper", "BÜCHER.example", "xn--bcher-kva.example", "", false},
		{"punycode passes", "xn--bcher-kva.example", "xn--bcher-kva.example", "", false},
		{"bad punycode", "xn--zz-.example", "", "", true},
		{"fullwidth letters", "ｅｘａｍｐｌｅ.com", "example.com", "", false},
		{"ideographic dot", "example。com", "example.com", "", false},
		{"fullwidth digits are an address", "１６９．２５４．１６９．２５４", "", "169.254.169.254", false},
		{"percent", "exa%6dple.com", "", "", true},
		{"backslash", "example.com\\x", "", "", true},
		{"userinfo", "u@example.com", "", "", true},
		{"space", "exa mple.com", "", "", true},
		{"nul", "example.com\x00", "", "", true},
		{"bare ipv6", "::1", "", "", true},
		{"bracket v6", "[::1]", "", "::1", false},
		{"bracket v6 zone", "[fe80::1%eth0]", "", "", true},
		{"bracket v4", "[127.0.0.1]", "", "", true},
		{"unterminated", "[::1", "", "", true},
		{"dotted", "169.254.169.254", "", "169.254.169.254", false},
		{"dotted trailing dot", "169.254.169.254.", "", "169.254.169.254", false},
		{"decimal", "2852039166", "", "169.254.169.254", false},
		{"hex", "0xA9FEA9FE", "", "169.254.169.254", false},
		{"octal parts", "0251.0376.0251.0376", "", "169.254.169.254", false},
		{"short 3", "169.254.43518", "", "169.254.169.254", false},
		{"short 2", "169.16689662", "", "169.254.169.254", false},
		{"hex parts", "0xa9.0xfe.0xa9.0xfe", "", "169.254.169.254", false},
		{"bare 0x", "0x", "", "0.0.0.0", false},
		{"zero", "0", "", "0.0.0.0", false},
		{"loopback short", "127.1", "", "127.0.0.1", false},
		{"octal 9 invalid", "0179.0.0.1", "", "", true},
		{"overflow 1 part", "4294967296", "", "", true},
		{"overflow part", "256.1.1.1", "", "", true},
		{"overflow last", "1.2.3.256", "", "", true},
		{"overflow 3 parts", "1.2.65536", "", "", true},
		{"five parts", "1.2.3.4.5", "", "", true},
		{"numeric last label", "example.123", "", "", true},
		{"hex last label", "example.0x1", "", "", true},
		{"letters after number", "1.2.3.4x", "", "", false},
		{"name with number first", "1.2.3.example", "1.2.3.example", "", false},
		{"long label", string(make([]byte, 0)) + "a234567890123456789012345678901234567890123456789012345678901234.com", "", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, a, err := NormalizeHost(tt.in)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("NormalizeHost(%q) = %q, %v; want error", tt.in, n, a)
				}
				if !errors.Is(err, ErrBadTarget) {
					t.Fatalf("error %v does not wrap ErrBadTarget", err)
				}
				return
			}
			if tt.name == "letters after number" {
				// "4x" is a valid last label, so this is a name
				if err != nil || n != "1.2.3.4x" {
					t.Fatalf("got %q, %v, %v", n, a, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("NormalizeHost(%q): %v", tt.in, err)
			}
			if n != tt.wantName {
				t.Errorf("name: got %q, want %q", n, tt.wantName)
			}
			if tt.wantAddr == "" && a.IsValid() || tt.wantAddr != "" && a != netip.MustParseAddr(tt.wantAddr) {
				t.Errorf("addr: got %v, want %q", a, tt.wantAddr)
			}
		})
	}
}

func TestParseURL(t *testing.T) {
	tests := []struct {
		in       string
		host     string
		port     uint16
		path, q  string
		wantErr  bool
		wantName bool
	}{
		{in: "http://example.com", host: "example.com", port: 80, path: "/"},
		{in: "https://Example.com:8443/a/b?x=1", host: "example.com", port: 8443, path: "/a/b", q: "x=1"},
		{in: "HTTP://example.com/", host: "example.com", port: 80, path: "/"},
		{in: "http://[::1]:8080/x", host: "::1", port: 8080, path: "/x"},
		{in: "http://0xA9FEA9FE/latest/meta-data/", host: "169.254.169.254", port: 80, path: "/latest/meta-data/"},
		{in: "http://user@example.com/", wantErr: true},
		{in: "http://evil.com@169.254.169.254/", wantErr: true},
		{in: "http://169.254.169.254\\@evil.com/", wantErr: true},
		{in: "http://example.com/a#frag", wantErr: true},
		{in: "ftp://example.com/", wantErr: true},
		{in: "/relative", wantErr: true},
		{in: "http://example.com:0/", wantErr: true},
		{in: "http://example.com:65536/", wantErr: true},
		{in: "http://example.com:+80/", wantErr: true},
		{in: "http://example.com:/", wantErr: true},
		{in: "http:///path", wantErr: true},
		{in: "http://%31%36%39.254.169.254/", wantErr: true},
		{in: "http://example.com/a b", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseURL(tt.in)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("ParseURL(%q) = %+v, want error", tt.in, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseURL(%q): %v", tt.in, err)
			}
			if got.Host() != tt.host || got.Port != tt.port || got.Path != tt.path || got.Query != tt.q {
				t.Errorf("got host %q port %d path %q query %q, want %q %d %q %q", got.Host(), got.Port, got.Path, got.Query, tt.host, tt.port, tt.path, tt.q)
			}
		})
	}
}

func TestParseAuthority(t *testing.T) {
	for _, ok := range []string{"example.com:443", "[2001:db8::1]:443", "1.2.3.4:22"} {
		if _, err := ParseAuthority(ok); err != nil {
			t.Errorf("ParseAuthority(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"example.com", "example.com:", ":443", "[::1]", "a@b:443", "example.com:99999", "[fe80::1%eth0]:443"} {
		if _, err := ParseAuthority(bad); err == nil {
			t.Errorf("ParseAuthority(%q): want error", bad)
		}
	}
}
