package probens

import (
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy"
)

// TestConnSetLateProbeThroughProxy: through egressd's proxy, a metadata
// probe that sent its request and gave up before the proxy read it is
// still the self-test's (no high-risk alert), while the same request from
// a connection not in the set is an agent's attempt (alerted). The probe's
// entry ends once the proxy has closed its side.
func TestConnSetLateProbeThroughProxy(t *testing.T) {
	pol, err := policy.Parse(strings.NewReader("version: 1\nallow: []\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := &ConnSet{m: map[connKey]int{}, closed: map[connKey]time.Time{}, ended: make(chan connKey, 1)}
	var mu sync.Mutex
	var alerts []string
	px := proxy.New(pol, proxy.Config{
		Logger:      slog.New(slog.DiscardHandler),
		ReadyExempt: s.Has,
		Alert: func(a proxy.Attempt) {
			mu.Lock()
			defer mu.Unlock()
			alerts = append(alerts, a.Identity+" "+a.Host)
		},
	})
	l := listenLoopback(t)
	go px.Serve(l)
	defer px.Shutdown(t.Context())
	const meta = "GET http://169.254.169.254/latest/meta-data/ HTTP/1.1\r\nHost: 169.254.169.254\r\n\r\n"

	probe, err := s.track(loopbackDialer())(t.Context(), "tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	client := netip.MustParseAddrPort(probe.LocalAddr().String())
	if _, err := probe.Write([]byte(meta)); err != nil {
		t.Fatal(err)
	}
	probe.Close() // gave up: the proxy decides after the probe closed
	waitEnded(t, s)
	if s.Has(client, netip.MustParseAddrPort(l.Addr().String())) {
		t.Error("the probe's connection is still exempt after the proxy closed its side")
	}
	mu.Lock()
	if len(alerts) != 0 {
		t.Errorf("a self-test probe decided after it gave up was alerted as an agent's attempt: %v", alerts)
	}
	mu.Unlock()

	// control: the same request from a connection not in the set
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(meta)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 1)); err != nil { // decided: the answer came
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(alerts) != 1 {
		t.Errorf("alerts %v, want exactly the control's (two: the probe's request was alerted as an agent's; none: the control failed and the test proves nothing)", alerts)
	}
}
