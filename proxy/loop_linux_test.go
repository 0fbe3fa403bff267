//go:build linux

package proxy

import (
	"bytes"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// loopEnds is one tunnel through a loop: the client's end, the origin's
// end, and what done reported.
type loopEnds struct {
	client, origin *net.TCPConn
	p              *loopPair
	done           chan loopResult
	streamed       atomic.Int64
}

type loopResult struct {
	out, in int64
	idled   bool
}

// loopTunnel relays a fresh pair of TCP connections in the process's
// loops, as splice does: the test holds the outer ends.
func loopTunnel(t *testing.T, idle time.Duration, setup ...func(client, proxyIn, proxyOut, origin *net.TCPConn)) *loopEnds {
	t.Helper()
	ls := processLoops(nil)
	if len(ls) == 0 {
		t.Fatal("no tunnel loops")
	}
	client, proxyIn := tcpPair(t)
	proxyOut, origin := tcpPair(t)
	for _, f := range setup {
		f(client, proxyIn, proxyOut, origin)
	}
	le := &loopEnds{client: client, origin: origin, done: make(chan loopResult, 2)}
	le.p = ls.pair(idle, func(out, in int64, idled bool) { le.done <- loopResult{out, in, idled} }, func() { le.streamed.Add(1) })
	if !le.p.adopt(proxyIn, proxyOut) {
		t.Fatal("adopt refused two TCP connections")
	}
	return le
}

// wait returns done's report, failing after 10 s.
func (le *loopEnds) wait(t *testing.T) loopResult {
	t.Helper()
	select {
	case r := <-le.done:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("the loop did not end the tunnel within 10 s")
		return loopResult{}
	}
}

// waitOnce is wait, and fails if done reports again within 100 ms.
func (le *loopEnds) waitOnce(t *testing.T) loopResult {
	t.Helper()
	r := le.wait(t)
	select {
	case r2 := <-le.done:
		t.Fatalf("done reported twice: %+v, %+v", r, r2)
	case <-time.After(100 * time.Millisecond):
	}
	return r
}

func readAllTimeout(t *testing.T, c net.Conn) []byte {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return b
}

// TestLoopRelaysAndHalfCloses: bytes go both ways, each side's end of
// sending reaches the other as EOF while the other direction still
// carries data, and done counts every byte once.
func TestLoopRelaysAndHalfCloses(t *testing.T) {
	t.Parallel()
	le := loopTunnel(t, 0)
	le.client.Write([]byte("ping"))
	buf := make([]byte, 4)
	le.origin.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(le.origin, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("origin read %q, %v", buf, err)
	}
	le.client.CloseWrite()
	if rest := readAllTimeout(t, le.origin); len(rest) != 0 {
		t.Fatalf("origin read %q after the client's EOF", rest)
	}
	// The other direction is still open after the client's half-close.
	le.origin.Write([]byte("pong, and more"))
	le.origin.CloseWrite()
	if got := readAllTimeout(t, le.client); string(got) != "pong, and more" {
		t.Fatalf("client read %q", got)
	}
	r := le.waitOnce(t)
	if r.out != 4 || r.in != 14 || r.idled {
		t.Fatalf("done reported %+v, want out 4, in 14, not idle", r)
	}
}

// TestLoopKeepsOrderUnderBackpressure: an origin sends faster than the
// client reads, and the client's socket fills.
//
// Paced so that the loop's reads stay small, the loop keeps what the
// client's socket did not take and stops reading the origin until it is
// written (the origin's bytes then wait in the proxy's socket), and the
// tunnel stays in the loop. Unpaced, a read of relayHot bytes or more
// hands the stream to the goroutine relay, with the bytes the loop read.
// Either way the client gets every byte in order, and done counts them.
func TestLoopKeepsOrderUnderBackpressure(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		chunk    int  // the origin's writes
		paced    bool // write only while the proxy's socket holds < 8 KiB
		total    int
		streamed int64
	}{
		{"small reads stay in the loop", 700, true, 1 << 20, 0},
		{"a stream goes to the goroutine relay", 256 << 10, false, 16 << 20, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The proxy's upstream socket, watched through a duplicate
			// (adopt closes the Go connection).
			upFD := -1
			le := loopTunnel(t, 0, func(_, proxyIn, proxyOut, _ *net.TCPConn) {
				if tc.paced {
					proxyIn.SetWriteBuffer(4096) // fills at once
				}
				// Not File().Fd(): Fd makes the socket blocking, for
				// every descriptor of it.
				rc, err := proxyOut.SyscallConn()
				if err != nil {
					t.Fatal(err)
				}
				var derr error
				rc.Control(func(fd uintptr) { upFD, derr = unix.Dup(int(fd)) })
				if derr != nil {
					t.Fatal(derr)
				}
				t.Cleanup(func() { unix.Close(upFD) })
			})
			queued := func() int {
				n, err := unix.IoctlGetInt(upFD, unix.SIOCINQ)
				if err != nil {
					t.Errorf("SIOCINQ: %v", err)
					return 1 << 30
				}
				return n
			}
			data := make([]byte, tc.total)
			rand.NewChaCha8([32]byte{1}).Read(data)
			go func() {
				for b := data; len(b) > 0; {
					for tc.paced && queued() >= 8<<10 {
						runtime.Gosched()
					}
					n := min(tc.chunk, len(b))
					if _, err := le.origin.Write(b[:n]); err != nil {
						return
					}
					b = b[n:]
				}
				le.origin.CloseWrite()
			}()
			// Read nothing until bytes wait in the proxy's socket: the
			// loop has stopped reading it, the client's socket being full.
			deadline := time.Now().Add(10 * time.Second)
			for queued() < 8<<10 && time.Now().Before(deadline) {
				runtime.Gosched()
			}
			le.client.CloseWrite()
			got := readAllTimeout(t, le.client)
			if sha256.Sum256(got) != sha256.Sum256(data) {
				t.Fatalf("client got %d bytes, not the %d sent in order", len(got), len(data))
			}
			if r := le.wait(t); r.in != int64(tc.total) || r.out != 0 {
				t.Fatalf("done reported %+v, want in %d", r, tc.total)
			}
			if s := le.streamed.Load(); s != tc.streamed {
				t.Fatalf("went to the goroutine relay %d times, want %d", s, tc.streamed)
			}
		})
	}
}

