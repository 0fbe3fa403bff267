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
