package policy

import (
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/text/unicode/norm"
)

// independentHost decodes a host the way a permissive client library might,
// written separately from NormalizeHost so the fuzzer compares two readings:
// NFKC plus the IDNA dots, brackets stripped, and inet_aton parts read with
// strconv's base-0 rules (which also accept 0b/0o/underscores: a superset).
// It returns the addresses the host could mean.
func independentHost(h string) []netip.Addr {
	h = norm.NFKC.String(h)
	for _, dot := range []string{"。", "．", "｡"} {
		h = strings.ReplaceAll(h, dot, ".")
	}
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if i := strings.IndexByte(h, '%'); i >= 0 {
		h = h[:i] // a zone: still means the address
	}
	var out []netip.Addr
	if ip := net.ParseIP(h); ip != nil {
		a, _ := netip.AddrFromSlice(ip)
		out = append(out, a.Unmap())
	}
	parts := strings.Split(h, ".")
	if len(parts) >= 1 && len(parts) <= 4 {
		var vals []uint64
		for _, p := range parts {
			v, err := strconv.ParseUint(p, 0, 64)
			if err != nil {
				vals = nil
				break
			}
			vals = append(vals, v)
		}
		if vals != nil {
			var u uint64
			for i, v := range vals[:len(vals)-1] {
				u |= (v & 0xff) << (24 - 8*i)
			}
			u |= vals[len(vals)-1] & (1<<(8*(5-len(vals))) - 1)
			out = append(out, netip.AddrFrom4([4]byte{byte(u >> 24), byte(u >> 16), byte(u >> 8), byte(u)}))
		}
	}
	// the IPv4 payload of the IPv6 embeddings, read byte by byte
	for _, a := range out {
		if !a.Is6() {
			continue
		}
		b := a.As16()
		zero := func(bs []byte) bool {
			for _, x := range bs {
				if x != 0 {
					return false
				}
			}
			return true
		}
		switch {
		case zero(b[:10]) && (b[10] == 0 && b[11] == 0 || b[10] == 0xff && b[11] == 0xff): // compatible, mapped
			out = append(out, netip.AddrFrom4([4]byte(b[12:16])))
		case b[0] == 0 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && (zero(b[4:12]) || b[4] == 0 && b[5] == 1): // NAT64
			out = append(out, netip.AddrFrom4([4]byte(b[12:16])))
		case b[0] == 0x20 && b[1] == 0x02: // 6to4
			out = append(out, netip.AddrFrom4([4]byte(b[2:6])))
		case b[0] == 0x20 && b[1] == 0x01 && b[2] == 0 && b[3] == 0: // Teredo
			out = append(out, netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}))
		}
	}
	return out
}

// metadataAddrs is the fuzz oracle's own list, kept apart from the
// classifier's table on purpose.
var metadataAddrs = map[netip.Addr]bool{
	netip.MustParseAddr("169.254.169.254"): true,
	netip.MustParseAddr("169.254.170.2"):   true,
	netip.MustParseAddr("100.100.100.200"): true,
	netip.MustParseAddr("168.63.129.16"):   true,
	netip.MustParseAddr("192.0.0.192"):     true,
	netip.MustParseAddr("fd00:ec2::254"):   true,
}

var fuzzSeeds = []string{
	"169.254.169.254", "0xA9FEA9FE", "2852039166", "0251.0376.0251.0376", "169.254.43518",
	"[::ffff:169.254.169.254]", "[64:ff9b::a9fe:a9fe]", "[2002:a9fe:a9fe::]", "[fd00:ec2::254]",
	"１６９．２５４．１６９．２５４", "169。254。169。254", "metadata.google.internal", "example.com",
	"0x7f.1", "[::1]", "93.184.215.14", "bücher.example", "xn--bcher-kva.example", "a.b.c.d", "0",
	"[2001:0:4136:e378:8000:63bf:5601:5601]", "169.254.169.254.", "0xa9fea9fe.", "4294967296",
}

