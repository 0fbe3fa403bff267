package testutil

import (
	"net"
	"testing"
)

// ListenUDPTCP listens on UDP and TCP of one 127.0.0.1 port (a DNS
// server's two transports), closed when t ends. The kernel picks a free
// UDP port, and the same TCP port can still be taken by any other
// socket of the machine (a parallel test's client end): then it tries
// another port, so that the collision never fails or skips a test.
func ListenUDPTCP(t testing.TB) (net.PacketConn, net.Listener) {
	t.Helper()
	var err error
	for range 20 {
		pc, perr := net.ListenPacket("udp", "127.0.0.1:0")
		if perr != nil {
			t.Fatalf("listen udp: %v", perr)
		}
		var l net.Listener
		if l, err = net.Listen("tcp", pc.LocalAddr().String()); err == nil {
			t.Cleanup(func() { pc.Close(); l.Close() })
			return pc, l
		}
		pc.Close()
	}
	t.Fatalf("listen tcp on the port of a udp listener, 20 tries: %v", err)
	return nil, nil
}
