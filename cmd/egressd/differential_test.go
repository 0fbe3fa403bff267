package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy"
)

// liveProxy is egressd's proxy on 127.0.0.1 with an origin of its own;
// every upstream dial but the origin's is refused (no packet leaves the
// machine), and its decision lines are kept for the test to read.
type liveProxy struct {
	addr   string
	port   string // the origin's
	pol    *policy.Policy
	mu     sync.Mutex
	lines  []map[string]any
	partly bytes.Buffer
}

func (l *liveProxy) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partly.Write(p)
	for {
		line, err := l.partly.ReadBytes('\n')
		if err != nil {
			l.partly.Write(line) // an unfinished line waits for its end
			return len(p), nil
		}
		var rec map[string]any
		if json.Unmarshal(line, &rec) == nil && rec["msg"] == "decision" {
			l.lines = append(l.lines, rec)
		}
	}
}

func (l *liveProxy) decisions() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lines)
}

func newLiveProxy(t testing.TB) *liveProxy {
	t.Helper()
	ol, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	origin := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "origin") }), ErrorLog: log.New(io.Discard, "", 0)}
	go origin.Serve(ol)
	t.Cleanup(func() { origin.Close() })
	lp := &liveProxy{}
	_, lp.port, _ = net.SplitHostPort(ol.Addr().String())
	originAP := netip.MustParseAddrPort(ol.Addr().String())
	// Names resolve through a resolver nobody answers on (port 9 of
	// loopback): only the literal origin can be allowed.
	cfg := fmt.Sprintf(`version: 1
resolver:
  upstreams: ["127.0.0.1:9"]
allow:
  - name: loop
    cidrs: [127.0.0.0/8]
    ports: [%s]
    pages: ["*"]
  - name: named
    hosts: [allowed.test]
    pages: ["*"]
`, lp.port)
	if lp.pol, err = policy.Parse(strings.NewReader(cfg), "differential.yaml"); err != nil {
		t.Fatal(err)
	}
	px := proxy.New(lp.pol, proxy.Config{
		Logger: slog.New(slog.NewJSONHandler(lp, nil)),
		Control: func(network, address string, _ syscall.RawConn) error {
			if ap, err := netip.ParseAddrPort(address); err != nil || (ap != originAP && ap != netip.MustParseAddrPort("127.0.0.1:9")) {
				return fmt.Errorf("test guard: dial to %s refused", address)
			}
			return nil
		},
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go px.Serve(l)
	t.Cleanup(func() { px.Shutdown(t.Context()) })
	lp.addr = l.Addr().String()
	return lp
}

// authorityOf is the Host header a client would send for target: what
// ParseURL takes for the authority.
func authorityOf(target string) string {
	rest := target
	if i := strings.Index(target, "://"); i >= 0 {
		rest = target[i+3:]
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// send sends one head and returns the status line's code and the
// X-Egressd-Deny of the answer, and the decision lines it caused.
func (l *liveProxy) send(t testing.TB, head string) (status int, deny string, lines []map[string]any) {
	t.Helper()
	before := l.decisions()
	c, err := net.Dial("tcp", l.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second)) // a bound for a wedged proxy
	io.WriteString(c, head)
	if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
		status, deny = resp.StatusCode, resp.Header.Get("X-Egressd-Deny")
		io.Copy(io.Discard, resp.Body)
	}
	io.Copy(io.Discard, c) // every answer here closes: its line is logged by then
	l.mu.Lock()
	lines = append(lines, l.lines[before:]...)
	l.mu.Unlock()
	return status, deny, lines
}

// proxyHead is the head a client sends for target through a proxy.
// headEnd is the length of the first head in s: up to and including its
// first empty line (CRLF or a bare LF, as net/http reads both), or len(s)
// if it has none.
func headEnd(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] != '\n' {
			continue
		}
		if rest := s[i+1:]; strings.HasPrefix(rest, "\n") {
			return i + 2
		} else if strings.HasPrefix(rest, "\r\n") {
			return i + 3
		}
	}
	return len(s)
}

