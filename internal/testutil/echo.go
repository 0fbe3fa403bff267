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
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	return l.Addr().String()
}