// TestLoopCut: a cut (a quarantine, a reload, the drain) ends a quiet
// tunnel at once, both ends see it end, and no descriptor stays.
func TestLoopCut(t *testing.T) {
	// Not parallel: it counts this process's sockets.
	_, before := fdKinds(t)
	le := loopTunnel(t, 0)
	le.client.Write([]byte("x"))
	io.ReadFull(le.origin, make([]byte, 1))
	le.p.cut()
	if r := le.waitOnce(t); r.out != 1 || r.idled {
		t.Fatalf("done reported %+v", r)
	}
	for _, c := range []*net.TCPConn{le.client, le.origin} {
		if b := readAllTimeout(t, c); len(b) != 0 {
			t.Fatalf("read %q after the cut", b)
		}
	}
	le.client.Close()
	le.origin.Close()
	if _, after := fdKinds(t); after > before {
		t.Fatalf("sockets: %d before the tunnel, %d after its cut", before, after)
	}
}

// TestLoopCutWhileStarting: a cut that arrives before the loop has the
// sockets is not lost.
func TestLoopCutWhileStarting(t *testing.T) {
	t.Parallel()
	ls := processLoops(nil)
	client, proxyIn := tcpPair(t)
	proxyOut, origin := tcpPair(t)
	done := make(chan bool, 1)
	p := ls.pair(0, func(_, _ int64, idled bool) { done <- idled }, nil)
	p.cut()
	if !p.adopt(proxyIn, proxyOut) {
		t.Fatal("adopt refused")
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a tunnel cut before adopt stayed open")
	}
	readAllTimeout(t, client)
	readAllTimeout(t, origin)
}

// TestLoopIdle: a tunnel without traffic for the idle timeout is closed
// and reported as idle; one with traffic is not.
func TestLoopIdle(t *testing.T) {
	t.Parallel()
	le := loopTunnel(t, 300*time.Millisecond)
	start := time.Now()
	r := le.waitOnce(t)
	if !r.idled {
		t.Fatalf("done reported %+v, want idled", r)
	}
	if el := time.Since(start); el < 250*time.Millisecond {
		t.Fatalf("closed after %s, before the idle timeout", el)
	}
	readAllTimeout(t, le.client)
}

// TestLoopClientReset: a client that resets its connection ends the
// tunnel, even while the origin stays silent (the reset socket is
// reported on every wait, and must not spin the loop).
func TestLoopClientReset(t *testing.T) {
	t.Parallel()
	le := loopTunnel(t, 0)
	le.client.SetLinger(0)
	le.client.Close()
	// The origin sees the client's end, then ends its own side.
	if b := readAllTimeout(t, le.origin); len(b) != 0 {
		t.Fatalf("origin read %q", b)
	}
	le.origin.Close()
	le.waitOnce(t)
}

// TestLoopQuietTunnelsHoldNoGoroutine: tunnels in a loop add no
// goroutine, and their bytes still flow.
func TestLoopQuietTunnelsHoldNoGoroutine(t *testing.T) {
	// Not parallel: it counts the process's goroutines.
	processLoops(nil)
	runtime.GC()
	before := runtime.NumGoroutine()
	const n = 200
	var tunnels []*loopEnds
	for range n {
		le := loopTunnel(t, time.Hour)
		tunnels = append(tunnels, le)
	}
	for _, le := range tunnels {
		roundTripVia(t, le)
	}
	if g := runtime.NumGoroutine() - before; g > n/10 {
		t.Fatalf("%d quiet tunnels added %d goroutines", n, g)
	}
	var ended atomic.Int64
	for _, le := range tunnels {
		le.client.Close()
		le.origin.Close()
		le.wait(t)
		ended.Add(1)
	}
}

// roundTripVia sends a byte each way through le.
func roundTripVia(t *testing.T, le *loopEnds) {
	t.Helper()
	b := []byte{'q'}
	le.client.Write(b)
	le.origin.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(le.origin, b); err != nil {
		t.Fatal(err)
	}
	le.origin.Write(b)
	le.client.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(le.client, b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, []byte{'q'}) {
		t.Fatalf("read %q", b)
	}
}
