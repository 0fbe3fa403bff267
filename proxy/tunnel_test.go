package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/testutil"
)

// recordHello returns the first flight of a Go TLS client configured by
// cfg: its ClientHello, as a proxy would read it.
func recordHello(t testing.TB, cfg *tls.Config) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go tls.Client(a, cfg).Handshake()
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(b, hdr); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
	if _, err := io.ReadFull(b, body); err != nil {
		t.Fatal(err)
	}
	return append(hdr, body...)
}

func TestPeekClientHello(t *testing.T) {
	t.Parallel()
	hello := recordHello(t, &tls.Config{ServerName: "allowed.test"})
	noSNI := recordHello(t, &tls.Config{ServerName: "127.0.0.1"})
	var protos []string // an ALPN list that makes the hello far larger than the first read
	for i := range 300 {
		protos = append(protos, fmt.Sprintf("proto-%024d", i))
	}
	big := recordHello(t, &tls.Config{ServerName: "allowed.test", NextProtos: protos})
	if len(big) <= helloFirstRead {
		t.Fatalf("test hello is %d bytes, want more than %d", len(big), helloFirstRead)
	}
	tests := []struct {
		name    string
		writes  [][]byte // what the client sends, write by write, then it waits
		close   bool     // the client closes after its writes
		wantSNI string
		wantErr error // nil: a hello is parsed
		wantRaw []byte
	}{
		{name: "one write", writes: [][]byte{hello}, wantSNI: "allowed.test", wantRaw: hello},
		{name: "byte by byte", writes: split(hello, 1), wantSNI: "allowed.test", wantRaw: hello},
		{name: "record header apart", writes: [][]byte{hello[:3], hello[3:]}, wantSNI: "allowed.test", wantRaw: hello},
		{name: "hello and what follows, kept for the replay", writes: [][]byte{append(append([]byte{}, hello...), "early"...)}, wantSNI: "allowed.test", wantRaw: append(append([]byte{}, hello...), "early"...)},
		{name: "no SNI", writes: [][]byte{noSNI}, wantSNI: "", wantRaw: noSNI},
		{name: "larger than the first read", writes: split(big, 1000), wantSNI: "allowed.test", wantRaw: big},
		{name: "not TLS", writes: [][]byte{[]byte("GET / HTTP/1.1\r\n")}, wantErr: ErrNotTLS, wantRaw: []byte("GET / HTTP/1.1\r\n")},
		{name: "truncated", writes: [][]byte{hello[:len(hello)/2]}, close: true, wantErr: io.ErrUnexpectedEOF},
		{name: "oversized record", writes: [][]byte{append([]byte{0x16, 3, 1, 0xff, 0xff}, make([]byte, 100)...)}, wantErr: errAny},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client, server := net.Pipe()
			defer server.Close()
			go func() {
				for _, w := range tt.writes {
					if _, err := client.Write(w); err != nil {
						return
					}
				}
				if tt.close {
					client.Close()
				}
			}()
			defer client.Close()
			got, raw, err := peekClientHello(server, 5*time.Second)
			switch {
			case tt.wantErr == nil && err != nil:
				t.Fatalf("got error %v, want a hello", err)
			case tt.wantErr == nil && got.ServerName != tt.wantSNI:
				t.Errorf("got SNI %q, want %q", got.ServerName, tt.wantSNI)
			case tt.wantErr == errAny && err == nil, tt.wantErr != nil && tt.wantErr != errAny && !errors.Is(err, tt.wantErr):
				t.Errorf("got error %v, want %v", err, tt.wantErr)
			case tt.wantErr != nil && got != nil:
				t.Errorf("got a hello for %s", tt.name)
			}
			if tt.wantRaw != nil && !bytes.Equal(raw, tt.wantRaw) {
				t.Errorf("got %d bytes to replay, want the %d read", len(raw), len(tt.wantRaw))
			}
		})
	}
}

var errAny = errors.New("any error")

func split(b []byte, n int) [][]byte {
	var out [][]byte
	for len(b) > n {
		out = append(out, b[:n])
		b = b[n:]
	}
	return append(out, b)
}

// fdKinds lists this process's descriptors: the set of pipe inodes, and
// the number of sockets.
func fdKinds(t testing.TB) (pipes map[string]bool, sockets int) {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	pipes = map[string]bool{}
	for _, e := range ents {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		switch {
		case err != nil: // closed since ReadDir
		case strings.HasPrefix(target, "pipe:"):
			pipes[target+"/"+e.Name()] = true
		case strings.HasPrefix(target, "socket:"):
			sockets++
		}
	}
	return pipes, sockets
}

