package selftest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/ca"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy"
)

// The checkpoint probes (proxy-loop, inner head limit, silent tunnel)
// pass against egressd's proxy and report a leak against a proxy with
// each hole open: a negative control for every probe.

const limitsConfig = `version: 1
allow:
  - name: local
    cidrs: [127.0.0.0/8]
    ports: ["1-65535"]
    pages: [read, download]
`

// limitProbes is a Config with only the three checkpoint probes, against
// the proxy at proxyAddr, for egressd listener own and origin target.
func limitProbes(t *testing.T, proxyAddr, own, target string) Config {
	var d net.Dialer
	return Config{
		Proxy:          netip.MustParseAddrPort(proxyAddr),
		Dial:           d.DialContext,
		Own:            []string{own},
		InspectHost:    target,
		HeadBytes:      32 << 10,
		SilentHost:     target,
		SilentDeadline: 300 * time.Millisecond,
		Timeout:        5 * time.Second,
	}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestCheckpointProbes(t *testing.T) {
	// Not parallel: its probes race egressd's 300 ms deadlines within the 1.5 s default, which other tests' load would blur.
	mitm, err := ca.New()
	if err != nil {
		t.Fatal(err)
	}
	origin := listen(t)
	go http.Serve(origin, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "origin") }))
	admin := listen(t) // stands for egressd's admin endpoint
	go http.Serve(admin, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "metrics") }))

	t.Run("egressd", func(t *testing.T) {
		pol, err := policy.Parse(strings.NewReader(limitsConfig), "t.yaml")
		if err != nil {
			t.Fatal(err)
		}
		px := proxy.New(pol, proxy.Config{CA: mitm, HelloTimeout: 300 * time.Millisecond})
		px.AddListener(admin.Addr())
		pl := listen(t)
		go px.Serve(pl)
		t.Cleanup(func() { px.Shutdown(context.Background()) })
		rep, err := Run(t.Context(), limitProbes(t, pl.Addr().String(), admin.Addr().String(), origin.Addr().String()))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rep.Results {
			if r.Status != Pass {
				t.Errorf("%s: %s %s: %s", r.ID, r.Status, r.Result, r.Detail)
			}
		}
		if len(rep.Results) != 5 {
			t.Errorf("%d probes, want 5", len(rep.Results))
		}
	})
	t.Run("holes open", func(t *testing.T) {
		pl := listen(t)
		go holeyProxy(t, pl, mitm)
		rep, err := Run(t.Context(), limitProbes(t, pl.Addr().String(), admin.Addr().String(), origin.Addr().String()))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rep.Results {
			if r.Status != Leak {
				t.Errorf("%s against a proxy with the hole open: %s %s: %s, want leak", r.ID, r.Status, r.Result, r.Detail)
			}
		}
	})
}

// holeyProxy behaves as egressd did before the fixes: it answers every
// request from "beyond" (no proxy-loop), accepts every CONNECT, waits for
// ever for a ClientHello, and reads an inner head of any size.
func holeyProxy(t *testing.T, l net.Listener, mitm *ca.CA) {
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
			if req.Method != http.MethodConnect {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nmetrics")
				return
			}
			io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
			if _, err := br.Peek(1); err != nil { // no deadline
				return
			}
			tc := tls.Server(&readerConn{Conn: c, r: br}, &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return mitm.Leaf("127.0.0.1") }})
			ir := bufio.NewReader(tc)
			var head bytes.Buffer
			for !bytes.HasSuffix(head.Bytes(), []byte("\r\n\r\n")) { // no limit
				line, err := ir.ReadSlice('\n')
				head.Write(line)
				if err != nil && err != bufio.ErrBufferFull {
					return
				}
			}
			fmt.Fprintf(tc, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}()
	}
}

type readerConn struct {
	net.Conn
	r io.Reader
}

