package nft

import (
	"net/netip"
	"strings"
	"testing"
)

func pfx(ss ...string) []netip.Prefix {
	var ps []netip.Prefix
	for _, s := range ss {
		ps = append(ps, netip.MustParsePrefix(s))
	}
	return ps
}

func addrs(ss ...string) []netip.Addr {
	var as []netip.Addr
	for _, s := range ss {
		as = append(as, netip.MustParseAddr(s))
	}
	return as
}

// validSpec is a spec that passes Validate; cases change one thing.
func validSpec() Spec {
	return Spec{
		IfPrefixes: []string{"egsbx"},
		Gateways:   addrs("198.51.100.1"),
		ProxyPort:  3128,
		DNSPort:    53,
		HighRisk:   pfx("169.254.169.254/32"),
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		mutate  func(*Spec)
		wantErr string // substring; "" means valid
	}{
		{"valid", func(*Spec) {}, ""},
		{"valid full", func(s *Spec) {
			s.Table = "egressd_test-1"
			s.IfPrefixes = []string{"egsbx", "veth"}
			s.SourceCIDRs = pfx("198.51.100.0/24", "2001:db8:1::/64")
			s.UIDs = []uint32{1000, 1001}
			s.Gateways = addrs("198.51.100.1", "2001:db8:1::1")
			s.ExtraPorts = []uint16{8443}
			s.HighRisk = pfx("169.254.0.0/16", "fd00:ec2::254/128")
		}, ""},
		{"valid uid only", func(s *Spec) { s.IfPrefixes = nil; s.UIDs = []uint32{1000} }, ""},
		{"valid no dns", func(s *Spec) { s.DNSPort = 0 }, ""},
		{"no selector", func(s *Spec) { s.IfPrefixes = nil }, "no sandbox selector"},
		{"bad table name", func(s *Spec) { s.Table = "bad name" }, "table:"},
		{"table name digit first", func(s *Spec) { s.Table = "1x" }, "letter first"},
		{"table name too long", func(s *Spec) { s.Table = strings.Repeat("a", 33) }, "1 to 32"},
		{"empty if prefix", func(s *Spec) { s.IfPrefixes = []string{""} }, "every interface"},
		{"wildcard in prefix", func(s *Spec) { s.IfPrefixes = []string{"egsbx*"} }, "without wildcard"},
		{"prefix too long", func(s *Spec) { s.IfPrefixes = []string{strings.Repeat("e", 16)} }, "longer than 15"},
		{"prefix matches lo", func(s *Spec) { s.IfPrefixes = []string{"l"} }, "loopback"},
		{"prefix is lo", func(s *Spec) { s.IfPrefixes = []string{"lo"} }, "loopback"},
		{"duplicate prefix", func(s *Spec) { s.IfPrefixes = []string{"veth", "veth"} }, "listed twice"},
		{"invalid cidr", func(s *Spec) { s.SourceCIDRs = []netip.Prefix{{}} }, "SourceCIDRs[0]: invalid prefix"},
		{"host bits set", func(s *Spec) { s.SourceCIDRs = pfx("10.1.2.3/8") }, "use 10.0.0.0/8"},
		{"mapped cidr", func(s *Spec) { s.HighRisk = pfx("::ffff:169.254.0.0/112") }, "IPv4-mapped"},
		{"uid zero", func(s *Spec) { s.UIDs = []uint32{0} }, "uid 0 (root)"},
		{"uid minus one", func(s *Spec) { s.UIDs = []uint32{^uint32(0)} }, "not a valid uid"},
		{"duplicate uid", func(s *Spec) { s.UIDs = []uint32{1000, 1000} }, "listed twice"},
		{"no gateway", func(s *Spec) { s.Gateways = nil }, "at least one gateway"},
		{"unspecified gateway", func(s *Spec) { s.Gateways = addrs("0.0.0.0") }, "not a unicast"},
		{"multicast gateway", func(s *Spec) { s.Gateways = addrs("ff02::1") }, "not a unicast"},
		{"zoned gateway", func(s *Spec) { s.Gateways = addrs("fe80::1%eth0") }, "zones"},
		{"mapped gateway", func(s *Spec) { s.Gateways = addrs("::ffff:198.51.100.1") }, "IPv4 form"},
		{"gateway in high risk", func(s *Spec) { s.Gateways = addrs("169.254.169.254") }, "lies in HighRisk"},
		{"no proxy port", func(s *Spec) { s.ProxyPort = 0 }, "ProxyPort: required"},
		{"dns is proxy", func(s *Spec) { s.DNSPort = 3128 }, "also ProxyPort"},
		{"extra port zero", func(s *Spec) { s.ExtraPorts = []uint16{0} }, "port 0"},
		{"extra port repeats dns", func(s *Spec) { s.ExtraPorts = []uint16{53} }, "already DNSPort"},
		{"extra port twice", func(s *Spec) { s.ExtraPorts = []uint16{8443, 8443} }, "already ExtraPorts[0]"},
		{"too many extra ports", func(s *Spec) {
			for p := range uint16(maxExtraPorts + 1) {
				s.ExtraPorts = append(s.ExtraPorts, 10000+p)
			}
		}, "at most 64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validSpec()
			tt.mutate(&s)
			err := s.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Validate: got %v, want nil", err)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("Validate: got nil, want error containing %q", tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("Validate: got %q, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestValidateReportsAll(t *testing.T) {
	t.Parallel()
	err := Spec{}.Validate()
	if err == nil {
		t.Fatal("Validate of zero Spec: got nil, want errors")
	}
	for _, want := range []string{"no sandbox selector", "at least one gateway", "ProxyPort: required"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate of zero Spec: got %q, want it to contain %q", err, want)
		}
	}
}

func TestMergeRanges(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   []netip.Prefix
		want []string
	}{
		{"empty", nil, nil},
		{"single host", pfx("169.254.169.254/32"), []string{"169.254.169.254"}},
		{"sorted", pfx("10.0.0.0/8", "1.0.0.0/8"), []string{"1.0.0.0/8", "10.0.0.0/8"}},
		{"contained", pfx("10.0.0.0/8", "10.1.0.0/16"), []string{"10.0.0.0/8"}},
		{"adjacent halves merge", pfx("10.0.0.0/25", "10.0.0.128/25"), []string{"10.0.0.0/24"}},
		{"adjacent not a prefix", pfx("10.0.0.128/25", "10.0.1.0/25"), []string{"10.0.0.128-10.0.1.127"}},
		{"gap kept", pfx("10.0.0.0/25", "10.0.1.0/25"), []string{"10.0.0.0/25", "10.0.1.0/25"}},
		{"duplicate", pfx("10.0.0.0/24", "10.0.0.0/24"), []string{"10.0.0.0/24"}},
		{"to the last address", pfx("240.0.0.0/4", "255.255.255.255/32"), []string{"240.0.0.0/4"}},
		{"everything", pfx("0.0.0.0/0", "10.0.0.0/8"), []string{"0.0.0.0/0"}},
		{"ipv6", pfx("2001:db8::/33", "2001:db8:8000::/33", "fd00:ec2::254/128"), []string{"2001:db8::/32", "fd00:ec2::254"}},
		{"ipv6 everything", pfx("::/0"), []string{"::/0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, r := range mergeRanges(tt.in) {
				got = append(got, r.String())
			}
			if strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Fatalf("mergeRanges(%v): got %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}
