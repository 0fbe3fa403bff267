package proxy

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t testing.TB) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() { c, err := l.Accept(); ch <- res{c, err} }()
	a, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { a.Close(); r.c.Close() })
	return a.(*net.TCPConn), r.c.(*net.TCPConn)
}

// TestRelayLargeSlowReader relays 4 MiB from one socket pair to another
// while the final reader drains slowly, so the relay's writes hit EAGAIN
// and resume; every byte must arrive, in order, and be counted.
func TestRelayLargeSlowReader(t *testing.T) {
	t.Parallel()
	srcW, srcR := tcpPair(t)
	dstW, dstR := tcpPair(t)
	// a small send buffer: the relay's 64 KiB writes cannot complete at once
	dstW.SetWriteBuffer(32 << 10)
	data := make([]byte, 4<<20)
	rand.Read(data)
	done := relayData(srcW, srcR, dstW, data)
	var got bytes.Buffer
	buf := make([]byte, 16<<10)
	for i := 0; ; i++ {
		if i%32 == 0 {
			time.Sleep(time.Millisecond) // a slow reader
		}
		n, err := dstR.Read(buf)
		got.Write(buf[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	r := <-done
	if r.err != nil || r.n != int64(len(data)) {
		t.Fatalf("relay = %d, %v; want %d, nil", r.n, r.err, len(data))
	}
	if !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("relayed %d bytes differ from the %d sent", got.Len(), len(data))
	}
}

// relayResult is what relay returned.
type relayResult struct {
	n   int64
	err error
}

// relayData writes data into srcW and closes its sending side, while
// relay copies srcR to dstW and then closes dstW's sending side; the
// channel gets relay's result.
func relayData(srcW, srcR, dstW *net.TCPConn, data []byte) <-chan relayResult {
	go func() {
		srcW.Write(data)
		srcW.CloseWrite()
	}()
	done := make(chan relayResult, 1)
	go func() {
		n, err := relay(dstW, srcR, nil)
		dstW.CloseWrite()
		done <- relayResult{n, err}
	}()
	return done
}

// TestRelayPeerGone: when the destination's peer resets, the relay stops
// with the write error instead of spinning or blocking.
func TestRelayPeerGone(t *testing.T) {
	t.Parallel()
	srcW, srcR := tcpPair(t)
	dstW, dstR := tcpPair(t)
	dstR.SetLinger(0)
	dstR.Close() // RST to dstW
	done := make(chan error, 1)
	go func() {
		_, err := relay(dstW, srcR, nil)
		done <- err
	}()
	chunk := make([]byte, 32<<10)
	deadline := time.After(10 * time.Second)
	for {
		srcW.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		srcW.Write(chunk)
		select {
		case err := <-done:
			if !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("relay error = %v, want EPIPE or ECONNRESET", err)
			}
			return
		case <-deadline:
			t.Fatal("relay still running 10 s after its destination reset")
		default:
		}
	}
}

// TestRelayClosedSource: closing the source under a waiting relay ends it.
func TestRelayClosedSource(t *testing.T) {
	t.Parallel()
	srcW, srcR := tcpPair(t)
	dstW, dstR := tcpPair(t)
	done := make(chan error, 1)
	go func() {
		_, err := relay(dstW, srcR, nil)
		done <- err
	}()
	// Readiness: a byte through the relay shows it is in its copy loop;
	// with nothing more to read it waits on the source again.
	if _, err := srcW.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	dstR.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(dstR, make([]byte, 1)); err != nil {
		t.Fatalf("relay did not forward a byte: %v", err)
	}
	srcR.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("relay error = %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("relay did not end after its source was closed")
	}
}

// BenchmarkRelay moves 64 MiB per op from one loopback connection to another
// through relay (the spliced tunnel's copy loop).
func BenchmarkRelay(b *testing.B) {
	srcW, srcR := tcpPair(b)
	dstW, dstR := tcpPair(b)
	const size = 64 << 20
	go relay(dstW, srcR, nil)
	chunk := make([]byte, 256<<10)
	sink := make([]byte, 256<<10)
	b.SetBytes(size)
	for b.Loop() {
		go func() {
			for sent := 0; sent < size; sent += len(chunk) {
				srcW.Write(chunk)
			}
		}()
		for got := 0; got < size; {
			n, err := dstR.Read(sink)
			if err != nil {
				b.Fatal(err)
			}
			got += n
		}
	}
}

// TestPeekClientHelloTCP reads a real ClientHello from a TCP socket and
// keeps every byte it took for the replay.
func TestPeekClientHelloTCP(t *testing.T) {
	t.Parallel()
	a, b := tcpPair(t)
	go tls.Client(a, &tls.Config{ServerName: "example.test", InsecureSkipVerify: true}).Handshake()
	hello, raw, err := peekClientHello(b, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if hello.ServerName != "example.test" {
		t.Errorf("SNI %q", hello.ServerName)
	}
	if len(raw) < 5 || raw[0] != 0x16 || len(raw) < 5+int(raw[3])<<8|int(raw[4]) {
		t.Errorf("kept %d bytes, not a whole ClientHello record", len(raw))
	}
}
