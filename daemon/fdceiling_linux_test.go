package daemon

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/egressd/egressd/policy"
)

// TestAdminAtFDCeiling: at the process's real descriptor ceiling (a low
// RLIMIT_NOFILE, in a child process so the rest of the suite keeps its
// own), proxy clients are shed with 503 fd-limit while the admin endpoint
// still answers /metrics, which counts them (issue 17.4: the admin
// endpoint went dark exactly when an operator needed it).
func TestAdminAtFDCeiling(t *testing.T) {
	// Not parallel: its child counts descriptors against a low RLIMIT_NOFILE; the clients here must not share the machine with other tests' bursts.
	if os.Getenv("EGRESSD_FDCEILING_CHILD") == "1" {
		fdCeilingChild(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestAdminAtFDCeiling$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "EGRESSD_FDCEILING_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS: TestAdminAtFDCeiling")) {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if i := bytes.Index(out, []byte("clients held")); i >= 0 {
		line, _, _ := bytes.Cut(out[max(0, bytes.LastIndexByte(out[:i], '\n')+1):], []byte("\n"))
		t.Log(strings.TrimSpace(string(line)))
	}
}

func fdCeilingChild(t *testing.T) {
	f := start(t)
	var open int
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		open = len(ents)
	}
	// room for about 60 more descriptors above the proxy's reserve of 128
	lim := syscall.Rlimit{Cur: uint64(open + 128 + 60), Max: uint64(open + 128 + 60)}
	var old syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	defer syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old)
	proxyAddr, _, admin := f.d.Addrs()
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	shed := 0
	for i := 0; i < 200 && shed < 5; i++ {
		c, err := net.Dial("tcp", proxyAddr)
		if err != nil {
			t.Fatalf("dial %d: %v (the proxy should shed before the ceiling)", i, err)
		}
		// a request that stays open upstream-free: headers not finished
		io.WriteString(c, "GET "+f.a+"/ HTTP/1.1\r\nHost: x\r\n")
		c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		b := make([]byte, 512)
		n, _ := c.Read(b)
		if strings.Contains(string(b[:n]), "fd-limit") {
			shed++
			c.Close()
			continue
		}
		held = append(held, c)
	}
	if shed == 0 {
		t.Fatalf("no client shed with %d held", len(held))
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}).Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatalf("/metrics at the ceiling (%d clients held): %v", len(held), err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "egressd_connections_shed_total ") {
		t.Errorf("/metrics lacks the shed count")
	}
	t.Logf("%d clients held, %d shed, /metrics %d", len(held), shed, resp.StatusCode)
}

// TestDNSTCPAtFDCeiling: the DNS filter's TCP listener accepted every
// connection, outside the descriptor reserve that sheds proxy clients, so
// a sandbox that held TCP connections to the DNS port (one query each
// keeps one open for miekg/dns's 8 s idle timeout, and nothing bounds how
// many) used up the last descriptors: the admin endpoint went dark and
// every other client with it. The DNS listener's connections now come
// out of the same reserve: past it they are closed at once and counted.
// The daemon runs in a child at a low RLIMIT_NOFILE; the clients run here,
// so their own sockets cost the child nothing.
func TestDNSTCPAtFDCeiling(t *testing.T) {
	// Not parallel: its child counts descriptors against a low RLIMIT_NOFILE; the clients here must not share the machine with other tests' bursts.
	if os.Getenv("EGRESSD_DNSFD_CHILD") == "1" {
		dnsFDChild(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestDNSTCPAtFDCeiling$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "EGRESSD_DNSFD_CHILD=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var childOut strings.Builder
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		cmd.Wait()
		if t.Failed() {
			t.Logf("child:\n%s", childOut.String())
		}
	}()
	sc := bufio.NewScanner(stdout)
	var dnsAddr, admin string
	for sc.Scan() {
		childOut.WriteString(sc.Text() + "\n")
		if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "ADDRS" {
			dnsAddr, admin = f[1], f[2]
			break
		}
	}
	if dnsAddr == "" {
		t.Fatalf("the child never said where it listens")
	}
	go func() {
		for sc.Scan() {
			childOut.WriteString(sc.Text() + "\n")
		}
	}()
	q := new(dns.Msg)
	q.SetQuestion("refused.example.", dns.TypeA)
	wire, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	query := append([]byte{byte(len(wire) >> 8), byte(len(wire))}, wire...)
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	closed := 0
	for i := 0; i < 400 && closed < 5; i++ {
		c, err := net.DialTimeout("tcp", dnsAddr, 2*time.Second)
		if err != nil {
			t.Logf("dial %d: %v", i, err)
			break
		}
		// one answered query: the connection stays open for the idle timeout
		c.SetDeadline(time.Now().Add(2 * time.Second))
		c.Write(query)
		var l [2]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			closed++ // shed: closed without an answer
			c.Close()
			continue
		}
		io.ReadFull(c, make([]byte, int(l[0])<<8|int(l[1])))
		held = append(held, c)
	}
	resp, err := (&http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}).Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatalf("/metrics with %d DNS TCP connections held (%d closed): %v: the DNS listener took the descriptors the reserve keeps", len(held), closed, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if closed == 0 {
		t.Errorf("%d DNS TCP connections held, none shed", len(held))
	}
	if !strings.Contains(string(body), "egressd_connections_shed_total ") {
		t.Errorf("/metrics lacks the shed count")
	}
	t.Logf("%d DNS TCP connections held, %d shed, /metrics %d", len(held), closed, resp.StatusCode)
}

func dnsFDChild(t *testing.T) {
	f := startWith(t, func(o *Options) {
		cfg := "version: 1\nlisten:\n  admin: 127.0.0.1:0\n  dns: 127.0.0.1:0\nresolver:\n  upstreams: [\"127.0.0.1:9\"]\nallow:\n  - name: names\n    hosts: [allowed.example]\n"
		o.Load = func() (*policy.Policy, error) { return policy.Parse(strings.NewReader(cfg), "t.yaml") }
	})
	var open int
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		open = len(ents)
	}
	// room for about 60 more descriptors above the proxy's reserve of 128
	lim := syscall.Rlimit{Cur: uint64(open + 128 + 60), Max: uint64(open + 128 + 60)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	_, dnsAddr, admin := f.d.Addrs()
	fmt.Printf("ADDRS %s %s\n", dnsAddr, admin)
	io.Copy(io.Discard, os.Stdin) // until the parent is done
}
