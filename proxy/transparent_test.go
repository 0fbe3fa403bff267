package proxy

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// transparentHarness adds transparent listeners to a harness; the "original
// port" is the origin's port, as if the walls had redirected it.
func transparentListen(t *testing.T, serve func(net.Listener, uint16) error, port string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	go serve(l, uint16(p))
	t.Cleanup(func() { l.Close() })
	return l.Addr().String()
}

func TestTransparentHTTP(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	addr := transparentListen(t, h.px.ServeTransparentHTTP, h.plain.port())
	send := func(host, path string) string {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, host)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return fmt.Sprintf("%d %s", resp.StatusCode, resp.Header.Get("X-Egressd-Deny"))
	}
	before := h.plain.hits.Load()
	if got := send("allowed.test", "/t"); got != "200 " {
		t.Errorf("allowed: %q", got)
	}
	if h.plain.hits.Load() != before+1 {
		t.Errorf("origin did not see the transparent request")
	}
	if got := send("unlisted.test", "/"); got != "403 no-rule" {
		t.Errorf("unlisted: %q", got)
	}
	if got := send("169.254.169.254", "/latest/meta-data/"); got != "403 high-risk" {
		t.Errorf("metadata: %q", got)
	}
	if got := send("allowed.test:9", "/"); got != "400 host-mismatch" {
		t.Errorf("Host naming another port: %q", got)
	}
}

func TestTransparentTLS(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	addr := transparentListen(t, h.px.ServeTransparentTLS, h.tlsO.port())
	get := func(sni, hostHdr string, roots bool) (string, error) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		pool := h.upCA.Pool()
		pool.AddCert(h.mitmCA.Certificate())
		tc := tls.Client(c, &tls.Config{ServerName: sni, RootCAs: pool})
		if err := tc.Handshake(); err != nil {
			return "", err
		}
		fmt.Fprintf(tc, "GET /x HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", hostHdr)
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			return "", err
		}
		resp.Body.Close()
		return fmt.Sprintf("%d %s issuer=%s", resp.StatusCode, resp.Header.Get("X-Egressd-Deny"), tc.ConnectionState().PeerCertificates[0].Issuer.CommonName), nil
	}
	got, err := get("allowed.test", "allowed.test", true)
	if err != nil || !strings.HasPrefix(got, "200 ") || !strings.Contains(got, h.upCA.Certificate().Subject.CommonName) {
		t.Errorf("spliced host-only rule: %q %v", got, err)
	}
	got, err = get("docs.test", "docs.test", true)
	if err != nil || !strings.HasPrefix(got, "200 ") || !strings.Contains(got, h.mitmCA.Certificate().Subject.CommonName) {
		t.Errorf("inspected rule: %q %v", got, err)
	}
	if got, err := get("docs.test", "allowed.test", true); err != nil || !strings.HasPrefix(got, "400 host-mismatch") {
		t.Errorf("inner Host differing from SNI: %q %v", got, err)
	}
	if _, err := get("unlisted.test", "unlisted.test", true); err == nil {
		t.Errorf("unlisted SNI: handshake succeeded")
	}
	waitLog(t, h, `"reason":"no-rule"`)
}

// TestTransparentTLSNotReadyLogsDeny: a transparent TLS connection closed
// because egressd is not ready is logged as a denial with status 503, not
// as an allow.
func TestTransparentTLSNotReadyLogsDeny(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	h.ready.Store(false)
	addr := transparentListen(t, h.px.ServeTransparentTLS, h.tlsO.port())
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if err := tls.Client(c, &tls.Config{ServerName: "allowed.test", RootCAs: h.upCA.Pool()}).Handshake(); err == nil {
		t.Error("handshake through a proxy that is not ready succeeded")
	}
	line := waitLog(t, h, `"reason":"not-ready"`)
	if !strings.Contains(line, `"decision":"deny"`) || !strings.Contains(line, `"status":503`) {
		t.Errorf("not-ready logged as %s, want decision deny, status 503", line)
	}
}

// TestSplicedTunnelBytesCounted: a spliced tunnel's bytes reach
// egressd_bytes_total whichever front opened it (a CONNECT or a
// transparent TLS connection), the same figures as its decision line.
// The transparent front once counted none: it ran its own copy of the
// splice, without the accounting.
func TestSplicedTunnelBytesCounted(t *testing.T) {
	t.Parallel()
	for _, front := range []string{"connect", "transparent"} {
		t.Run(front, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, testConfig, testNames)
			var c net.Conn
			reason := `"reason":"tunnel"`
			if front == "connect" {
				c = h.connect(t, "allowed.test:"+h.tlsO.port())
			} else {
				var err error
				if c, err = net.Dial("tcp", transparentListen(t, h.px.ServeTransparentTLS, h.tlsO.port())); err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				reason = `"reason":"transparent tunnel"`
			}
			c.SetDeadline(time.Now().Add(5 * time.Second))
			tc := tls.Client(c, &tls.Config{ServerName: "allowed.test", RootCAs: h.upCA.Pool()})
			fmt.Fprintf(tc, "GET /x HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			tc.Close()
			var rec struct {
				In  float64 `json:"bytes_in"`
				Out float64 `json:"bytes_out"`
			}
			if err := json.Unmarshal([]byte(waitLog(t, h, reason)), &rec); err != nil || rec.In == 0 || rec.Out == 0 {
				t.Fatalf("decision line: %+v %v", rec, err)
			}
			var in, out dto.Metric
			h.px.m.bytesIn.Write(&in)
			h.px.m.bytesOut.Write(&out)
			if got := [2]float64{in.GetCounter().GetValue(), out.GetCounter().GetValue()}; got != [2]float64{rec.In, rec.Out} {
				t.Errorf("egressd_bytes_total in, out = %v, decision line says %v", got, [2]float64{rec.In, rec.Out})
			}
		})
	}
}

// TestTunnelDialRefusalFlagsHighRisk: a tunnel whose name resolves to a
// metadata address is a high-risk denial on its decision line whichever
// front opened it. The transparent front once logged it unflagged: it
// read the dial's refusal on its own, without the high-risk mark.
func TestTunnelDialRefusalFlagsHighRisk(t *testing.T) {
	t.Parallel()
	for _, front := range []string{"connect", "transparent"} {
		t.Run(front, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, testConfig, testNames)
			if front == "connect" {
				if got := h.raw("CONNECT meta.test:" + h.tlsO.port() + " HTTP/1.1\r\nHost: meta.test\r\n\r\n"); !strings.HasPrefix(got, "HTTP/1.1 403") {
					t.Fatalf("CONNECT to a metadata name: %q", got)
				}
			} else {
				c, err := net.Dial("tcp", transparentListen(t, h.px.ServeTransparentTLS, h.tlsO.port()))
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				if err := tls.Client(c, &tls.Config{ServerName: "meta.test", RootCAs: h.upCA.Pool()}).Handshake(); err == nil {
					t.Fatal("handshake to a metadata name succeeded")
				}
			}
			line := waitLog(t, h, `"reason":"high-risk"`)
			if !strings.Contains(line, `"high_risk":true`) || !strings.Contains(line, `"decision":"deny"`) {
				t.Errorf("decision line %s: want a denial flagged high_risk", line)
			}
		})
	}
}