func proxyHead(method, target, extra string) string {
	return method + " " + target + " HTTP/1.1\r\nHost: " + authorityOf(target) + "\r\n" + extra + "Connection: close\r\n\r\n"
}

// agree compares the live proxy's decision line with check's decision of
// the same target: the same decision and the same high-risk flag; a
// target check calls bad-target may be refused by the proxy as a bad head
// or a Host that disagrees with it (it has a head; check has none); an
// allowed one may fail upstream (nothing answers there).
func agree(res checkResult, line map[string]any) string {
	pd, pr := line["decision"], line["reason"].(string)
	ph, _ := line["high_risk"].(bool)
	switch {
	case ph != res.HighRisk:
		return fmt.Sprintf("high_risk %v, check %v (%s)", ph, res.HighRisk, res.Reason)
	case res.Decision == "allow":
		if pd == "allow" || strings.HasPrefix(pr, "upstream-") {
			return ""
		}
	case pd != "deny":
		return "allowed"
	case res.Reason == pr:
		return ""
	case res.Reason == policy.ReasonBadTarget.String() && (pr == "bad-request" || pr == "host-mismatch" || pr == "not-proxy-request"):
		// check has one word for a target it cannot parse; the proxy names
		// what was wrong with the request that carried it (a target in
		// asterisk or origin form, "*" or "/x", is not a proxy request)
		return ""
	}
	return fmt.Sprintf("%s %s, check %s %s", pd, pr, res.Decision, res.Reason)
}

func readPayloads(t testing.TB) []string {
	t.Helper()
	b, err := os.ReadFile("testdata/ssrf-payloads.txt")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i, l := range strings.Split(string(b), "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		s, err := strconv.Unquote(l)
		if err != nil {
			t.Fatalf("ssrf-payloads.txt:%d: %v", i+1, err)
		}
		out = append(out, s)
	}
	return out
}

// TestSSRFPayloadsDecided sends a public-style SSRF payload list through
// the live proxy: every payload is exactly one decision line, with the
// decision and high-risk flag check gives the same target. It logs the
// figures the README quotes.
func TestSSRFPayloadsDecided(t *testing.T) {
	t.Parallel()
	lp := newLiveProxy(t)
	var sent, decided, highRisk, agreed int
	for _, target := range readPayloads(t) {
		sent++
		_, deny, lines := lp.send(t, proxyHead("GET", target, ""))
		if len(lines) != 1 {
			t.Errorf("%q: %d decision lines (X-Egressd-Deny %q), want 1", target, len(lines), deny)
			continue
		}
		decided++
		if hr, _ := lines[0]["high_risk"].(bool); hr {
			highRisk++
		}
		res := decide(lp.pol, target, "", "GET", "")
		if strings.ContainsAny(target, "\r\n") && res.Decision == "deny" {
			// the proxy receives the request line up to the line break, a
			// target of its own: the reasons differ, the decision may not
			res.Reason = lines[0]["reason"].(string)
		}
		if why := agree(res, lines[0]); why != "" {
			t.Errorf("%q: proxy and check disagree: %s", target, why)
			continue
		}
		agreed++
	}
	t.Logf("SSRF payloads: %d sent, %d with exactly one decision line, %d counted high-risk, %d decided as check decides", sent, decided, highRisk, agreed)
}

