package proxy

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
)

// TestExemptIsTheConnection: Config.ReadyExempt is asked for the
// connection: the client's address and port and the proxy's own address
// the client dialed. The self-test's connection passes the readiness gate;
// a connection that only shares its client address and port (one to
// another of egressd's listeners: Linux lets connect() share a local port
// between destinations) does not, for a plain request or a CONNECT.
func TestExemptIsTheConnection(t *testing.T) {
	h := newHarness(t, testConfig, testNames)
	h.ready.Store(false)
	proxyAP := netip.MustParseAddrPort(h.proxyURL.Host)
	other := netip.AddrPortFrom(proxyAP.Addr(), proxyAP.Port()+1) // another listener
	for _, tc := range []struct {
		name   string
		server netip.AddrPort // the pair the self-test's connection has
		want   string
	}{
		{"the self-test's connection", proxyAP, " 200 "},
		{"same client address, another listener", other, " 503 "},
	} {
		for _, kind := range []string{"GET", "CONNECT"} {
			t.Run(tc.name+"/"+kind, func(t *testing.T) {
				c, err := net.Dial("tcp", h.proxyURL.Host)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				client := netip.MustParseAddrPort(c.LocalAddr().String())
				var mu sync.Mutex
				var asked []string
				h.px.exempt = func(cl, srv netip.AddrPort) bool {
					mu.Lock()
					defer mu.Unlock()
					asked = append(asked, cl.String()+"->"+srv.String())
					return cl == client && srv == tc.server
				}
				defer func() { h.px.exempt = nil }()
				req := fmt.Sprintf("GET http://allowed.test:%s/ HTTP/1.1\r\nHost: allowed.test:%[1]s\r\nConnection: close\r\n\r\n", h.plain.port())
				if kind == "CONNECT" {
					req = fmt.Sprintf("CONNECT allowed.test:%s HTTP/1.1\r\nHost: allowed.test:%[1]s\r\n\r\n", h.tlsO.port())
				}
				if _, err := c.Write([]byte(req)); err != nil {
					t.Fatal(err)
				}
				line, err := bufio.NewReader(c).ReadString('\n')
				if err != nil {
					t.Fatal(err)
				}
				mu.Lock()
				defer mu.Unlock()
				if !strings.Contains(line, tc.want) {
					t.Errorf("%s: %q, want%s (exemption asked for %v)", kind, line, tc.want, asked)
				}
				if len(asked) == 0 || asked[0] != client.String()+"->"+proxyAP.String() {
					t.Errorf("exemption asked for %v, want %s->%s", asked, client, proxyAP)
				}
			})
		}
	}
}
