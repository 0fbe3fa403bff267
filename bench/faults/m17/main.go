//go:build linux

// Command m17 is the fault origin and the clients of bench/faults/measure17.sh
// (issue 17's measurements): upstreams that stall, dribble or send a huge
// response head, clients that sit on them through egressd's proxy and then
// leave, and a flood of DNS queries for denied names. Everything it dials or
// serves is on 127.0.0.1 (the script runs it in its own network namespace).
//
//	m17 origin -stall ADDR -dribble ADDR -bighead ADDR [-head-mb 20]
//	m17 clients -proxy ADDR -url URL[,URL...] -n 200   # holds, then leaves on SIGTERM
//	m17 heads -proxy ADDR -url URL -n 20
//	m17 dnsflood -server ADDR -zone denied.example -dur 60s [-inflight 16]
//
// and those of bench/faults/measure27.sh (issue 27, door.go):
//
//	m17 door-origin -http ADDR -echo ADDR[,ADDR] [-dns ADDR]
//	m17 load -proxy ADDR -url URL -c 4          # until SIGTERM: 200s and refusals
//	m17 tunnels -proxy ADDR -target ADDR -n 2000 # holds them until SIGTERM
package main

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: m17 origin|clients|heads|dnsflood|door-origin|load|tunnels [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "origin":
		err = origin(os.Args[2:])
	case "clients":
		err = clients(os.Args[2:])
	case "heads":
		err = heads(os.Args[2:])
	case "dnsflood":
		err = dnsflood(os.Args[2:])
	case "door-origin":
		err = doorOrigin(os.Args[2:])
	case "load":
		err = load(os.Args[2:])
	case "tunnels":
		err = tunnels(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "m17:", err)
		os.Exit(1)
	}
}

// origin serves three faulty upstreams until killed. Each reads the
// request head, then: stall sends a head promising 1 MB and 100 bytes of it
// and then nothing; dribble sends the same head and then one byte every
// 3 s; bighead sends a status line and then head-mb MB of header lines.
// A reader per connection notices when the peer (egressd) closes it, so
// the origin's own "open" count shows whether egressd let go.
func origin(args []string) error {
	fs := flag.NewFlagSet("origin", flag.ContinueOnError)
	stall := fs.String("stall", "", "listen address of the stalling origin")
	dribble := fs.String("dribble", "", "listen address of the dribbling origin")
	bighead := fs.String("bighead", "", "listen address of the huge-head origin")
	headMB := fs.Int("head-mb", 20, "size of bighead's response head in MB")
	if err := fs.Parse(args); err != nil {
		return err
	}
	const head = "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: 1000000\r\n\r\n"
	body := strings.Repeat("x", 100)
	kinds := map[string]func(net.Conn, <-chan struct{}){
		*stall: func(c net.Conn, gone <-chan struct{}) {
			io.WriteString(c, head+body)
			<-gone
		},
		*dribble: func(c net.Conn, gone <-chan struct{}) {
			io.WriteString(c, head+body)
			t := time.NewTicker(3 * time.Second)
			defer t.Stop()
			for {
				select {
				case <-gone:
					return
				case <-t.C:
					if _, err := io.WriteString(c, "x"); err != nil {
						return
					}
				}
			}
		},
		*bighead: func(c net.Conn, gone <-chan struct{}) {
			w := bufio.NewWriterSize(c, 64<<10)
			w.WriteString("HTTP/1.1 200 OK\r\n")
			line := "X-Pad: " + strings.Repeat("a", 1000) + "\r\n"
			for n := 0; n < *headMB<<20; n += len(line) {
				if _, err := w.WriteString(line); err != nil {
					return
				}
			}
			w.WriteString("Content-Length: 0\r\n\r\n")
			w.Flush()
		},
	}
	var open atomic.Int64
	for addr, serve := range kinds {
		if addr == "" {
			continue
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				open.Add(1)
				go func() {
					defer open.Add(-1)
					defer c.Close()
					br := bufio.NewReader(c)
					if _, err := http.ReadRequest(br); err != nil {
						return
					}
					gone := make(chan struct{})
					go func() { io.Copy(io.Discard, br); close(gone) }()
					serve(c, gone)
				}()
			}
		}()
	}
	fmt.Println("origin listening")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1)
	for s := range sig {
		fmt.Printf("origin: %d upstream connections open\n", open.Load())
		if s != syscall.SIGUSR1 {
			return nil
		}
	}
	return nil
}

