package ca_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/elazarl/goproxy"

	"github.com/egressd/egressd/ca"
)

// A CA can stand in as goproxy's certificate cache.
var _ goproxy.CertStorage = (*ca.CA)(nil)

// TestGoproxyMitm wires a CA into goproxy the two ways the package allows
// and shows that clients trusting only the CA complete inspected CONNECTs,
// that the proxy sees the inner request, and that the second connection
// reuses the cached leaf. Everything stays on 127.0.0.1: the proxy's
// dialer reaches only the loopback upstream.
func TestGoproxyMitm(t *testing.T) {
	authority, err := ca.New()
	if err != nil {
		t.Fatal(err)
	}
	caCert := authority.TLSCert()

	upstream := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "upstream saw %s", r.URL.Path)
	}))
	defer upstream.Close()
	upstreamAddr := upstream.Listener.Addr().String()
	upstreamPool := x509.NewCertPool()
	upstreamPool.AddCert(upstream.Certificate()) // names example.com and 127.0.0.1

	serverConfig := func(host string, _ *goproxy.ProxyCtx) (*tls.Config, error) {
		return authority.ServerConfig(host)
	}
	tests := []struct {
		name      string
		url       string
		tlsConfig func(string, *goproxy.ProxyCtx) (*tls.Config, error)
		certStore goproxy.CertStorage
		wantLeaf  string // the name or address the leaf is verified for
	}{
		{name: "ServerConfig, name", url: "https://example.com/inner", tlsConfig: serverConfig, wantLeaf: "example.com"},
		{name: "ServerConfig, IP without SNI", url: "https://" + upstreamAddr + "/inner", tlsConfig: serverConfig, wantLeaf: "127.0.0.1"},
		{name: "TLSConfigFromCA with CertStore", url: "https://example.com/inner", tlsConfig: goproxy.TLSConfigFromCA(&caCert), certStore: authority, wantLeaf: "example.com"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			target, err := url.Parse(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			connectAuthority := target.Host
			if target.Port() == "" {
				connectAuthority += ":443"
			}

			p := goproxy.NewProxyHttpServer()
			p.ConnectDial = nil
			logs := &bufLogger{}
			p.Logger = logs
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("goproxy log:\n%s", logs.String())
				}
			})
			p.CertStore = tc.certStore
			p.Tr = &http.Transport{
				Proxy: nil,
				DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
					if addr != connectAuthority {
						return nil, fmt.Errorf("test dialer: refusing %s, want %s", addr, connectAuthority)
					}
					var d net.Dialer
					return d.DialContext(ctx, "tcp", upstreamAddr)
				},
				TLSClientConfig: &tls.Config{RootCAs: upstreamPool},
			}
			p.OnRequest().HandleConnectFunc(func(host string, _ *goproxy.ProxyCtx) (*goproxy.ConnectAction, string) {
				return &goproxy.ConnectAction{Action: goproxy.ConnectMitm, TLSConfig: tc.tlsConfig}, host
			})
			var mu sync.Mutex
			var inspected []string
			p.OnRequest().DoFunc(func(r *http.Request, _ *goproxy.ProxyCtx) (*http.Request, *http.Response) {
				mu.Lock()
				inspected = append(inspected, r.URL.Path)
				mu.Unlock()
				return r, nil
			})
			proxySrv := httptest.NewServer(p)
			defer proxySrv.Close()
			proxyURL, err := url.Parse(proxySrv.URL)
			if err != nil {
				t.Fatal(err)
			}

			get := func(roots *x509.CertPool) (*http.Response, string, error) {
				client := &http.Client{Transport: &http.Transport{
					Proxy:             http.ProxyURL(proxyURL),
					TLSClientConfig:   &tls.Config{RootCAs: roots, NextProtos: []string{"h2", "http/1.1"}},
					DisableKeepAlives: true, // a new CONNECT, and handshake, per request
				}}
				resp, err := client.Get(tc.url)
				if err != nil {
					return nil, "", err
				}
				defer resp.Body.Close()
				body, err := io.ReadAll(resp.Body)
				return resp, string(body), err
			}

			var serials []string
			for i := range 2 {
				resp, body, err := get(authority.Pool())
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				if resp.StatusCode != http.StatusOK || body != "upstream saw /inner" {
					t.Fatalf("request %d: got %d %q, want 200 \"upstream saw /inner\"", i, resp.StatusCode, body)
				}
				leaf := resp.TLS.PeerCertificates[0]
				if _, err := leaf.Verify(x509.VerifyOptions{Roots: authority.Pool(), DNSName: tc.wantLeaf}); err != nil {
					t.Errorf("request %d: leaf does not verify for %s under the CA: %v", i, tc.wantLeaf, err)
				}
				if got := resp.TLS.NegotiatedProtocol; got != "http/1.1" {
					t.Errorf("request %d: ALPN got %q, want http/1.1", i, got)
				}
				serials = append(serials, leaf.SerialNumber.String())
			}
			if serials[0] != serials[1] {
				t.Errorf("leaf serials %v differ; want the cached leaf reused", serials)
			}
			mu.Lock()
			got := strings.Join(inspected, ",")
			mu.Unlock()
			if got != "/inner,/inner" {
				t.Errorf("inspected paths: got %q, want \"/inner,/inner\"", got)
			}

			// Negative control: a client that trusts only the upstream's CA
			// is refused, so the connection above was terminated by our CA
			// and not passed through.
			if _, _, err := get(upstreamPool); err == nil || !strings.Contains(err.Error(), "certificate") {
				t.Errorf("client trusting only the upstream CA: got %v, want a certificate error", err)
			}
		})
	}
}

// bufLogger keeps goproxy's log lines. goproxy logs from its own goroutines,
// possibly after a test has finished, so it must not call t.Logf directly.
type bufLogger struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *bufLogger) Printf(format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(&l.b, format+"\n", v...)
}

func (l *bufLogger) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
