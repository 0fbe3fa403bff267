package testutil

import (
	"io"
	"net"
	"testing"
)

// EchoServer echoes whatever each connection sends, on 127.0.0.1 (a
// stand-in for SSH or any raw TCP origin), until the test ends; it returns
// its address.
func EchoServer(t testing.TB) string {
	t.Helper()
	return serveTCP(t, func(c net.Conn) { defer c.Close(); io.Copy(c, c) })
}

// SilentServer accepts connections on 127.0.0.1 and neither reads, writes
// nor closes them until the test ends (an upstream that says nothing); it
// returns its address.
func SilentServer(t testing.TB) string {
	t.Helper()
	return serveTCP(t, func(c net.Conn) { t.Cleanup(func() { c.Close() }) })
}

// serveTCP runs handle on its own goroutine for each connection to a
// listener on 127.0.0.1 until the test ends.
func serveTCP(t testing.TB, handle func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return // closed at the test's end
			}
			go handle(c)
		}
	}()
	return l.Addr().String()
}
