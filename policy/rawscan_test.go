package policy

import (
	"strings"
	"testing"
)

// TestHighRiskIn: the metadata address and loopback names in the
// URL-parser-confusion spellings of public SSRF lists are found in targets
// no parser accepts; public hosts in the same shapes are not.
func TestHighRiskIn(t *testing.T) {
	p, err := Parse(strings.NewReader("version: 1\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		raw  string
		want string
	}{
		{"http://169.254.169.254\\@example.com/", "169.254.169.254"},
		{"http://example.com@169.254.169.254/", "169.254.169.254"},
		{"http://169.254.169.254#@example.com/", "169.254.169.254"},
		{"http://169.254.169.254\x01/", "169.254.169.254"},
		{"http://2852039166/", "169.254.169.254"},
		{"http://0xA9FEA9FE/", "169.254.169.254"},
		{"http://0251.0376.0251.0376/", "169.254.169.254"},
		{"http://%31%36%39.254.169.254/", "169.254.169.254"},
		{"\xe2\x91\xa0\xe2\x91\xa5\xe2\x91\xa8.254.169.254", "169.254.169.254"},
		{"http://[::ffff:169.254.169.254]:80/", "::ffff:169.254.169.254"},
		{"http://[fd00:ec2::254]/", "fd00:ec2::254"},
		{"http://metadata.google.internal:80\\x/", "metadata.google.internal"},
		{"http://user:pass@localhost:8080/", "localhost"},
		{"169.254.169.254:80", "169.254.169.254"},
		{"http://example.com\\@example.org/", ""},
		{"http://exa mple.com/", ""},
		{"http://127.0.0.1:80/", ""}, // loopback is special, not high-risk (as in check)
		{"", ""},
	}
	for _, tt := range tests {
		got, ok := p.HighRiskIn(tt.raw)
		if got != tt.want || ok != (tt.want != "") {
			t.Errorf("HighRiskIn(%q) = %q %v, want %q", tt.raw, got, ok, tt.want)
		}
	}
}

// FuzzHighRiskIn: any input is scanned without panic, within the bounds,
// and whatever it finds normalizes to a high-risk host.
func FuzzHighRiskIn(f *testing.F) {
	p, err := Parse(strings.NewReader("version: 1\n"), "t.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add("http://169.254.169.254\\@example.com/")
	f.Add("http://%31%36%39.254.169.254/")
	f.Fuzz(func(t *testing.T, raw string) {
		h, ok := p.HighRiskIn(raw)
		if !ok {
			return
		}
		if _, hr := p.highRiskHost(h); !hr {
			t.Errorf("HighRiskIn(%q) found %q, which is not high-risk", raw, h)
		}
	})
}
