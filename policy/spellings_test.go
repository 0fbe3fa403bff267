package policy

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

// openPolicy allows everything a config can allow: any name, every public
// address, every port. Special-use and high-risk targets must still be
// denied under it.
const openPolicy = `
version: 1
allow:
  - name: everything
    hosts: ["*"]
    cidrs: [0.0.0.0/0, "::/0"]
    ports: ["1-65535"]
`

// v4Spellings returns inet_aton spellings of a: dotted decimal, octal, hex,
// mixed, and the 1-, 2- and 3-part short forms, each also with a trailing
// dot.
func v4Spellings(a netip.Addr) []string {
	b := a.As4()
	u := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	s := []string{
		fmt.Sprintf("%d.%d.%d.%d", b[0], b[1], b[2], b[3]),
		fmt.Sprintf("%d", u),
		fmt.Sprintf("0x%x", u),
		fmt.Sprintf("0X%X", u),
		fmt.Sprintf("0%o", u),
		fmt.Sprintf("0x%08x", u),
		fmt.Sprintf("0%o.0%o.0%o.0%o", b[0], b[1], b[2], b[3]),
		fmt.Sprintf("0x%x.0x%x.0x%x.0x%x", b[0], b[1], b[2], b[3]),
		fmt.Sprintf("0x%x.%d.0%o.%d", b[0], b[1], b[2], b[3]),
		fmt.Sprintf("%d.%d.%d", b[0], b[1], uint32(b[2])<<8|uint32(b[3])),
		fmt.Sprintf("%d.%d", b[0], u&0xffffff),
		fmt.Sprintf("0x%x.0x%x", b[0], u&0xffffff),
		fmt.Sprintf("00%o.%d.%d.%d", b[0], b[1], b[2], b[3]),
	}
	for _, x := range s[:4] {
		s = append(s, x+".")
	}
	return s
}

// v6Spellings returns IPv6 literals that carry a: mapped, compatible,
// NAT64 (well-known and local-use), 6to4 and Teredo.
func v6Spellings(a netip.Addr) []string {
	b := a.As4()
	hex := fmt.Sprintf("%x:%x", uint16(b[0])<<8|uint16(b[1]), uint16(b[2])<<8|uint16(b[3]))
	inv := fmt.Sprintf("%x:%x", uint16(^b[0])<<8|uint16(^b[1]), uint16(^b[2])<<8|uint16(^b[3]))
	return []string{
		"[::ffff:" + a.String() + "]",
		"[::ffff:" + hex + "]",
		"[::FFFF:" + strings.ToUpper(hex) + "]",
		"[0:0:0:0:0:ffff:" + a.String() + "]",
		"[::" + a.String() + "]",
		"[64:ff9b::" + a.String() + "]",
		"[64:ff9b::" + hex + "]",
		"[64:ff9b:1::" + hex + "]",
		"[2002:" + hex + "::]",
		"[2002:" + hex + ":1::1]",
		"[2001:0:4136:e378:8000:63bf:" + inv + "]",
		"[2600::5efe:" + hex + "]",                 // ISATAP
		"[2600:1:2:3:200:5efe:" + a.String() + "]", // ISATAP, u/l bit set
	}
}

