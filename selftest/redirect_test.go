package selftest

import (
	"bufio"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"
)

// TestRedirected: a direct connection the walls redirected to egressd's
// transparent listener passes only when egressd refuses what goes over it.
func TestRedirected(t *testing.T) {
	t.Parallel()
	answer := func(resp string) func(net.Conn) {
		return func(c net.Conn) {
			http.ReadRequest(bufio.NewReader(c))
			c.Write([]byte(resp))
			c.Close()
		}
	}
	tlsServer := httptest.NewUnstartedServer(http.NotFoundHandler())
	tlsServer.StartTLS()
	defer tlsServer.Close()
	tlsConf := tlsServer.TLS
	tests := []struct {
		name   string
		port   uint16
		server func(net.Conn)
		want   Status
	}{
		{"egressd refuses http", 80, answer("HTTP/1.1 403 Forbidden\r\nX-Egressd-Deny: high-risk\r\nContent-Length: 0\r\n\r\n"), Pass},
		{"the target answers http", 80, answer("HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecret"), Leak},
		{"closed at once", 80, func(c net.Conn) { c.Close() }, Pass},
		{"tls refused", 443, func(c net.Conn) { c.Close() }, Pass},
		{"tls answered", 443, func(c net.Conn) { tls.Server(c, tlsConf).Handshake(); c.Close() }, Leak},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client, server := net.Pipe()
			go tt.server(server)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			o := redirected(ctx, client, netip.AddrPortFrom(netip.MustParseAddr("169.254.169.254"), tt.port))
			if o.status != tt.want {
				t.Errorf("got %s (%s: %s), want %s", o.status, o.result, o.detail, tt.want)
			}
		})
	}
}

// TestRedirectedOnlyAllowable: on a Redirected port, a direct connection
// to a destination the walls redirect (RedirectedTo) is judged by what
// egressd answers over it; one to any other destination that completes is
// a leak: interception where no decision is possible looks open to any
// probe a user writes (egressd used to redirect every destination).
func TestRedirectedOnlyAllowable(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				http.ReadRequest(bufio.NewReader(c))
				c.Write([]byte("HTTP/1.1 403 Forbidden\r\nX-Egressd-Deny: no-rule\r\nContent-Length: 0\r\n\r\n"))
				c.Close()
			}()
		}
	}()
	ap := netip.MustParseAddrPort(l.Addr().String())
	var d net.Dialer
	for _, tt := range []struct {
		name string
		to   []netip.Prefix
		want Status
	}{
		{"a destination the policy could allow", []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, Pass},
		{"one no rule could allow", nil, Leak},
		{"another rule's cidrs", []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}, Leak},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rep, err := Run(context.Background(), Config{Dial: d.DialContext, TCP: []netip.AddrPort{ap}, Redirected: []uint16{ap.Port()}, RedirectedTo: tt.to, Timeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if r := rep.Results[0]; r.Status != tt.want {
				t.Errorf("got %s (%s: %s), want %s", r.Status, r.Result, r.Detail, tt.want)
			}
		})
	}
}
