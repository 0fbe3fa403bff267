// Command gofloor is the least a forward proxy in Go does, for the bench
// to measure beside egressd: net/http's request parser, Go's net package
// and poller, a goroutine per connection, io.Copy both ways for CONNECT
// and http.Transport for plain HTTP. No policy, no ClientHello check, no
// logging, no limits: it is not a proxy to run, but the floor under what
// any proxy built on Go's standard runtime costs per connection, so that
// egressd's figures can be read against Go's own cost as well as against
// C proxies (bench/RESULTS.md, "Eighth round").
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:3128", "listen address")
	version := flag.Bool("v", false, "print the version and exit")
	flag.Parse()
	if *version {
		fmt.Println("gofloor (Go's standard runtime, no policy)")
		return
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	tr := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 64}
	for {
		c, err := ln.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, "accept:", err)
			continue
		}
		go serve(c, tr)
	}
}

// serve answers one client connection: a CONNECT becomes a tunnel,
// plain requests are forwarded one after another while kept alive.
func serve(c net.Conn, tr *http.Transport) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		r, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if r.Method == http.MethodConnect {
			tunnel(c, br, r.Host)
			return
		}
		r.RequestURI = ""
		resp, err := tr.RoundTrip(r)
		if err != nil {
			io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			return
		}
		err = resp.Write(c)
		resp.Body.Close()
		if err != nil || r.Close {
			return
		}
	}
}

// tunnel dials target, answers 200, forwards what the client sent after
// the CONNECT head, and copies both ways, half-closing as each side ends.
func tunnel(c net.Conn, br *bufio.Reader, target string) {
	up, err := net.Dial("tcp", target)
	if err != nil {
		io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
		return
	}
	defer up.Close()
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	if n := br.Buffered(); n > 0 {
		p, _ := br.Peek(n)
		if _, err := up.Write(p); err != nil {
			return
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.Copy(up, c)
		up.(*net.TCPConn).CloseWrite()
	}()
	io.Copy(c, up)
	c.(*net.TCPConn).CloseWrite()
	<-done
}