// bufferedEcho is an origin that echoes through a buffer, without
// splice(2): it holds no pipe itself.
func bufferedEcho(t testing.TB) *rawOrigin {
	return newRawOrigin(t, func(c net.Conn, br *bufio.Reader) {
		buf := make([]byte, 512)
		for {
			n, err := br.Read(buf)
			if n > 0 {
				if _, werr := c.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	})
}

// roundTrip sends a byte through c and reads it back: afterwards the relay
// has run both directions once and waits again, so any pipe it holds while
// waiting exists.
func roundTrip(t testing.TB, c net.Conn) {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write([]byte{'x'}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
}

// TestIdleTunnelDescriptors: an idle tunnel costs its four sockets (both
// ends of both connections, all in this process) and no splice(2) pipe per
// waiting direction. The control relays TCP pairs with io.Copy, which
// splices, and shows the count sees those pipes. Each tunnel carries one
// round trip before the count, so every relay direction has run: nothing
// is timed.
func TestIdleTunnelDescriptors(t *testing.T) {
	// Not parallel: it counts this process's descriptors, which other tests open and close.
	if runtime.GOOS != "linux" {
		t.Skip("splice and /proc/self/fd are Linux")
	}
	const n = 20
	// perIdle opens n connections and returns the new pipe descriptors
	// and the new sockets per connection. Only pipes that did not exist
	// before count: pooled pipes of finished splices, which the runtime
	// closes when it likes, change nothing.
	perIdle := func(open func() net.Conn) (pipes, sockets float64) {
		runtime.GC() // drop pooled pipes that a relay could reuse unseen
		pipesBefore, socketsBefore := fdKinds(t)
		for range n {
			roundTrip(t, open())
		}
		pipesAfter, socketsAfter := fdKinds(t)
		var fresh int
		for p := range pipesAfter {
			if !pipesBefore[p] {
				fresh++
			}
		}
		return float64(fresh) / n, float64(socketsAfter-socketsBefore) / n
	}

	h := newHarness(t, testConfig, testNames)
	echo := bufferedEcho(t)
	if pipes, sockets := perIdle(func() net.Conn { return h.connect(t, "ssh.test:"+echo.port()) }); pipes > 0.5 || sockets > 4.5 {
		t.Errorf("%.1f pipe descriptors and %.1f sockets per idle tunnel, want 0 and 4 (client, both proxy sockets, origin)", pipes, sockets)
	}

	// control: the same count sees the pipes of io.Copy between sockets
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
			up, err := net.Dial("tcp", echo.l.Addr().String())
			if err != nil {
				c.Close()
				return
			}
			go func() { io.Copy(up, c); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
	pipes, _ := perIdle(func() net.Conn {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	})
	if pipes < 2 {
		t.Fatalf("control: %.1f new pipe descriptors per idle io.Copy pair, want about 4: the count does not see splice pipes", pipes)
	}
}

// TestTunnelHoldsSlot: a spliced tunnel runs after its CONNECT request is
// done, and keeps its identity's connection slot until it closes.
func TestTunnelHoldsSlot(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig+"limits:\n  conns_per_identity: 2\n", testNames)
	echo := testutil.EchoServer(t)
	_, port := splitPort(echo)
	a := h.connect(t, "ssh.test:"+port)
	h.connect(t, "ssh.test:"+port)
	out := h.raw("CONNECT ssh.test:" + port + " HTTP/1.1\r\nHost: ssh.test\r\n\r\n")
	if !strings.HasPrefix(out, "HTTP/1.1 429") || !strings.Contains(out, "conn-limit") {
		t.Fatalf("third tunnel of an identity limited to 2: got %.80q, want 429 conn-limit", out)
	}
	a.Close()
	waitFor(t, "the closed tunnel to give its slot back", func() bool {
		c, err := net.Dial("tcp", h.proxyURL.Host)
		if err != nil {
			return false
		}
		defer c.Close()
		fmt.Fprintf(c, "CONNECT ssh.test:%s HTTP/1.1\r\nHost: ssh.test\r\n\r\n", port)
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		line, _ := bufio.NewReader(c).ReadString('\n')
		return strings.HasPrefix(line, "HTTP/1.1 200")
	})
}

// TestSplicedTunnelIdleTimeout: limits.idle_timeout closes a spliced tunnel
// that carried nothing for that long, and only such a tunnel: one with
// traffic more often than that stays open well past it.
func TestSplicedTunnelIdleTimeout(t *testing.T) {
	t.Parallel()
	// idle is long against the pacing below (idle/10), so a loaded
	// machine that oversleeps the pacing tenfold still keeps busy open.
	const idle = time.Second
	h := newHarness(t, testConfig+"limits:\n  idle_timeout: 1s\n", testNames)
	_, port := splitPort(testutil.EchoServer(t))
	echo := func(c net.Conn, msg string) error {
		c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := io.WriteString(c, msg); err != nil {
			return err
		}
		got := make([]byte, len(msg))
		_, err := io.ReadFull(c, got)
		if err == nil && string(got) != msg {
			err = fmt.Errorf("echo %q, want %q", got, msg)
		}
		return err
	}

	// busy: a byte every idle/10 for 2×idle
	busy := h.connect(t, "ssh.test:"+port)
	start := time.Now()
	tick := time.NewTicker(idle / 10)
	defer tick.Stop()
	for time.Since(start) < 2*idle {
		if err := echo(busy, "x"); err != nil {
			t.Fatalf("busy tunnel broke after %v: %v", time.Since(start), err)
		}
		<-tick.C // pacing: the traffic pattern under test, not synchronisation
	}

	// quiet: one exchange, then nothing; the proxy must close it
	quiet := h.connect(t, "ssh.test:"+port)
	if err := echo(quiet, "hello"); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	quiet.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := quiet.Read(make([]byte, 1))
	waited := time.Since(start)
	if n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("quiet tunnel: read %d, %v after %v; want it closed by the proxy", n, err, waited)
	}
	if waited < idle-50*time.Millisecond {
		t.Errorf("quiet tunnel closed after %v, before the %v idle timeout", waited, idle)
	}
	waitLog(t, h, "without traffic (limits.idle_timeout)")
}

// TestConnLimitAcrossUserLabels: the slot count was kept per identity as
// named, and the Proxy-Authorization user names it: one address opened any
// number of tunnels past conns_per_identity with a new label each. The
// identity its source address gives is counted too.
func TestConnLimitAcrossUserLabels(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig+"limits:\n  conns_per_identity: 2\n", testNames)
	_, port := splitPort(testutil.EchoServer(t))
	open := 0
	for i := range 4 {
		c, err := net.Dial("tcp", h.proxyURL.Host)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "CONNECT ssh.test:%s HTTP/1.1\r\nHost: ssh.test\r\nProxy-Authorization: Basic %s\r\n\r\n", port, basic(fmt.Sprintf("label-%d", i)))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, _ := bufio.NewReader(c).ReadString('\n')
		if strings.HasPrefix(line, "HTTP/1.1 200") {
			open++
		}
	}
	if open != 2 {
		t.Errorf("%d tunnels open from one address with changing user labels, want 2 (conns_per_identity)", open)
	}
}

// TestCloseBeforeRelayClosesUpstream: a quarantine or the drain's close
// that lands after a tunnel's ClientHello checks but before its relay runs
// closed only the client side; the relay then waited on an upstream that
// said nothing, the tunnel stayed open (no close record) and Drain waited
// for it.
func TestCloseBeforeRelayClosesUpstream(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		close func(x *Proxy)
	}{
		{"quarantine", func(x *Proxy) { x.Quarantine("agent-a") }},
		{"drain", func(x *Proxy) { x.ids.closeAll() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, testConfig, testNames)
			port := silentUpstream(t)
			closed := make(chan struct{})
			h.px.beforeRelay = func() { tc.close(h.px); close(closed) }
			c, err := net.Dial("tcp", h.proxyURL.Host)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			fmt.Fprintf(c, "CONNECT ssh.test:%s HTTP/1.1\r\nHost: ssh.test\r\nProxy-Authorization: Basic %s\r\n\r\n", port, basic("agent-a"))
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			select {
			case <-closed:
			case <-ctx.Done():
				t.Fatal("the tunnel never reached its relay")
			}
			waitNoTunnels(t, h.px, 3*time.Second, "the "+tc.name+" closed them, and the relay waits on a silent upstream")
		})
	}
}
