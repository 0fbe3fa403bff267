package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
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

// memConn is a client whose bytes are in memory: a benchmark of a parser
// that measures the parser, not the socket.
type memConn struct {
	net.Conn
	r *bytes.Reader
}

func (c *memConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *memConn) SetReadDeadline(time.Time) error  { return nil }
func (c *memConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *memConn) SetDeadline(time.Time) error      { return nil }
func (c *memConn) SetWriteDeadline(time.Time) error { return nil }
func (c *memConn) Close() error                     { return nil }
func (c *memConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *memConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }

// BenchmarkPeekClientHello: the SNI read of every spliced tunnel, on a
// post-quantum-sized ClientHello from Go's TLS client.
func BenchmarkPeekClientHello(b *testing.B) {
	hello := recordHello(b, &tls.Config{ServerName: "allowed.test"})
	b.SetBytes(int64(len(hello)))
	b.ReportAllocs()
	for range b.N {
		h, _, err := peekClientHello(&memConn{r: bytes.NewReader(hello)}, 0)
		if err != nil || h.ServerName != "allowed.test" {
			b.Fatalf("got %v %v", h, err)
		}
	}
}

// abortClose closes c with a reset, so that a benchmark of many
// connections leaves no TIME_WAIT behind.
func abortClose(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

// skipHead reads up to the end of a message head without allocating.
func skipHead(br *bufio.Reader) error {
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(line) <= 2 {
			return nil
		}
	}
}

// BenchmarkRequestHandling: one absolute-form GET through the proxy on a
// kept-alive connection, against an origin and a client that allocate
// nothing, so allocs/op is the proxy's (net/http, goproxy, egressd).
func BenchmarkRequestHandling(b *testing.B) {
	h := newHarness(b, testConfig, testNames)
	o := newRawOrigin(b, func(c net.Conn, br *bufio.Reader) {
		c.SetDeadline(time.Time{})
		for skipHead(br) == nil {
			if _, err := io.WriteString(c, okResp); err != nil {
				return
			}
		}
	})
	c, err := net.Dial("tcp", h.proxyURL.Host)
	if err != nil {
		b.Fatal(err)
	}
	defer abortClose(c)
	req := []byte("GET http://allowed.test:" + o.port() + "/ HTTP/1.1\r\nHost: allowed.test:" + o.port() + "\r\nUser-Agent: bench\r\n\r\n")
	br := bufio.NewReader(c)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		if err := skipHead(br); err != nil {
			b.Fatal(err)
		}
		if _, err := br.Discard(2); err != nil { // "ok"
			b.Fatal(err)
		}
	}
}

// BenchmarkTunnelSetup: a spliced tunnel from CONNECT to its first byte
// back — accept, decision, checked dial, 200, ClientHello read and SNI
// check, replay, relay — and its close.
func BenchmarkTunnelSetup(b *testing.B) {
	h := newHarness(b, testConfig, testNames)
	o := newRawOrigin(b, func(c net.Conn, br *bufio.Reader) {
		defer abortClose(c)
		if _, err := br.ReadByte(); err == nil { // the replayed hello
			io.WriteString(c, "x")
			br.ReadByte() // until the proxy closes
		}
	})
	hello := recordHello(b, &tls.Config{ServerName: "allowed.test"})
	connect := []byte("CONNECT allowed.test:" + o.port() + " HTTP/1.1\r\nHost: allowed.test:" + o.port() + "\r\n\r\n")
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		c, err := net.Dial("tcp", h.proxyURL.Host)
		if err != nil {
			b.Fatal(err)
		}
		c.Write(connect)
		br := bufio.NewReader(c)
		if err := skipHead(br); err != nil {
			b.Fatal(err)
		}
		c.Write(hello)
		if x, err := br.ReadByte(); err != nil || x != 'x' {
			b.Fatalf("first byte through the tunnel: %q %v", x, err)
		}
		abortClose(c)
	}
}
