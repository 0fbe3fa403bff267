//go:build linux

package main

import (
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/miekg/dns"

	"github.com/egressd/egressd/ca"
)

const (
	smallSize = 1 << 10  // the keep-alive and per-tunnel GET
	bulkSize  = 64 << 20 // the bulk transfer through one tunnel
)

// origin is the one upstream every proxy reaches: plain HTTP and TLS
// listeners on 127.0.0.1 serving /1k and /64m, a sink that holds idle
// tunnels, and a DNS server that answers *.bench.test with 127.0.0.1 (for
// the egressd-only scale runs; the side-by-side uses the literal address
// so no proxy needs a resolver).
type origin struct {
	plain, tls, sink, dns netip.AddrPort
	ca                    *ca.CA // issues the TLS listener's certificate
	caFile                string // ca's certificate, PEM (egressd's upstream_ca)

	sinkConns atomic.Int64 // idle tunnels the sink holds now
	sinkMu    sync.Mutex
	sinkHeld  map[net.Conn]struct{}

	closers []io.Closer
}

func startOrigin(dir string) (*origin, error) {
	o := &origin{sinkHeld: map[net.Conn]struct{}{}}
	var err error
	if o.ca, err = ca.New(); err != nil {
		return nil, fmt.Errorf("origin CA: %w", err)
	}
	o.caFile = filepath.Join(dir, "origin-ca.pem")
	if err := os.WriteFile(o.caFile, o.ca.CertPEM(), 0o644); err != nil {
		return nil, fmt.Errorf("write origin CA: %w", err)
	}
	leaf, err := o.ca.Leaf("127.0.0.1")
	if err != nil {
		return nil, fmt.Errorf("origin certificate: %w", err)
	}
	small := make([]byte, smallSize)
	for i := range small {
		small[i] = 'a' + byte(i%26)
	}
	chunk := make([]byte, 1<<20)
	h := http.NewServeMux()
	h.HandleFunc("/1k", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(smallSize))
		w.Write(small)
	})
	h.HandleFunc("/64m", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(bulkSize))
		for range bulkSize / len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	serve := func(l net.Listener) {
		srv := &http.Server{Handler: h, ErrorLog: log.New(io.Discard, "", 0)}
		o.closers = append(o.closers, srv)
		go srv.Serve(l)
	}
	pl, err := listen()
	if err != nil {
		return nil, err
	}
	o.plain = addrOf(pl)
	serve(pl)
	tl, err := listen()
	if err != nil {
		o.Close()
		return nil, err
	}
	o.tls = addrOf(tl)
	serve(tls.NewListener(tl, &tls.Config{
		Certificates: []tls.Certificate{*leaf},
		NextProtos:   []string{"http/1.1"},
	}))
	sl, err := listen()
	if err != nil {
		o.Close()
		return nil, err
	}
	o.sink = addrOf(sl)
	o.closers = append(o.closers, sl)
	go o.serveSink(sl)
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		o.Close()
		return nil, fmt.Errorf("listen dns: %w", err)
	}
	o.dns = netip.MustParseAddrPort(pc.LocalAddr().String())
	ds := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(answerBench)}
	o.closers = append(o.closers, closerFunc(ds.Shutdown))
	go ds.ActivateAndServe()
	return o, nil
}

// serveSink holds each connection open, reading and discarding, until the
// client (or the proxy) closes it: the far end of an idle tunnel.
func (o *origin) serveSink(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		o.sinkConns.Add(1)
		o.sinkMu.Lock()
		o.sinkHeld[c] = struct{}{}
		o.sinkMu.Unlock()
		go func() {
			io.Copy(io.Discard, c)
			c.Close()
			o.sinkMu.Lock()
			delete(o.sinkHeld, c)
			o.sinkMu.Unlock()
			o.sinkConns.Add(-1)
		}()
	}
}

// answerBench answers A queries under bench.test with 127.0.0.1 and
// everything else with NXDOMAIN, so nothing is ever resolved to a real
// address.
func answerBench(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	if len(r.Question) != 1 {
		m.Rcode = dns.RcodeFormatError
		w.WriteMsg(m)
		return
	}
	q := r.Question[0]
	if !strings.HasSuffix(strings.ToLower(q.Name), ".bench.test.") {
		m.Rcode = dns.RcodeNameError
		w.WriteMsg(m)
		return
	}
	if q.Qtype == dns.TypeA {
		m.Answer = append(m.Answer, &dns.A{
			Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300},
			A:   net.IPv4(127, 0, 0, 1).To4(),
		})
	}
	w.WriteMsg(m)
}

func (o *origin) Close() {
	for _, c := range o.closers {
		c.Close()
	}
	o.sinkMu.Lock()
	for c := range o.sinkHeld {
		c.Close()
	}
	o.sinkMu.Unlock()
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

func listen() (net.Listener, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	return l, nil
}

func addrOf(l net.Listener) netip.AddrPort {
	return netip.MustParseAddrPort(l.Addr().String())
}

// freePort returns a port on 127.0.0.1 that was free a moment ago, for
// proxies that take their listen address from a config file.
func freePort() (int, error) {
	l, err := listen()
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return int(addrOf(l).Port()), nil
}