// clients opens n connections to the proxy, each asking for one of the
// URLs in turn, and waits until every one has its response head and the
// first body bytes. It prints "connected N", holds them until SIGTERM,
// then closes them all at once and prints "left".
func clients(args []string) error {
	fs := flag.NewFlagSet("clients", flag.ContinueOnError)
	proxy := fs.String("proxy", "", "proxy address")
	urls := fs.String("url", "", "comma-separated URLs, asked in turn")
	n := fs.Int("n", 200, "clients")
	if err := fs.Parse(args); err != nil {
		return err
	}
	list := strings.Split(*urls, ",")
	conns := make([]net.Conn, *n)
	codes := make([]string, *n)
	var wg sync.WaitGroup
	for i := range *n {
		wg.Go(func() {
			u := list[i%len(list)]
			pu, err := url.Parse(u)
			if err != nil {
				codes[i] = "bad-url"
				return
			}
			c, err := net.DialTimeout("tcp", *proxy, 10*time.Second)
			if err != nil {
				codes[i] = "dial-error"
				return
			}
			conns[i] = c
			c.SetDeadline(time.Now().Add(30 * time.Second))
			fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", u, pu.Host)
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				codes[i] = "no-head"
				return
			}
			codes[i] = fmt.Sprint(resp.StatusCode)
			if _, err := io.ReadFull(resp.Body, make([]byte, 1)); err != nil {
				codes[i] += "-no-body"
			}
			c.SetDeadline(time.Time{})
		})
	}
	wg.Wait()
	fmt.Printf("connected %d: %s\n", *n, count(codes))
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}
	fmt.Println("left")
	return nil
}

// heads asks the proxy for url n times at once and prints the status codes
// and the time until the last answer.
func heads(args []string) error {
	fs := flag.NewFlagSet("heads", flag.ContinueOnError)
	proxy := fs.String("proxy", "", "proxy address")
	u := fs.String("url", "", "URL")
	n := fs.Int("n", 20, "concurrent requests")
	if err := fs.Parse(args); err != nil {
		return err
	}
	pu, err := url.Parse("http://" + *proxy)
	if err != nil {
		return err
	}
	client := &http.Client{
		Transport: &http.Transport{Proxy: http.ProxyURL(pu), DisableKeepAlives: true, MaxResponseHeaderBytes: 64 << 20},
		Timeout:   120 * time.Second,
	}
	codes := make([]string, *n)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range *n {
		wg.Go(func() {
			resp, err := client.Get(*u)
			if err != nil {
				codes[i] = "error"
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes[i] = fmt.Sprint(resp.StatusCode)
		})
	}
	wg.Wait()
	fmt.Printf("%d heads: %s in %.2f s\n", *n, count(codes), time.Since(start).Seconds())
	return nil
}

// dnsflood sends A queries for random names under zone over UDP, keeping
// inflight of them outstanding, for dur; it prints the queries sent, the
// answers by rcode and the answers a second.
func dnsflood(args []string) error {
	fs := flag.NewFlagSet("dnsflood", flag.ContinueOnError)
	server := fs.String("server", "", "DNS server address")
	zone := fs.String("zone", "denied.example", "names are random labels under this")
	dur := fs.Duration("dur", 60*time.Second, "how long")
	inflight := fs.Int("inflight", 16, "queries outstanding at once (one socket each)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var mu sync.Mutex
	rcodes := map[string]int{}
	var sent atomic.Int64
	start := time.Now()
	end := start.Add(*dur)
	var wg sync.WaitGroup
	for range *inflight {
		wg.Go(func() {
			c := &dns.Client{Net: "udp", Timeout: time.Second}
			conn, err := c.Dial(*server)
			if err != nil {
				mu.Lock()
				rcodes["dial-error"]++
				mu.Unlock()
				return
			}
			defer conn.Close()
			local := map[string]int{}
			label := make([]byte, 8)
			for time.Now().Before(end) {
				rand.Read(label)
				m := new(dns.Msg)
				m.SetQuestion(hex.EncodeToString(label)+"."+dns.Fqdn(*zone), dns.TypeA)
				sent.Add(1)
				// no context: its deadline, once past, makes every
				// exchange time out at once until its timer fires
				r, _, err := c.ExchangeWithConn(m, conn)
				switch {
				case err == nil:
					local[dns.RcodeToString[r.Rcode]]++
				default:
					local["error: "+errKind(err)]++
				}
			}
			mu.Lock()
			for k, v := range local {
				rcodes[k] += v
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	el := time.Since(start).Seconds()
	answered := 0
	var parts []string
	for k, v := range rcodes {
		parts = append(parts, fmt.Sprintf("%s %d", k, v))
		if !strings.HasPrefix(k, "error") && k != "dial-error" {
			answered += v
		}
	}
	sort.Strings(parts)
	fmt.Printf("dns flood: %d queries in %.1f s; answers: %s; %.0f answers/s\n", sent.Load(), el, strings.Join(parts, ", "), float64(answered)/el)
	return nil
}

// errKind shortens a DNS exchange error to its kind.
func errKind(err error) string {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	return err.Error()
}

// count prints "N×code" for each distinct code, most frequent first.
func count(codes []string) string {
	m := map[string]int{}
	for _, c := range codes {
		m[c]++
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] || m[keys[i]] == m[keys[j]] && keys[i] < keys[j] })
	var out []string
	for _, k := range keys {
		out = append(out, fmt.Sprintf("%d×%s", m[k], k))
	}
	return strings.Join(out, " ")
}
