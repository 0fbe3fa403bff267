package proxy

import (
	"crypto/tls"
	"io"
	"net/http"
	"testing"
)

// benchClient is a keep-alive client, through the proxy or direct.
func benchClient(h *harness, viaProxy, keepAlive bool) *http.Client {
	pool := h.upCA.Pool()
	pool.AddCert(h.mitmCA.Certificate())
	tr := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, ServerName: "allowed.test"},
		MaxIdleConnsPerHost: 16,
		DisableKeepAlives:   !keepAlive,
	}
	if viaProxy {
		tr.Proxy = http.ProxyURL(h.proxyURL)
		tr.TLSClientConfig.ServerName = ""
	}
	return &http.Client{Transport: tr}
}

func get(b *testing.B, c *http.Client, url string) {
	resp, err := c.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		b.Fatalf("status %d", resp.StatusCode)
	}
}

// BenchmarkHTTPKeepAlive: plain HTTP GET over keep-alive, proxied vs the
// same client going direct; compare the two in one run.
func BenchmarkHTTPKeepAlive(b *testing.B) {
	h := newHarness(b, testConfig, testNames)
	port := h.plain.port()
	b.Run("direct", func(b *testing.B) {
		c := benchClient(h, false, true)
		for range b.N {
			get(b, c, "http://127.0.0.1:"+port+"/")
		}
	})
	b.Run("proxied", func(b *testing.B) {
		c := benchClient(h, true, true)
		b.ReportAllocs()
		for range b.N {
			get(b, c, "http://allowed.test:"+port+"/")
		}
	})
}

// BenchmarkConnectPerRequest: a new TCP connection (and, proxied, a new
// CONNECT tunnel with the SNI check) and TLS handshake for every GET.
func BenchmarkConnectPerRequest(b *testing.B) {
	h := newHarness(b, testConfig, testNames)
	port := h.tlsO.port()
	b.Run("direct", func(b *testing.B) {
		c := benchClient(h, false, false)
		for range b.N {
			get(b, c, "https://127.0.0.1:"+port+"/")
		}
	})
	b.Run("spliced", func(b *testing.B) {
		c := benchClient(h, true, false)
		b.ReportAllocs()
		for range b.N {
			get(b, c, "https://allowed.test:"+port+"/")
		}
	})
	b.Run("inspected", func(b *testing.B) {
		c := benchClient(h, true, false)
		b.ReportAllocs()
		for range b.N {
			get(b, c, "https://docs.test:"+port+"/guide")
		}
	})
}
