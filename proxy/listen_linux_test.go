package proxy

import (
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestListenKeepAliveInherited: connections accepted from Listen carry the
// keep-alive settings of the listening socket.
func TestListenKeepAliveInherited(t *testing.T) {
	t.Parallel()
	l, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := net.Dial("tcp", l.Addr().String())
		if err == nil {
			defer c.Close()
			c.Write([]byte("G")) // the listener accepts only once data is in
			buf := make([]byte, 1)
			c.Read(buf)
		}
	}()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []struct {
		name       string
		level, opt int
		want       int
	}{
		{"SO_KEEPALIVE", syscall.SOL_SOCKET, syscall.SO_KEEPALIVE, 1},
		{"TCP_KEEPIDLE", syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE, keepAliveIdle},
		{"TCP_KEEPINTVL", syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL, keepAliveInterval},
		{"TCP_KEEPCNT", syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT, keepAliveCount},
		{"TCP_NODELAY", syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1},
	} {
		var v int
		var gerr error
		rc.Control(func(fd uintptr) { v, gerr = syscall.GetsockoptInt(int(fd), o.level, o.opt) })
		if gerr != nil || v != o.want {
			t.Errorf("%s = %d, %v; want %d", o.name, v, gerr, o.want)
		}
	}
}

// TestListenDefersAccept: a connection is accepted once its client has
// sent something, not before (one wake-up for accept and first read).
func TestListenDefersAccept(t *testing.T) {
	t.Parallel()
	l, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tl := l.(*net.TCPListener)
	tl.SetDeadline(time.Now().Add(300 * time.Millisecond))
	if a, err := tl.Accept(); err == nil {
		a.Close()
		t.Fatal("accepted a connection whose client has sent nothing")
	} else if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal(err)
	}
	c.Write([]byte("CONNECT "))
	tl.SetDeadline(time.Now().Add(5 * time.Second))
	a, err := tl.Accept()
	if err != nil {
		t.Fatalf("after the client spoke: %v", err)
	}
	defer a.Close()
	buf := make([]byte, 8)
	a.SetReadDeadline(time.Now().Add(time.Second))
	if n, err := a.Read(buf); err != nil || string(buf[:n]) != "CONNECT " {
		t.Fatalf("first read %q, %v", buf[:n], err)
	}
}
