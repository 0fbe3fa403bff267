package proxy

import (
	"bufio"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// parentProxy is a corporate proxy on 127.0.0.1: it answers CONNECT only
// with the right Proxy-Authorization, records every CONNECT target, and
// tunnels to it.
type parentProxy struct {
	addr string
	mu   sync.Mutex
	seen []string // "target auth-ok"
}

func newParentProxy(t *testing.T, wantAuth string) *parentProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pp := &parentProxy{addr: l.Addr().String()}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				ok := req.Header.Get("Proxy-Authorization") == wantAuth
				pp.mu.Lock()
				pp.seen = append(pp.seen, req.RequestURI)
				pp.mu.Unlock()
				if req.Method != http.MethodConnect || !ok {
					io.WriteString(c, "HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n")
					return
				}
				up, err := net.Dial("tcp", req.RequestURI)
				if err != nil {
					io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
					return
				}
				defer up.Close()
				io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
				go func() { io.Copy(up, br); up.(*net.TCPConn).CloseWrite() }()
				io.Copy(c, up)
			}()
		}
	}()
	return pp
}

func (pp *parentProxy) targets() []string {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	return append([]string(nil), pp.seen...)
}

func TestUpstreamProxy(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	authFile := filepath.Join(dir, "parent-auth")
	writeFile(t, authFile, []byte("egressd:pp-s3cret-77\n"))
	pp := newParentProxy(t, "Basic "+basicRaw("egressd:pp-s3cret-77"))
	cfg := strings.Replace(testConfig, "allow:\n", "upstream_proxy:\n  address: "+pp.addr+"\n  auth_from: \"file:"+authFile+"\"\nallow:\n", 1)
	h := newHarness(t, cfg, testNames)

	// plain HTTP and a spliced HTTPS tunnel both go through the parent
	resp, body := h.do("GET", "http://allowed.test:"+h.plain.port()+"/via-parent", nil, nil)
	if resp == nil || resp.StatusCode != 200 || !strings.Contains(body, "/via-parent") {
		t.Fatalf("through the parent: %v %q", resp, body)
	}
	resp, _ = h.do("GET", "https://allowed.test:"+h.tlsO.port()+"/tls", nil, nil)
	if resp == nil || resp.StatusCode != 200 {
		t.Fatalf("TLS through the parent: %v", resp)
	}
	if got := pp.targets(); len(got) != 2 {
		t.Fatalf("the parent saw %v; want the two CONNECTs", got)
	}
	// the checks stay egressd's: a name resolving to the metadata address
	// is refused before the parent is asked anything
	n := len(pp.targets())
	if resp, _ := h.do("GET", "http://meta.test:"+h.plain.port()+"/", nil, nil); resp == nil || resp.StatusCode != 403 {
		t.Errorf("metadata by name with a parent proxy: %v; want 403", resp)
	}
	if resp, _ := h.do("GET", "http://unlisted.test:"+h.plain.port()+"/", nil, nil); resp == nil || resp.StatusCode != 403 {
		t.Errorf("unlisted with a parent proxy: %v; want 403", resp)
	}
	if got := pp.targets(); len(got) != n {
		t.Errorf("the parent was asked for %v after a refusal", got[n:])
	}
	// the parent is only ever asked for a checked address, never a name it
	// would resolve itself
	for _, tg := range pp.targets() {
		host, _, _ := net.SplitHostPort(tg)
		if net.ParseIP(host) == nil {
			t.Errorf("CONNECT %s to the parent: a name, which the parent would resolve", tg)
		}
	}
	if strings.Contains(h.logs.String(), "pp-s3cret-77") {
		t.Error("the parent proxy's password is in the log")
	}
	// wrong credentials: the parent refuses and the client gets 502
	writeFile(t, authFile, []byte("egressd:wrong"))
	h.px.SetPolicy(h.px.Policy()) // a fresh pool: the next dial reads the file again
	if resp, _ := h.do("GET", "http://allowed.test:"+h.plain.port()+"/again", nil, nil); resp == nil || resp.StatusCode != 502 {
		t.Errorf("refused by the parent: %v; want 502", resp)
	}
}

func basicRaw(cred string) string { return base64.StdEncoding.EncodeToString([]byte(cred)) }
