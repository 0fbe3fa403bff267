//go:build linux

package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRedteamLoopViaProxyWhileLooped: the admin endpoint refuses clients
// that are the local end of one of the proxy's open upstream connections
// (ViaProxy). A spliced CONNECT tunnel relayed by the loop must still be
// recognised while it is open: adopt closes the upstream's Go connection
// (outConn.Close), which forgets its local address while the socket lives
// on in the loop.
func TestRedteamLoopViaProxyWhileLooped(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	type seen struct {
		ap  netip.AddrPort
		via bool
	}
	got := make(chan seen, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		// The first byte arrives once the tunnel relays (in the loop).
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
			return
		}
		ap := netip.MustParseAddrPort(c.RemoteAddr().String())
		got <- seen{ap, h.px.ViaProxy(ap)}
		c.Write([]byte{'y'})
		io.Copy(io.Discard, c)
	}()
	_, port := splitPort(l.Addr().String())
	c := h.connect(t, "ssh.test:"+port)
	c.Write([]byte{'x'})
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	s := <-got
	if !s.via {
		t.Fatalf("the proxy's upstream %s of an open spliced tunnel is not recognised by ViaProxy: the admin endpoint would trust a sandbox", s.ap)
	}
}

// TestRedteamLoopHandBackOutOfDescriptors: a quiet tunnel that starts to
// stream goes back to the goroutine relay, which needs new descriptors
// (net.FileConn duplicates). Out of descriptors (a sandbox opening many
// tunnels), the goroutine relay kept relaying (errNoPipe: "an open tunnel
// must not be cut for the want of one"); the hand-back must not cut the
// tunnel or drop the bytes the loop read.
func TestRedteamLoopHandBackOutOfDescriptors(t *testing.T) {
	// Not parallel: it exhausts the process's descriptors.
	le := loopTunnel(t, 0)
	roundTripVia(t, le)
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	// Fill every free descriptor up to a lowered soft limit.
	low := lim
	low.Cur = 4096
	if low.Cur > lim.Cur {
		low.Cur = lim.Cur
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	var fill []int
	release := func() {
		for _, fd := range fill {
			syscall.Close(fd)
		}
		fill = nil
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	defer release()
	for {
		fd, err := syscall.Dup(0)
		if err != nil {
			break
		}
		fill = append(fill, fd)
	}
	data := bytes.Repeat([]byte("0123456789abcdef"), 4<<10) // 64 KiB: a hot read
	le.origin.Write(data)
	le.origin.CloseWrite()
	le.client.SetReadDeadline(time.Now().Add(3 * time.Second))
	b, _ := io.ReadAll(le.client)
	release()
	if !bytes.Equal(b, data) {
		t.Fatalf("out of descriptors at the hand-back: the client got %d of %d bytes (streamed %d)", len(b), len(data), le.streamed.Load())
	}
}

// TestRedteamLoopFinishLeavesStaleEpollItem: finish relied on close(2)
// to take a socket out of the epoll set, which holds only when the
// descriptor is the socket's last reference. Another reference (a child
// between fork and exec, as `egressd run` starts a sandbox; here a
// duplicate the test holds) kept the item in the set after the pair was
// gone: its level-triggered hang-up was reported on every wait, under a
// descriptor number the loop no longer knew (or that the next tunnel
// reused), and the loop spun (260 ms of CPU in 300 ms). The set's items
// are listed in /proc/self/fdinfo of its descriptor.
func TestRedteamLoopFinishLeavesStaleEpollItem(t *testing.T) {
	t.Parallel()
	held := -1
	le := loopTunnel(t, 0, func(_, _, proxyOut, _ *net.TCPConn) {
		rc, err := proxyOut.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		rc.Control(func(fd uintptr) { held, _ = syscall.Dup(int(fd)) })
	})
	defer syscall.Close(held)
	roundTripVia(t, le)
	up := le.p.b.fd
	le.client.CloseWrite()
	le.origin.CloseWrite()
	readAllTimeout(t, le.client)
	readAllTimeout(t, le.origin)
	le.waitOnce(t)
	info, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", le.p.l.ep))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(info), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "tfd:" && f[1] == strconv.Itoa(up) {
			// Another test's tunnel may have the number now: the stale
			// item is the one on this socket's inode.
			if ino := inode(t, held); ino != "" && strings.Contains(line, "ino:"+ino) {
				t.Fatalf("the ended pair's socket is still in the loop's epoll set: %s", line)
			}
		}
	}
}

// inode is the hexadecimal inode of fd's socket, as fdinfo prints it.
func inode(t *testing.T, fd int) string {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	return strconv.FormatUint(st.Ino, 16)
}
