package probens

import (
	"net"
	"net/netip"
	"testing"
	"time"
)

// TestConnSetResetFreesPair: egressd's side of a probe connection ends in
// a reset (a close with unread data: a refused body, a cut tunnel the
// probe was still writing into). The probe's socket is then in CLOSE: its
// descriptor is open, but the kernel gave its automatic port back, and a
// local process (a UID sandbox shares the namespace) could bind it and
// connect to the same listener, the same 4-tuple, while the set still
// held the pair: its connection was exempt as the self-test's (past the
// readiness gate, decided by a reload's candidate). From the reset on, the
// pair must not be exempt.
func TestConnSetResetFreesPair(t *testing.T) {
	s := &ConnSet{m: map[connKey]int{}, closed: map[connKey]time.Time{}, ended: make(chan connKey, 1)}
	proxyL := listenLoopback(t)
	probe, err := s.track(loopbackDialer())(t.Context(), "tcp", proxyL.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	srv := accept(t, proxyL)
	if !exempt(s, srv) {
		t.Fatal("the probe's open connection is not exempt")
	}
	pair := connKey{netip.MustParseAddrPort(probe.LocalAddr().String()), netip.MustParseAddrPort(proxyL.Addr().String())}
	// egressd aborts its side (as a close with unread input does)
	srv.(*net.TCPConn).SetLinger(0)
	srv.Close()
	raw := probe.(*trackedConn).Conn
	for deadline := time.Now().Add(5 * time.Second); !socketClosed(raw); {
		if time.Now().After(deadline) {
			t.Fatal("the probe's socket never reached CLOSE after the reset")
		}
		time.Sleep(time.Millisecond)
	}
	if s.Has(pair.client, pair.server) {
		t.Errorf("the pair %s of a probe socket in CLOSE (its port given back) is still exempt as the self-test's", pair.client)
	}
}
