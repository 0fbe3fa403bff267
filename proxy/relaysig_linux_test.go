package proxy

import (
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
)

// TestRelayWriteRaisesNoSIGPIPE: a relay write to a socket whose peer is
// gone fails with EPIPE and raises no SIGPIPE. Most tunnels end that way
// (the client resets, one direction still writes), and each signal is a
// round trip through the kernel and the runtime's handler. It runs in a
// child process of its own: signal.Notify sees every SIGPIPE of the
// process, and other tests' sockets must not count.
func TestRelayWriteRaisesNoSIGPIPE(t *testing.T) {
	if os.Getenv("EGRESSD_TEST_SIGPIPE") != "1" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRelayWriteRaisesNoSIGPIPE$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), "EGRESSD_TEST_SIGPIPE=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		return
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGPIPE, syscall.SIGWINCH)
	defer signal.Stop(sigs)

	srcW, srcR := tcpPair(t)
	dstW, dstR := tcpPair(t)
	dstR.SetLinger(0)
	dstR.Close() // a reset
	// The first call on the reset socket reports ECONNRESET (and clears
	// it); writes after that fail with EPIPE, the case that signals.
	if _, err := dstW.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after the peer's reset: %v, want ECONNRESET", err)
	}
	if _, err := srcW.Write([]byte("data")); err != nil {
		t.Fatal(err)
	}
	if _, err := relay(dstW, srcR, nil); !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("relay into the reset socket: %v, want EPIPE", err)
	}
	// A SIGPIPE raised by the write is pending before this SIGWINCH, and
	// os/signal hands pending signals over in ascending order (13 < 28).
	if err := syscall.Kill(os.Getpid(), syscall.SIGWINCH); err != nil {
		t.Fatal(err)
	}
	for s := range sigs {
		if s == syscall.SIGPIPE {
			t.Fatal("the relay's write raised SIGPIPE")
		}
		if s == syscall.SIGWINCH {
			break
		}
	}
}