func (c *readerConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// TestSilentTunnelAsked: against egressd with its real 5 s ClientHello
// deadline, the silent-tunnel probe asks for 250 ms on its own tunnel,
// sees it hold and is done well under a second.
func TestSilentTunnelAsked(t *testing.T) {
	// Not parallel: it times the probe against the deadline it asked for, which other tests' load would blur.
	mitm, err := ca.New()
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Parse(strings.NewReader(limitsConfig), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	px := proxy.New(pol, proxy.Config{CA: mitm})
	pl := listen(t)
	go px.Serve(pl)
	t.Cleanup(func() { px.Shutdown(context.Background()) })
	r := silentProbe(t, pl.Addr().String(), policy.DefaultHelloTimeout)
	if r.Status != Pass || r.Duration > 2*time.Second {
		t.Errorf("%s: %s %s (%s) in %v, want pass in well under HelloTimeout", r.ID, r.Status, r.Result, r.Detail, r.Duration)
	}
}

// TestSilentTunnelSaysSo: a proxy that says it applies the asked deadline
// and closes late, within its own deadline (a loaded machine), passes
// with the lateness said: the proof must not cry wolf. One that keeps the
// tunnel open is a leak.
func TestSilentTunnelSaysSo(t *testing.T) {
	t.Parallel()
	// saysSo answers every CONNECT with a 200 that says the asked deadline
	// applies, and closes the tunnel after cut (0: never).
	saysSo := func(cut time.Duration) string {
		pl := listen(t)
		go func() {
			for {
				c, err := pl.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					http.ReadRequest(bufio.NewReader(c))
					fmt.Fprintf(c, "HTTP/1.1 200 Connection established\r\n%s: 250ms\r\n\r\n", helloDeadlineHeader)
					if cut > 0 {
						c.SetReadDeadline(time.Now().Add(cut))
					}
					io.Copy(io.Discard, c) // holds the tunnel until the cut or the probe leaves
				}()
			}
		}()
		return pl.Addr().String()
	}
	t.Run("cuts late", func(t *testing.T) {
		t.Parallel()
		r := silentProbe(t, saysSo(1500*time.Millisecond), policy.DefaultHelloTimeout)
		if r.Status != Pass || !strings.Contains(r.Result, "later than") {
			t.Errorf("%s: %s %s (%s) in %v, want a pass that says it was late", r.ID, r.Status, r.Result, r.Detail, r.Duration)
		}
	})
	t.Run("cuts past its deadline", func(t *testing.T) {
		t.Parallel()
		r := silentProbe(t, saysSo(2500*time.Millisecond), time.Second)
		if r.Status != Leak {
			t.Errorf("%s: %s %s (%s) in %v, want a leak (held past its 1s deadline)", r.ID, r.Status, r.Result, r.Detail, r.Duration)
		}
	})
	t.Run("does not cut", func(t *testing.T) {
		t.Parallel()
		r := silentProbe(t, saysSo(0), 500*time.Millisecond)
		if r.Status != Leak {
			t.Errorf("%s: %s %s (%s) in %v, want a leak", r.ID, r.Status, r.Result, r.Detail, r.Duration)
		}
	})
	t.Run("run cancelled before the deadline", func(t *testing.T) {
		t.Parallel()
		// The run ends (a shutdown) while the tunnel is open and
		// before its deadline: nothing is proven either way.
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		r := silentProbeCtx(ctx, t, saysSo(0), 500*time.Millisecond)
		if r.Status != Error {
			t.Errorf("%s: %s %s (%s) in %v, want an error (cut short)", r.ID, r.Status, r.Result, r.Detail, r.Duration)
		}
	})
}

// silentProbe runs the silent-tunnel probe alone through proxyAddr, asking
// for 250 ms and holding the proxy to deadline.
func silentProbe(t *testing.T, proxyAddr string, deadline time.Duration) Result {
	t.Helper()
	return silentProbeCtx(t.Context(), t, proxyAddr, deadline)
}

func silentProbeCtx(ctx context.Context, t *testing.T, proxyAddr string, deadline time.Duration) Result {
	t.Helper()
	origin := listen(t) // never reached: the tunnel stays silent
	var d net.Dialer
	rep, err := Run(ctx, Config{Proxy: netip.MustParseAddrPort(proxyAddr), Dial: d.DialContext,
		SilentHost: origin.Addr().String(), SilentDeadline: deadline, SilentAsk: 250 * time.Millisecond})
	if err != nil || len(rep.Results) != 1 {
		t.Fatalf("run: %v %+v", err, rep)
	}
	return rep.Results[0]
}
