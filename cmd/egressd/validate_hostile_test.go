package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/egressd/egressd/internal/testutil"
)

// hostileResolver listens on 127.0.0.1 over UDP and TCP on one port: UDP
// queries get a truncated empty answer (asking the client to retry over
// TCP) and TCP connections are accepted and never answered; both are
// counted.
func hostileResolver(t *testing.T) (addr string, udpQueries, tcpConns *atomic.Int32) {
	t.Helper()
	pc, l := testutil.ListenUDPTCP(t)
	udpQueries, tcpConns = new(atomic.Int32), new(atomic.Int32)
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		udpQueries.Add(1)
		m := new(dns.Msg)
		m.SetReply(r)
		m.Truncated = true
		w.WriteMsg(m)
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go srv.ActivateAndServe()
	<-started
	var held []net.Conn
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			tcpConns.Add(1)
			held = append(held, c) // read nothing, answer nothing
		}
	}()
	t.Cleanup(func() {
		srv.Shutdown()
		l.Close()
		<-accepted
		for _, c := range held {
			c.Close()
		}
	})
	return pc.LocalAddr().String(), udpQueries, tcpConns
}

// silentResolver is a UDP upstream on 127.0.0.1 that reads every query and
// answers none.
func silentResolver(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 512)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { pc.Close(); <-done })
	return pc.LocalAddr().String()
}

// TestValidateHostileUpstreams: validate in a CI gate whose configured
// upstreams never answer (one silent, one that truncates every UDP answer
// and then holds the TCP connection open without a word), for more names
// than it resolves: it ends within its one deadline (resolveBudget, plus
// the rest of validate), exit 0, each name a note, and the cap named.
func TestValidateHostileUpstreams(t *testing.T) {
	silent := silentResolver(t)
	hostile, udpQ, tcpC := hostileResolver(t)
	var rules strings.Builder
	for i := range resolveMaxNames + 20 {
		fmt.Fprintf(&rules, "  - name: r%d\n    hosts: [h%d.internal.example]\n", i, i)
	}
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(cfg, []byte(`version: 1
resolver:
  upstreams: ["`+hostile+`", "`+silent+`"]
selftest:
  canary_name: canary.example.net
allow:
`+rules.String()), 0o644)
	start := time.Now()
	code, out, errs := runCmd("validate", cfg)
	took := time.Since(start)
	if code != exitOK || !strings.Contains(out, "ok") {
		t.Fatalf("validate: exit %d, stdout %q, stderr:\n%.2000s", code, out, errs)
	}
	if bound := 2*resolveBudget + time.Second; took > bound {
		t.Errorf("validate took %v against upstreams that never answer, want under %v (its budget is %v)", took.Round(time.Millisecond), bound, resolveBudget)
	}
	if n := strings.Count(errs, "did not resolve"); n != resolveMaxNames {
		t.Errorf("%d names noted as unresolved, want %d (the cap)", n, resolveMaxNames)
	}
	if !strings.Contains(errs, fmt.Sprintf("only the first %d names", resolveMaxNames)) {
		t.Errorf("the cap is not named:\n%.2000s", errs)
	}
	if udpQ.Load() == 0 || tcpC.Load() == 0 {
		t.Errorf("the hostile upstream saw %d UDP queries and %d TCP connections: the attack did not happen", udpQ.Load(), tcpC.Load())
	}
	t.Logf("validate against hostile upstreams: %v, %d UDP queries, %d TCP connections held", took.Round(time.Millisecond), udpQ.Load(), tcpC.Load())
}
