package proxy

import (
	"bytes"
	"crypto/rand"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestRelayStreamSplices: a streaming tunnel direction moves its bytes
// with splice(2) (the kernel copies; read and write copied each 64 KiB
// into the process and out again), every byte arrives in order and is
// counted, and no pipe is left open when the direction ends. Small
// exchanges stay on read and write (TestRelaySmallReadsStayRaw).
func TestRelayStreamSplices(t *testing.T) {
	for _, tc := range []struct {
		name      string
		sndBuf    int // the destination's send buffer; 0: the default
		slowChunk int // the final reader's read size
	}{
		{"fast reader", 0, 256 << 10},
		{"slow reader, writes wait", 32 << 10, 4 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srcW, srcR := tcpPair(t)
			dstW, dstR := tcpPair(t)
			if tc.sndBuf > 0 {
				dstW.SetWriteBuffer(tc.sndBuf)
			}
			data := make([]byte, 8<<20)
			rand.Read(data)
			before := relaySplicedBytes.Load()
			done := relayData(srcW, srcR, dstW, data)
			got := make([]byte, 0, len(data))
			buf := make([]byte, tc.slowChunk)
			for {
				n, err := dstR.Read(buf)
				got = append(got, buf[:n]...)
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			r := <-done
			if r.err != nil || r.n != int64(len(data)) {
				t.Fatalf("relay: %d bytes, %v; want %d, nil", r.n, r.err, len(data))
			}
			if !bytes.Equal(got, data) {
				t.Fatalf("received %d bytes that differ from the %d sent", len(got), len(data))
			}
			if spliced := relaySplicedBytes.Load() - before; spliced < int64(len(data))*3/4 {
				t.Errorf("%d of %d bytes spliced, want most of them", spliced, len(data))
			}
			if open := relayPipesOpen.Load(); open != 0 {
				t.Errorf("%d relay pipes open after the direction ended, want 0", open)
			}
			if got := notsentLowat(t, dstW); got != relayUnsent {
				t.Errorf("TCP_NOTSENT_LOWAT of a streaming direction's destination = %d, want %d (relayUnsent)", got, relayUnsent)
			}
		})
	}
}

// TestRelaySmallReadsStayRaw: an exchange of small messages (a TLS
// handshake, a short response) never takes a pipe.
func TestRelaySmallReadsStayRaw(t *testing.T) {
	srcW, srcR := tcpPair(t)
	dstW, dstR := tcpPair(t)
	before := relaySplicedBytes.Load()
	done := make(chan error, 1)
	go func() {
		_, err := relay(dstW, srcR, nil)
		done <- err
	}()
	msg := make([]byte, 1500)
	back := make([]byte, len(msg))
	for range 20 {
		if _, err := srcW.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(dstR, back); err != nil {
			t.Fatal(err)
		}
	}
	srcW.CloseWrite()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if spliced := relaySplicedBytes.Load() - before; spliced != 0 {
		t.Errorf("%d bytes of small messages spliced, want 0", spliced)
	}
	if got := notsentLowat(t, dstW); got != 0 {
		t.Errorf("TCP_NOTSENT_LOWAT after small messages = %d, want 0 (only a streaming direction pays the system call)", got)
	}
}

// notsentLowat reads c's TCP_NOTSENT_LOWAT (0: the system's default).
func notsentLowat(t *testing.T, c *net.TCPConn) int {
	return sockInt(t, c, func(fd int) (int, error) {
		return unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT)
	})
}

// sockInt runs get on c's descriptor.
func sockInt(t *testing.T, c *net.TCPConn, get func(fd int) (int, error)) int {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var gerr error
	if err := rc.Control(func(fd uintptr) { v, gerr = get(int(fd)) }); err != nil {
		t.Fatal(err)
	}
	if gerr != nil {
		t.Fatal(gerr)
	}
	return v
}

// TestRelayStalledReaderQueuesLittle: a client that stops reading a
// streaming tunnel makes the relay's writes wait, and the relay's socket
// toward it then holds little more than relayUnsent, in flight or unsent
// (TCP_NOTSENT_LOWAT). Without the limit the kernel queued megabytes there
// for every such tunnel (3.6 MiB measured: a sandbox could pin that much
// of the gateway's memory per tunnel it opened and left unread).
func TestRelayStalledReaderQueuesLittle(t *testing.T) {
	t.Parallel()
	srcW, srcR := tcpPair(t)
	dstW, _ := tcpPair(t) // the client never reads
	var written atomic.Int64
	chunk := make([]byte, 64<<10)
	go func() {
		for {
			n, err := srcW.Write(chunk)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
	}()
	go relay(dstW, srcR, nil)
	// Stalled: the writer has made no progress for 20 samples in a row.
	last, still := int64(-1), 0
	for deadline := time.Now().Add(20 * time.Second); still < 20; {
		if time.Now().After(deadline) {
			t.Fatalf("the writer never stalled (%d bytes written)", written.Load())
		}
		time.Sleep(10 * time.Millisecond) // sampling, not waiting for an event
		if w := written.Load(); w == last {
			still++
		} else {
			last, still = w, 0
		}
	}
	queued := outq(t, dstW)
	t.Logf("stalled after %d bytes written; the relay's socket toward the client queues %d bytes", last, queued)
	if limit := 8 * relayUnsent; queued > limit {
		t.Errorf("the relay's socket toward a client that stopped reading queues %d bytes, want at most %d (TCP_NOTSENT_LOWAT %d and what is in flight)", queued, limit, relayUnsent)
	}
}

// outq is the bytes in c's send queue, unsent or not yet acknowledged
// (SIOCOUTQ).
func outq(t *testing.T, c *net.TCPConn) int {
	return sockInt(t, c, func(fd int) (int, error) { return unix.IoctlGetInt(fd, unix.SIOCOUTQ) })
}