func fullwidth(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= '0' && r <= '9':
			b.WriteRune('０' + (r - '0'))
		case r == '.':
			b.WriteRune('．')
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

type spelling struct {
	target   string // URL or CONNECT authority
	highRisk bool
}

// deniedSpellings is the table for "every spelling of metadata and
// special-use targets is denied".
func deniedSpellings() []spelling {
	var out []spelling
	addURL := func(host string, hr bool) {
		out = append(out, spelling{"http://" + host + "/latest/meta-data/", hr})
	}
	for _, hr := range []string{"169.254.169.254", "169.254.170.2", "100.100.100.200", "168.63.129.16", "192.0.0.192"} {
		a := netip.MustParseAddr(hr)
		for _, s := range v4Spellings(a) {
			addURL(s, true)
		}
		for _, s := range v6Spellings(a) {
			addURL(s, true)
		}
		addURL(fullwidth(hr), true)
		addURL(strings.ReplaceAll(hr, ".", "。"), true)
		out = append(out, spelling{hr + ":80", true}, spelling{hr + ":443", true})
	}
	for _, n := range []string{
		"[fd00:ec2::254]", "[FD00:EC2:0:0:0:0:0:254]", "[fd00:ec2::23]",
		"metadata.google.internal", "METADATA.Google.Internal.", "metadata.google.internal.",
		"ｍｅｔａｄａｔａ.google.internal", "metadata", "metadata.goog", "instance-data",
		"instance-data.ec2.internal", "foo.internal", "169.254.169.254.nip.io", "a9fea9fe.nip.io",
		"169-254-169-254.sslip.io", "169.254.169.254.xip.io", "kubernetes.default.svc",
		"kubernetes.default.svc.cluster.local", "upload.pypi.org", "uploads.github.com",
		"console.aws.amazon.com", "us-east-1.console.aws.amazon.com", "portal.azure.com",
		"localhost", "LOCALHOST.", "app.localhost", "x.localtest.me",
	} {
		addURL(n, true)
	}
	// special-use, not high-risk: loopback, private, link-local, CGNAT, ULA,
	// multicast, unspecified, broadcast, reserved, benchmark, documentation
	for _, sp := range []string{"127.0.0.1", "10.0.0.1", "172.16.0.1", "192.168.1.1", "100.64.0.1", "169.254.1.1", "0.0.0.0", "224.0.0.1", "255.255.255.255", "240.0.0.1", "198.18.0.1", testNet1 + ".1", "198.51.100.7", "203.0.113.9"} {
		a := netip.MustParseAddr(sp)
		for _, s := range v4Spellings(a)[:8] {
			addURL(s, false)
		}
		for _, s := range v6Spellings(a)[:6] {
			addURL(s, false)
		}
	}
	for _, s := range []string{"127.1", "0", "0x7f.1", "017700000001", "127.000.000.001", "[::]", "[::1]", "[0:0:0:0:0:0:0:1]", "[fe80::1]", "[fc00::1]", "[fd12:3456::1]", "[ff02::1]", "[::ffff:0.0.0.0]", "[fec0::1]", "[2001:db8::1]", "[100::1]"} {
		addURL(s, false)
	}
	return out
}

// badSpellings are refused as malformed or ambiguous (reason bad-target).
var badSpellings = []string{
	"http://%31%36%39.254.169.254/",
	"http://169.254.169.254%2f@example.com/",
	"http://example.com@169.254.169.254/",
	"http://169.254.169.254\\@example.com/",
	"http://[fe80::1%25eth0]/",
	"http://[::ffff:169.254.169.254%eth0]/",
	"http://4294967296/",
	"http://0x1a9fea9fe/",
	"http://169.254.169.254.0/",
	"http://0169.254.169.254/", // octal with a 9: inet_aton rejects, so must we
	"http://169.254.169.254:80:80/",
	"http://169.254.169.254 /",
	"http://169.254.169.254\t/",
	"http://169.254.169.254\x00.example.com/",
	"http://metadata..google.internal/",
	"http://[169.254.169.254]/",
	"http://::ffff:169.254.169.254/",
	"http://example.0x10/",
}

func TestDeniedSpellings(t *testing.T) {
	p := mustParse(t, openPolicy)
	cases := deniedSpellings()
	if len(cases) < 150 {
		t.Fatalf("only %d spellings: the table must hold at least 150", len(cases))
	}
	for _, c := range cases {
		t.Run(c.target, func(t *testing.T) {
			d := decideString(t, p, c.target)
			if d.Allow {
				t.Fatalf("%q allowed under rule %q: want deny", c.target, d.RuleName())
			}
			if c.highRisk && (!d.HighRisk || d.Reason != ReasonHighRisk) {
				t.Errorf("%q: high_risk %v reason %v, want high_risk true reason high-risk", c.target, d.HighRisk, d.Reason)
			}
			if !c.highRisk && d.Reason != ReasonSpecialAddr {
				t.Errorf("%q: reason %v, want special-address", c.target, d.Reason)
			}
		})
	}
	for _, s := range badSpellings {
		t.Run(s, func(t *testing.T) {
			if _, err := ParseURL(s); err == nil {
				t.Errorf("ParseURL(%q) accepted: want bad-target", s)
			}
		})
	}
	t.Logf("%d denied spellings, %d refused as malformed", len(cases), len(badSpellings))
}

func TestPublicAllowedUnderOpenPolicy(t *testing.T) {
	p := mustParse(t, openPolicy)
	for _, s := range []string{
		"http://example.com/", "https://example.com:8443/x", "http://93.184.215.14/", "http://0x5db8d70e/",
		"http://1572394766/", "http://[2a01:4f8::1]/", "http://[::ffff:93.184.215.14]/",
		"http://[64:ff9b::93.184.215.14]/", "http://bücher.example/", "93.184.215.14:53",
	} {
		d := decideString(t, p, s)
		if !d.Allow {
			t.Errorf("%q denied (%v): want allow under the open policy", s, d.Reason)
		}
	}
}

// decideString decides a URL (with "://") or a CONNECT authority.
func decideString(t *testing.T, p *Policy, s string) Decision {
	t.Helper()
	var tgt Target
	var err error
	if strings.Contains(s, "://") {
		tgt, err = ParseURL(s)
		if err != nil {
			t.Fatalf("ParseURL(%q): %v", s, err)
		}
		return p.DecideRequest(&tgt, "GET", "", 0)
	}
	tgt, err = ParseAuthority(s)
	if err != nil {
		t.Fatalf("ParseAuthority(%q): %v", s, err)
	}
	return p.DecideTarget(&tgt)
}

func mustParse(t testing.TB, cfg string) *Policy {
	t.Helper()
	p, err := Parse(strings.NewReader(cfg), "test.yaml")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return p
}
