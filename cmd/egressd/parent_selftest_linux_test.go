//go:build linux

package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
)

// portParent is a corporate parent proxy in the gateway namespace that
// allows CONNECT only to the ports in allow, and records every target.
type portParent struct {
	addr string

	mu    sync.Mutex
	allow map[string]bool // port → allowed
	seen  []string
}

func (l *stLab) startParent(t *testing.T, ports ...string) *portParent {
	t.Helper()
	ln, err := l.topo.ListenInGateway("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pp := &portParent{addr: ln.Addr().String(), allow: map[string]bool{}}
	pp.setPorts(ports...)
	dialer := l.topo.GatewayDialer()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go pp.serve(c, dialer.DialContext)
		}
	}()
	return pp
}

func (pp *portParent) setPorts(ports ...string) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	clear(pp.allow)
	for _, p := range ports {
		pp.allow[p] = true
	}
}

func (pp *portParent) serve(c net.Conn, dial func(context.Context, string, string) (net.Conn, error)) {
	defer c.Close()
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	_, port, _ := net.SplitHostPort(req.RequestURI)
	pp.mu.Lock()
	pp.seen = append(pp.seen, req.Method+" "+req.RequestURI)
	ok := req.Method == http.MethodConnect && pp.allow[port]
	pp.mu.Unlock()
	if !ok {
		io.WriteString(c, "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
		return
	}
	up, err := dial(context.Background(), "tcp", req.RequestURI)
	if err != nil {
		io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
		return
	}
	defer up.Close()
	io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
	go func() { io.Copy(up, br); up.(interface{ CloseWrite() error }).CloseWrite() }()
	io.Copy(c, up)
}

func (pp *portParent) targets() []string {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	return append([]string(nil), pp.seen...)
}

// TestSelftestParentPorts (issue 23 item 4): a rule on port 80 reaches
// its upstream through the parent as CONNECT <ip>:80. With only https
// positive controls configured, a parent that allows only 443 breaks that
// rule; the self-test derives an http control from the rule and fails,
// naming it, and passes once the parent allows 80.
func TestSelftestParentPorts(t *testing.T) {
	t.Parallel()
	l := newSTLab(t)
	pp := l.startParent(t, "443")
	b, err := os.ReadFile(l.cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.NewReplacer(
		"allow:\n", "upstream_proxy:\n  address: "+pp.addr+"\nallow:\n",
		"    pages: [\"*\"]\n  - name: pypi", "    pages: [\"*\"]\n    ports: [80, 443]\n  - name: pypi",
		"expect_reachable: [http://allowed.test/, https://allowed.test/, https://app.test/]", "expect_reachable: [https://allowed.test/, https://app.test/]",
	).Replace(string(b))
	if err := os.WriteFile(l.cfg, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	l.startServe(t, "--no-selftest", "--allow-unverified") // proven by the commands below

	code, out, errs := l.egressd(t, nil, "selftest", "--json", "--config", l.cfg, "--state-dir", l.state)
	rep := selftestJSON(t, out, errs)
	// a failed positive control proves nothing either way: exit 2, not sealed
	if got := failureIDs(rep); code != exitUsage || rep.Sealed() || len(got) != 1 || got[0] != "expect/http://allowed.test/" {
		t.Errorf("parent allowing only 443: exit %d, %s, failures %q, want 2 and [expect/http://allowed.test/]\n%s", code, rep.Outcome(), got, tableOf(rep))
	}
	saw80 := false
	for _, tg := range pp.targets() {
		saw80 = saw80 || tg == "CONNECT 203.0.113.100:80"
	}
	if !saw80 {
		t.Errorf("the parent never saw CONNECT 203.0.113.100:80: %v", pp.targets())
	}

	pp.setPorts("80", "443")
	code, out, errs = l.egressd(t, nil, "selftest", "--json", "--config", l.cfg, "--state-dir", l.state)
	rep = selftestJSON(t, out, errs)
	if code != exitOK || !rep.Sealed() {
		t.Errorf("parent allowing 80 and 443: exit %d, %s\n%s", code, rep.Outcome(), tableOf(rep))
	}
}
