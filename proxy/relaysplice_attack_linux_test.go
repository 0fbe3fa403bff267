package proxy

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"syscall"
	"testing"
)

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("count descriptors: %v", err)
	}
	return len(ents)
}

// TestRelaySpliceAbruptEndsLeakNothing: bursts that end every way a
// hostile peer can end them (the destination reset mid-burst, the source
// reset mid-burst, the source half-closed) leave no pipe and no descriptor
// behind, and the relay returns each time.
func TestRelaySpliceAbruptEndsLeakNothing(t *testing.T) {
	data := make([]byte, 2<<20)
	rand.Read(data)
	before, spliced := openFDs(t), relaySplicedBytes.Load()
	for i := range 30 {
		func() {
			srcW, srcR := tcpPair(t)
			dstW, dstR := tcpPair(t)
			closeAll := func() {
				for _, c := range []io.Closer{srcW, srcR, dstW, dstR} {
					c.Close()
				}
			}
			defer closeAll()
			done := make(chan error, 1)
			go func() {
				_, err := relay(dstW, srcR, nil)
				dstW.CloseWrite()
				done <- err
			}()
			writeDone := make(chan struct{})
			go func() {
				defer close(writeDone)
				if i%3 == 2 {
					srcW.Write(data) //nolint:errcheck // checked at the destination
					srcW.CloseWrite()
					return
				}
				// A stream that goes on until its end is cut (bounded).
				for range 1000 {
					if _, err := srcW.Write(data); err != nil {
						return
					}
				}
			}()
			// Read one burst's worth, so the relay is splicing, then end.
			if _, err := io.ReadFull(dstR, make([]byte, 64<<10)); err != nil {
				t.Fatalf("round %d: first bytes: %v", i, err)
			}
			switch i % 3 {
			case 0: // the destination resets mid-burst
				dstR.SetLinger(0)
				dstR.Close()
			case 1: // the source resets mid-burst
				srcW.SetLinger(0)
				srcW.Close()
				io.Copy(io.Discard, dstR) //nolint:errcheck // until the relay gives up
			case 2: // half-close: the rest arrives, then EOF
				if n, err := io.Copy(io.Discard, dstR); err != nil || n != int64(len(data)-64<<10) {
					t.Fatalf("round %d: after the first bytes %d more (%v), want the other %d", i, n, err, len(data)-64<<10)
				}
			}
			err := <-done
			switch {
			case i%3 == 0 && err == nil:
				t.Errorf("round %d: relay returned nil after the destination reset mid-burst", i)
			case i%3 == 2 && err != nil:
				t.Errorf("round %d: relay after a half-close: %v", i, err)
			}
			closeAll() // the writer may wait on a source no one reads now
			<-writeDone
		}()
	}
	if relaySplicedBytes.Load() == spliced {
		t.Fatal("no byte spliced: the bursts never took a pipe, so their ends tested nothing")
	}
	if open := relayPipesOpen.Load(); open != 0 {
		t.Errorf("%d relay pipes open after every burst ended", open)
	}
	if after := openFDs(t); after > before {
		t.Errorf("%d descriptors open after 30 abrupt bursts, %d before: a pipe leaked", after, before)
	}
}

// TestRelaySpliceWithoutDescriptors: a streaming burst that cannot get a
// pipe (the process is out of descriptors, as a sandbox opening tunnels
// can make it) moves its bytes with read and write: an open tunnel is not
// cut because a pipe could not be made.
func TestRelaySpliceWithoutDescriptors(t *testing.T) {
	srcW, srcR := tcpPair(t)
	dstW, dstR := tcpPair(t)
	data := make([]byte, 4<<20)
	rand.Read(data)
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	low := lim
	low.Cur = uint64(openFDs(t) + 16)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatalf("lower the descriptor limit: %v", err)
	}
	var held []int
	defer func() {
		for _, fd := range held {
			syscall.Close(fd)
		}
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}()
	for range 64 { // fill every slot under the lowered limit
		fd, err := syscall.Dup(int(devnull.Fd()))
		if err != nil {
			if !errors.Is(err, syscall.EMFILE) {
				t.Fatalf("dup: %v", err)
			}
			break
		}
		held = append(held, fd)
	}
	if _, err := syscall.Dup(int(devnull.Fd())); !errors.Is(err, syscall.EMFILE) {
		t.Fatalf("descriptors not exhausted (dup: %v)", err)
	}
	go func() {
		srcW.Write(data)
		srcW.CloseWrite()
	}()
	done := make(chan error, 1)
	go func() {
		_, err := relay(dstW, srcR, nil)
		dstW.CloseWrite()
		done <- err
	}()
	got, rerr := io.ReadAll(dstR)
	if err := <-done; err != nil {
		t.Fatalf("relay with no descriptor to spare: %v (the tunnel was cut)", err)
	}
	if rerr != nil || !bytes.Equal(got, data) {
		t.Fatalf("received %d bytes (%v), want the %d sent", len(got), rerr, len(data))
	}
}
