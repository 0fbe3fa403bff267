package selftest

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// quotedEcho is an echo request with id to dst, with its IP header, as an
// ICMP error quotes it.
func quotedEcho(dst netip.Addr, id int) []byte {
	echo := make([]byte, 8)
	binary.BigEndian.PutUint16(echo[4:], uint16(id))
	if dst.Is4() {
		h := make([]byte, 20)
		h[0], h[9] = 0x45, 1
		copy(h[16:], dst.AsSlice())
		echo[0] = byte(ipv4.ICMPTypeEcho)
		return append(h, echo...)
	}
	h := make([]byte, 40)
	h[0], h[6] = 0x60, 58
	copy(h[24:], dst.AsSlice())
	echo[0] = byte(ipv6.ICMPTypeEchoRequest)
	return append(h, echo...)
}

// TestRefusesEcho: only an administratively prohibited quoting this
// probe's own echo (its id, to its target) reads as the wall's refusal.
func TestRefusesEcho(t *testing.T) {
	v4, v6 := netip.MustParseAddr("203.0.113.100"), netip.MustParseAddr("2001:db8:2::100")
	du4 := func(code int, q []byte) *icmp.Message {
		return &icmp.Message{Type: ipv4.ICMPTypeDestinationUnreachable, Code: code, Body: &icmp.DstUnreach{Data: q}}
	}
	du6 := func(code int, q []byte) *icmp.Message {
		return &icmp.Message{Type: ipv6.ICMPTypeDestinationUnreachable, Code: code, Body: &icmp.DstUnreach{Data: q}}
	}
	tests := []struct {
		name string
		m    *icmp.Message
		dst  netip.Addr
		want bool
	}{
		{"v4 prohibited, own echo", du4(13, quotedEcho(v4, 7)), v4, true},
		{"v6 prohibited, own echo", du6(1, quotedEcho(v6, 7)), v6, true},
		{"v4 another id", du4(13, quotedEcho(v4, 8)), v4, false},
		{"v4 another target", du4(13, quotedEcho(netip.MustParseAddr("203.0.113.101"), 7)), v4, false},
		{"v4 port unreachable", du4(3, quotedEcho(v4, 7)), v4, false},
		{"v4 host unreachable", du4(1, quotedEcho(v4, 7)), v4, false},
		{"v6 no route", du6(0, quotedEcho(v6, 7)), v6, false},
		{"v6 code of v4", du6(13, quotedEcho(v6, 7)), v6, false},
		{"v4 quote cut short", du4(13, quotedEcho(v4, 7)[:24]), v4, false},
		{"v6 quote cut short", du6(1, quotedEcho(v6, 7)[:44]), v6, false},
		{"v4 quote of v6", du4(13, quotedEcho(v6, 7)), v4, false},
		{"echo reply", &icmp.Message{Type: ipv4.ICMPTypeEchoReply, Body: &icmp.Echo{ID: 7}}, v4, false},
		{"v4 header length 0", du4(13, append([]byte{0x40}, quotedEcho(v4, 7)[1:]...)), v4, false},
	}
	for _, tt := range tests {
		if got := refusesEcho(tt.m, tt.dst, 7); got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
}

// FuzzRefusesEcho: any ICMP message from the network, parsed as the ping
// probe parses it, is read without a panic, and only one quoting the
// probe's own echo counts as a refusal.
func FuzzRefusesEcho(f *testing.F) {
	v4, v6 := netip.MustParseAddr("203.0.113.100"), netip.MustParseAddr("2001:db8:2::100")
	for _, q := range [][]byte{quotedEcho(v4, 7), quotedEcho(v6, 7)} {
		for _, typ := range []icmp.Type{ipv4.ICMPTypeDestinationUnreachable, ipv6.ICMPTypeDestinationUnreachable} {
			b, err := (&icmp.Message{Type: typ, Code: 13, Body: &icmp.DstUnreach{Data: q}}).Marshal(nil)
			if err == nil {
				f.Add(b, typ == ipv6.ICMPTypeDestinationUnreachable)
			}
		}
	}
	f.Fuzz(func(t *testing.T, b []byte, six bool) {
		proto, dst := 1, v4
		if six {
			proto, dst = 58, v6
		}
		m, err := icmp.ParseMessage(proto, b)
		if err != nil {
			return
		}
		if refusesEcho(m, dst, 7) {
			du := m.Body.(*icmp.DstUnreach)
			q := du.Data
			if len(q) < 28 || !bytes.Contains(q, dst.AsSlice()) {
				t.Fatalf("refusal read from %x, which does not quote an echo to %s", b, dst)
			}
		}
	})
}
