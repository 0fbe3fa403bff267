package proxy

import (
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"
)

// clientHelloRecord returns the first TLS record a client sends for sni:
// one record holding the whole ClientHello.
func clientHelloRecord(t *testing.T, sni string) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go tls.Client(a, &tls.Config{ServerName: sni, InsecureSkipVerify: true}).Handshake()
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	head := make([]byte, 5)
	if _, err := io.ReadFull(b, head); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, binary.BigEndian.Uint16(head[3:]))
	if _, err := io.ReadFull(b, body); err != nil {
		t.Fatal(err)
	}
	return append(head, body...)
}

// fragmentRecords splits one handshake record into records of at most n
// payload bytes each (TLS allows a handshake message across records).
func fragmentRecords(rec []byte, n int) []byte {
	var out []byte
	for body := rec[5:]; len(body) > 0; {
		k := min(n, len(body))
		out = append(out, rec[0], rec[1], rec[2])
		out = binary.BigEndian.AppendUint16(out, uint16(k))
		out = append(out, body[:k]...)
		body = body[k:]
	}
	return out
}

// TestTunnelHelloTricks: a spliced TLS tunnel's ClientHello check holds
// whatever shape the hello arrives in: fragmented over many TLS records,
// written a byte per TCP segment, or naming an allowed host in a tunnel
// to an address. Each refused trick is paired with the same shape
// carrying the right SNI, which the origin answers.
func TestTunnelHelloTricks(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	port := h.tlsO.port()
	answered := func(authority string, hello []byte, perWrite int) bool {
		c := h.connect(t, authority)
		defer c.Close()
		for b := hello; len(b) > 0; {
			k := min(perWrite, len(b))
			if _, err := c.Write(b[:k]); err != nil {
				return false
			}
			b = b[k:]
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, _ := c.Read(make([]byte, 64))
		return n > 0
	}
	good, evil := clientHelloRecord(t, "allowed.test"), clientHelloRecord(t, "evil.test")
	for _, tc := range []struct {
		name, authority string
		hello           []byte
		perWrite        int
		want            bool
	}{
		{"whole, right SNI", "allowed.test:" + port, good, 1 << 16, true},
		{"whole, other SNI", "allowed.test:" + port, evil, 1 << 16, false},
		{"a byte per write, right SNI", "allowed.test:" + port, good, 1, true},
		{"a byte per write, other SNI", "allowed.test:" + port, evil, 1, false},
		{"16-byte records, right SNI", "allowed.test:" + port, fragmentRecords(good, 16), 1 << 16, true},
		{"16-byte records, other SNI", "allowed.test:" + port, fragmentRecords(evil, 16), 1 << 16, false},
		{"1-byte records, a byte per write, other SNI", "allowed.test:" + port, fragmentRecords(evil, 1), 1, false},
		{"tunnel to an address, SNI an allowed name", "127.0.0.1:" + port, good, 1 << 16, false},
		{"tunnel to an address, SNI another name", "127.0.0.1:" + port, evil, 1 << 16, false},
		{"SSLv2-style hello", "allowed.test:" + port, []byte{0x80, 0x2e, 0x01, 0x00, 0x02}, 1 << 16, false},
	} {
		if got := answered(tc.authority, tc.hello, tc.perWrite); got != tc.want {
			t.Errorf("%s: origin answered %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestInspectedH2PriorKnowledge: HTTP/2 with prior knowledge (the client
// preface with no ALPN) inside an inspected tunnel reaches no origin: the
// inner server speaks HTTP/1.1 only.
func TestInspectedH2PriorKnowledge(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	port := h.tlsO.port()
	before := h.tlsO.hits.Load()
	tc := inspectedTLS(t, h, "pypi.test", port)
	defer tc.Close()
	// the preface and an empty SETTINGS frame
	io.WriteString(tc, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
	tc.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, _ := io.ReadAll(tc)
	if len(b) >= 9 && b[3] == 0x04 { // a SETTINGS frame back: HTTP/2 spoken
		t.Fatalf("HTTP/2 answered inside an inspected tunnel: %q", b)
	}
	if h.tlsO.hits.Load() != before {
		t.Fatal("the origin got a request")
	}
	// control: an HTTP/1.1 read on the same kind of tunnel reaches it
	resp, _ := h.do("GET", "https://pypi.test:"+port+"/simple/requests/", nil, nil)
	if resp == nil || resp.StatusCode != 200 || h.tlsO.hits.Load() == before {
		t.Fatalf("control read: %v", resp)
	}
}
