package daemon

import (
	"net"
	"strings"
	"testing"
)

// TestListenDNSRetriesATakenTCPPort: with port 0 the system picks the UDP
// port, whose TCP twin can be another program's on a shared loopback;
// listenDNS then tries another port instead of failing the start (seen
// as a daemon test that hung, then failed, under load). A port the config
// names is tried once, and its error names it.
func TestListenDNSRetriesATakenTCPPort(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	takenAddr := taken.Addr().String()
	first := true
	listenPacket := func(network, address string) (net.PacketConn, error) {
		if first { // the system "picks" the port whose TCP twin is taken
			first = false
			return net.ListenPacket(network, takenAddr)
		}
		return net.ListenPacket(network, address)
	}
	udp, tcp, err := listenDNS("127.0.0.1:0", listenPacket, net.Listen)
	if err != nil {
		t.Fatalf("listenDNS with port 0 and the first pick's TCP port taken: %v", err)
	}
	defer udp.Close()
	defer tcp.Close()
	if udp.LocalAddr().String() != tcp.Addr().String() || tcp.Addr().String() == takenAddr {
		t.Errorf("udp %s, tcp %s (taken: %s): want one fresh address for both", udp.LocalAddr(), tcp.Addr(), takenAddr)
	}
	if _, _, err := listenDNS(takenAddr, net.ListenPacket, net.Listen); err == nil || !strings.Contains(err.Error(), "listen dns tcp "+takenAddr) {
		t.Errorf("a configured port whose TCP is taken: %v, want an error naming it", err)
	}
}
