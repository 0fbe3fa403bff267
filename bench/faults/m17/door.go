//go:build linux

package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

// The door measurements (bench/faults/measure27.sh, issue 27): an origin
// that answers "ok" and echoes, clients that count refusals while egressd
// reloads, and many tunnels held open across a stop.

// doorOrigin serves "ok" over HTTP on -http, echoes TCP on each -echo
// address, and answers every A question with 127.0.0.1 over UDP on -dns
// (egressd's upstream resolver), until killed.
func doorOrigin(args []string) error {
	fs := flag.NewFlagSet("door-origin", flag.ContinueOnError)
	httpAddr := fs.String("http", "", "listen address of the HTTP origin")
	echo := fs.String("echo", "", "comma-separated listen addresses of TCP echo origins")
	dnsAddr := fs.String("dns", "", "listen address of a resolver answering 127.0.0.1")
	if err := fs.Parse(args); err != nil {
		return err
	}
	errc := make(chan error, 8)
	if *dnsAddr != "" {
		srv := &dns.Server{Addr: *dnsAddr, Net: "udp", Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
			m := new(dns.Msg)
			m.SetReply(r)
			if len(r.Question) == 1 && r.Question[0].Qtype == dns.TypeA {
				rr, _ := dns.NewRR(r.Question[0].Name + " 60 IN A 127.0.0.1")
				m.Answer = append(m.Answer, rr)
			}
			w.WriteMsg(m) //nolint:errcheck
		})}
		go func() { errc <- srv.ListenAndServe() }()
	}
	if *httpAddr != "" {
		l, err := net.Listen("tcp", *httpAddr)
		if err != nil {
			return err
		}
		go func() {
			errc <- http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") }))
		}()
	}
	for a := range strings.SplitSeq(*echo, ",") {
		if a == "" {
			continue
		}
		l, err := net.Listen("tcp", a)
		if err != nil {
			return err
		}
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					errc <- err
					return
				}
				go func() { io.Copy(c, c); c.Close() }()
			}
		}()
	}
	fmt.Println("listening")
	return <-errc
}

// load asks url through the proxy from c clients until SIGTERM, and
// prints how many answers were 200 and how many were refused (any other
// status, or no answer).
func load(args []string) error {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	proxy := fs.String("proxy", "", "proxy address")
	u := fs.String("url", "", "URL to ask")
	c := fs.Int("c", 4, "clients")
	if err := fs.Parse(args); err != nil {
		return err
	}
	pu := &url.URL{Scheme: "http", Host: *proxy}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(pu), MaxIdleConnsPerHost: *c}}
	var ok, refused atomic.Int64
	var mu sync.Mutex
	codes := map[string]int{}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range *c {
		wg.Go(func() {
			for !stop.Load() {
				resp, err := client.Get(*u)
				code := "no-answer"
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					code = fmt.Sprint(resp.StatusCode)
					if r := resp.Header.Get("X-Egressd-Deny"); r != "" {
						code += "-" + r
					}
				}
				if code == "200" {
					ok.Add(1)
					continue
				}
				refused.Add(1)
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}
		})
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	stop.Store(true)
	wg.Wait()
	var list []string
	for k, v := range codes {
		list = append(list, fmt.Sprintf("%s x%d", k, v))
	}
	fmt.Printf("requests %d: 200 %d, refused %d (%s)\n", ok.Load()+refused.Load(), ok.Load(), refused.Load(), strings.Join(list, ", "))
	return nil
}

// tunnels opens n CONNECT tunnels to target through the proxy, proves
// each carries bytes, prints "open N", and holds them until SIGTERM; then
// it prints how many the proxy had closed.
func tunnels(args []string) error {
	fs := flag.NewFlagSet("tunnels", flag.ContinueOnError)
	proxy := fs.String("proxy", "", "proxy address")
	target := fs.String("target", "", "host:port to tunnel to (an echo origin)")
	n := fs.Int("n", 2000, "tunnels")
	par := fs.Int("par", 64, "tunnels opened at once")
	if err := fs.Parse(args); err != nil {
		return err
	}
	conns := make([]net.Conn, *n)
	var failed atomic.Int64
	sem := make(chan struct{}, *par)
	var wg sync.WaitGroup
	for i := range *n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c, err := openTunnel(*proxy, *target)
			if err != nil {
				failed.Add(1)
				return
			}
			conns[i] = c
		})
	}
	wg.Wait()
	fmt.Printf("open %d (failed %d)\n", int64(*n)-failed.Load(), failed.Load())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	closed := 0
	for _, c := range conns {
		if c == nil {
			continue
		}
		c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err == io.EOF {
			closed++
		}
		c.Close()
	}
	fmt.Printf("closed by the proxy: %d\n", closed)
	return nil
}

func openTunnel(proxy, target string) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", proxy, 10*time.Second)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != 200 {
		c.Close()
		return nil, fmt.Errorf("CONNECT %s: %v %v", target, resp, err)
	}
	if _, err := c.Write([]byte("ping")); err != nil {
		c.Close()
		return nil, err
	}
	b := make([]byte, 4)
	if _, err := io.ReadFull(br, b); err != nil {
		c.Close()
		return nil, err
	}
	c.SetDeadline(time.Time{})
	return c, nil
}