// FuzzProxyVsCheck is the differential: generated (malformed) targets and
// extra head lines through the live proxy against check's offline
// decision. Every request received is exactly one decision line; with a
// clean head, the decision is check's.
func FuzzProxyVsCheck(f *testing.F) {
	for _, p := range readPayloads(f) {
		f.Add("GET", p, "")
	}
	f.Add("POST", "http://allowed.test/", "Transfer_Encoding: chunked\r\n")
	f.Add("GET", "http://169.254.169.254/", "Expect: nope\r\n")
	f.Add("GET", "http://127.0.0.1:1/", "Host: a\r\n")
	lp := newLiveProxy(f)
	f.Fuzz(func(t *testing.T, method, target, extra string) {
		if method == "" || strings.ContainsAny(method, " \r\n") || method == http.MethodConnect ||
			strings.ContainsAny(target, "\r\n") || target == "" || strings.Contains(extra, "\r\n\r\n") || strings.Contains(extra, "\n\n") {
			return // one head, one request line: the shapes this target compares
		}
		if extra != "" && !strings.HasSuffix(extra, "\r\n") {
			extra += "\r\n"
		}
		target = strings.ReplaceAll(target, "{PORT}", lp.port)
		head := proxyHead(method, target, extra)
		if end := headEnd(head); end != len(head) {
			return // extra began with a line break: the head ends early and a second request follows
		}
		_, _, lines := lp.send(t, head)
		if len(lines) != 1 {
			t.Fatalf("%q %q %q: %d decision lines, want 1", method, target, extra, len(lines))
		}
		if extra != "" || method != "GET" || strings.ContainsAny(target, " \t") {
			return // check has no head: only the count compares
		}
		if why := agree(decide(lp.pol, target, "", method, ""), lines[0]); why != "" {
			t.Fatalf("%q: proxy and check disagree: %s", target, why)
		}
	})
}

// TestSmugglingHeadsDecided: request-smuggling gadgets (conflicting or
// obfuscated framing, folded names, bare line feeds, pipelined requests
// behind them) each leave a decision line for every request egressd
// answers, and the answer carries X-Egressd-Deny unless it is the
// origin's.
func TestSmugglingHeadsDecided(t *testing.T) {
	t.Parallel()
	lp := newLiveProxy(t)
	u := "http://127.0.0.1:" + lp.port + "/"
	host := "Host: 127.0.0.1:" + lp.port + "\r\n"
	smuggled := "GET http://169.254.169.254/ HTTP/1.1\r\nHost: 169.254.169.254\r\n\r\n"
	gadgets := []string{
		"POST " + u + " HTTP/1.1\r\n" + host + "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled,
		"POST " + u + " HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
		"POST " + u + " HTTP/1.1\r\n" + host + "Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n",
		"POST " + u + " HTTP/1.1\r\n" + host + "Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n",
		"POST " + u + " HTTP/1.1\r\n" + host + "Transfer-Encoding:\tchunked\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\n",
		"POST " + u + " HTTP/1.1\r\n" + host + "Transfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n",
		"POST " + u + " HTTP/1.1\r\n" + host + "Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
		"POST " + u + " HTTP/1.1\r\n" + host + "Content-Length: +5\r\n\r\nhello",
		"POST " + u + " HTTP/1.1\r\n" + host + "Content-Length: 5, 5\r\n\r\nhello",
		"POST " + u + " HTTP/1.1\r\n" + host + "Transfer_Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
		"POST " + u + " HTTP/1.1\n" + host + "Transfer-Encoding: chunked\n\n0\n\n" + smuggled,
		"GET " + u + " HTTP/1.1\r\n" + host + "Content-Length: 0\r\n\r\n" + smuggled,
		"POST " + u + " HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\n\r\nZZ\r\n\r\n",
		"GET " + u + " HTTP/1.1\r\n" + host + "X: a\rb\r\n\r\n",
		"GET " + u + " HTTP/1.1\r\n" + host + "X\x00: a\r\n\r\n",
		"GET\t" + u + " HTTP/1.1\r\n" + host + "\r\n",
	}
	for _, g := range gadgets {
		before := lp.decisions()
		c, err := net.Dial("tcp", lp.addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, g)
		c.(*net.TCPConn).CloseWrite() // nothing more: every request egressd will see is in g
		br := bufio.NewReader(c)
		var answers []*http.Response
		for range 4 {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				break
			}
			io.Copy(io.Discard, resp.Body)
			answers = append(answers, resp)
		}
		c.Close()
		if len(answers) == 0 {
			t.Errorf("%q: no answer", g)
			continue
		}
		for _, resp := range answers {
			if resp.StatusCode != 200 && resp.Header.Get("X-Egressd-Deny") == "" {
				t.Errorf("%q: %s without X-Egressd-Deny", g, resp.Status)
			}
		}
		lp.mu.Lock()
		n := len(lp.lines) - before
		lp.mu.Unlock()
		if n != len(answers) {
			t.Errorf("%q: %d answers, %d decision lines", g, len(answers), n)
		}
	}
}