// FuzzDecide: under the most open config, no host that denotes a metadata
// address in any reading is ever allowed, as a URL or as a CONNECT target.
func FuzzDecide(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	p := mustParse(f, openPolicy)
	f.Fuzz(func(t *testing.T, host string) {
		var hit netip.Addr
		for _, a := range independentHost(host) {
			if metadataAddrs[a] {
				hit = a
			}
		}
		for _, target := range []string{"http://" + host + "/latest/meta-data/", host + ":80"} {
			var tgt Target
			var err error
			if strings.HasPrefix(target, "http://") {
				tgt, err = ParseURL(target)
			} else {
				tgt, err = ParseAuthority(target)
			}
			if err != nil {
				continue
			}
			d := p.DecideRequest(&tgt, "GET", "", 0)
			if d.Allow && hit.IsValid() {
				t.Fatalf("%q allowed (host %q, addr %v) but it denotes %v", target, d.Host, d.Addr, hit)
			}
			if d.Allow && d.Addr.IsValid() && ClassifyAddr(d.Addr).Class != ClassPublic {
				t.Fatalf("%q allowed to special-use %v", target, d.Addr)
			}
			if d.Allow && d.Addr.IsValid() {
				for _, a := range independentHost(d.Addr.String()) {
					if metadataAddrs[a] {
						t.Fatalf("%q allowed to %v, which embeds %v", target, d.Addr, a)
					}
				}
			}
		}
	})
}

// FuzzNormalizeHost: normalization is idempotent and its output is plain.
func FuzzNormalizeHost(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		name, addr, err := NormalizeHost(h)
		if err != nil {
			return
		}
		if name != "" == addr.IsValid() {
			t.Fatalf("NormalizeHost(%q) = %q, %v: want exactly one of name and addr", h, name, addr)
		}
		if name == "" {
			return
		}
		if err := checkLabels(name); err != nil {
			t.Fatalf("NormalizeHost(%q) = %q: %v", h, name, err)
		}
		again, a2, err := NormalizeHost(name)
		if err != nil || again != name || a2.IsValid() {
			t.Fatalf("not idempotent: %q → %q → %q, %v, %v", h, name, again, a2, err)
		}
	})
}

// FuzzParseConfig: no config crashes the parser, and whatever parses still
// denies the metadata address under every rule.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{openPolicy, testFirstMatchCfg, identityConfig, "version: 1\n", "version: 1\nallow:\n  - hosts: [\"*\"]\n    cidrs: [169.254.0.0/16]\n    ports: [1-65535]\n"} {
		f.Add(s)
	}
	if b, err := os.ReadFile("../configs/default.yaml"); err == nil {
		f.Add(string(b))
	}
	meta, _ := ParseAuthority("169.254.169.254:80")
	metaName, _ := ParseAuthority("metadata.google.internal:80")
	f.Fuzz(func(t *testing.T, cfg string) {
		p, err := Parse(strings.NewReader(cfg), "fuzz.yaml")
		if err != nil {
			if _, ok := err.(ConfigErrors); !ok {
				t.Fatalf("error %T is not ConfigErrors: %v", err, err)
			}
			return
		}
		for _, tgt := range []Target{meta, metaName} {
			if d := p.DecideTarget(&tgt); d.Allow {
				t.Fatalf("config allows %s:\n%s", tgt.Host(), cfg)
			}
		}
		p.Lints() // validate's lints run on every config it accepts: no panic
		for _, r := range p.Rules {
			if r.Inject == nil {
				continue
			}
			if !r.TLS || r.HostOnly() || r.Hosts.Len() == 0 {
				t.Fatalf("inject rule %s: tls=%v host-only=%v hosts=%d:\n%s", r.Name, r.TLS, r.HostOnly(), r.Hosts.Len(), cfg)
			}
			for h := range r.Hosts.All() {
				if strings.Contains(h, "*") {
					t.Fatalf("inject rule %s names %q:\n%s", r.Name, h, cfg)
				}
			}
		}
	})
}

const testFirstMatchCfg = `
version: 1
allow:
  - name: a
    hosts: [api.example.com, "*.example.org"]
    ports: [443, 8000-8100]
    pages: [read, login]
    methods: [GET]
    paths: [/v1/*]
  - name: m
    hosts: [pypi.org]
    mirror: pypi
deny:
  hosts: [bad.example.com]
  cidrs: [203.0.113.0/24]
`
