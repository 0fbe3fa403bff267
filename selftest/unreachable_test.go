package selftest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// outageProxy answers like egressd when every allowed upstream is down:
// each CONNECT gets 502 upstream-unreachable (egressd resolves and dials
// before its 200), each absolute-form request 403 no-rule.
func outageProxy(t *testing.T) netip.AddrPort {
	t.Helper()
	return connectAnswer(t, "HTTP/1.1 502 Bad Gateway\r\nX-Egressd-Deny: upstream-unreachable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
}

// connectAnswer is a proxy that answers each CONNECT with connect, and
// each absolute-form request with 403 no-rule.
func connectAnswer(t *testing.T, connect string) netip.AddrPort {
	t.Helper()
	return fakeProxy(t, func(req *http.Request, c net.Conn) {
		if req.Method == http.MethodConnect {
			c.Write([]byte(connect))
			return
		}
		c.Write([]byte(noRule))
	})
}

// noRule is egressd's refusal of a request no rule allows.
const noRule = "HTTP/1.1 403 Forbidden\r\nX-Egressd-Deny: no-rule\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"

// fakeProxy reads one request from each connection and hands it to answer;
// the connection closes when answer returns.
func fakeProxy(t *testing.T, answer func(req *http.Request, c net.Conn)) netip.AddrPort {
	t.Helper()
	l := listen(t)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				answer(req, c)
			}()
		}
	}()
	return netip.MustParseAddrPort(l.Addr().String())
}

// TestUpstreamOutageIsNoLeak: when the upstream of an allowed host does not
// answer, nothing got past egressd: the write probes (decided offline by
// the policy: they carry the reason it refuses them with) and the
// checkpoint probes that need a tunnel are all untestable live, one
// classification for all, never a leak; the run stays sealed, and the
// failed positive control stays control-failed. Before, the write probes
// were LEAK and the tunnel probes error.
func TestUpstreamOutageIsNoLeak(t *testing.T) {
	t.Parallel()
	var d net.Dialer
	c := Config{
		Proxy: outageProxy(t),
		Dial:  d.DialContext,
		Refused: []Request{
			{ID: "page-login/web", Method: "POST", URL: "https://web.example/login", Body: "u=x", Reason: "page-type", InTunnel: true},
			{ID: "mirror-publish/pypi", Method: "POST", URL: "https://pypi.example/legacy/", Body: "x", Reason: "mirror", InTunnel: true},
			// the policy refuses the tunnel itself: a CONNECT the proxy
			// tried to dial got past the policy, outage or not
			{ID: "identity-label/a/web", Method: "GET", URL: "https://web.example/", Reason: "no-rule"},
		},
		Unlisted:    "unlisted.example:443",
		InspectHost: "web.example:443", HeadBytes: 32 << 10,
		SilentHost: "web.example:443", SilentDeadline: 300 * time.Millisecond,
		SNIHost: "web.example:443", SNIName: "unlisted.example",
		Timeout: 2 * time.Second,
	}
	rep, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	untestable := Status("untestable")
	leaks := map[string]bool{"identity-label/a/web": true, "connect-unlisted/unlisted.example:443": true}
	for _, r := range rep.Results {
		switch {
		case leaks[r.ID] && r.Status != Leak:
			t.Errorf("%s: got %s (%s: %s), want LEAK", r.ID, r.Status, r.Result, r.Detail)
		case !leaks[r.ID] && (r.Status != untestable || r.Leak):
			t.Errorf("%s: got %s (%s: %s), want untestable", r.ID, r.Status, r.Result, r.Detail)
		}
	}
	if len(rep.Results) != 8 {
		t.Errorf("got %d results, want 8", len(rep.Results))
	}
	if o := rep.Outcome(); o != OutcomeLeak {
		t.Errorf("outcome %s, want leak (two tunnels the policy refuses were dialled)", o)
	}
	c.Refused, c.Unlisted = c.Refused[:2], ""
	rep, err = Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if o := rep.Outcome(); o != OutcomeSealed || rep.Leaked() {
		t.Errorf("outcome %s, want sealed (an outage is no leak)\n%s", o, rep.Summary())
	}
	if !strings.Contains(rep.Summary(), "6 untestable live") {
		t.Errorf("summary does not count the untestable probes: %s", rep.Summary())
	}
	for _, r := range rep.Results[:2] {
		if r.Detail != "untestable live: upstream unreachable; the policy denies it" {
			t.Errorf("%s: detail %q", r.ID, r.Detail)
		}
	}

	// the same outage with a positive control: control-failed, not a leak
	c.ExpectReachable = []string{"https://web.example/"}
	rep, err = Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if o := rep.Outcome(); o != OutcomeControlFailed {
		t.Errorf("with a positive control: outcome %s, want control-failed", o)
	}
}

// TestNeverAllowsIsNoLeak: a rule whose host resolves only to a
// special-use address, without cidrs naming it, can never allow: egressd
// refuses the tunnel itself (403 special-address). The write and
// checkpoint probes on that rule are untestable live, naming egressd's
// refusal (rule, host, address class), not a leak ("refused as
// special-address, not mirror") and not an error.
func TestNeverAllowsIsNoLeak(t *testing.T) {
	t.Parallel()
	const body = "egressd: denied: special-address (rule corp): registry.corp.example resolved to 10.1.2.3 (private)\n"
	proxy := connectAnswer(t, fmt.Sprintf("HTTP/1.1 403 Forbidden\r\nX-Egressd-Deny: special-address\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body))
	var d net.Dialer
	rep, err := Run(context.Background(), Config{
		Proxy: proxy, Dial: d.DialContext,
		Refused:     []Request{{ID: "mirror-publish/corp", Method: "POST", URL: "https://registry.corp.example/legacy/", Body: "x", Reason: "mirror", InTunnel: true}},
		InspectHost: "registry.corp.example:443", HeadBytes: 32 << 10,
		Timeout: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Results {
		if r.Status != Status("untestable") || !strings.Contains(r.Detail, "can never allow") || !strings.Contains(r.Detail, "rule corp") || !strings.Contains(r.Detail, "(private)") {
			t.Errorf("%s: got %s (%s: %s), want untestable naming the rule and the address class", r.ID, r.Status, r.Result, r.Detail)
		}
	}
	if rep.Outcome() != OutcomeSealed || len(rep.Results) != 3 {
		t.Errorf("outcome %s with %d results, want sealed with 3", rep.Outcome(), len(rep.Results))
	}
	// one warning for the one cause, naming the rule and the class
	if w := rep.UntestableLines(); len(w) != 1 || !strings.Contains(w[0], "rule corp") || !strings.Contains(w[0], "(private)") || !strings.Contains(w[0], "mirror-publish/corp") {
		t.Errorf("warnings %q, want one naming the rule, the class and the probes", w)
	}
}

// TestControlsOnly: a controls-only run (an outage's retry) runs the
// positive controls and nothing else: the same config's probes of the
// proxy and the walls are left out, and the failed control is still
// control-failed.
func TestControlsOnly(t *testing.T) {
	var d net.Dialer
	c := Config{
		Proxy: outageProxy(t),
		Dial:  d.DialContext,
		Refused: []Request{
			{ID: "page-login/web", Method: "POST", URL: "https://web.example/login", Body: "u=x", Reason: "page-type", InTunnel: true},
		},
		ExpectReachable: []string{"https://web.example/", "https://other.example/"},
		Timeout:         2 * time.Second,
	}
	for _, tt := range []struct {
		only    bool
		results int
	}{{false, 3}, {true, 2}} {
		c.ControlsOnly = tt.only
		rep, err := Run(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Results) != tt.results {
			t.Errorf("ControlsOnly %v: %d results, want %d: %s", tt.only, len(rep.Results), tt.results, rep.Summary())
		}
		for _, r := range rep.Results {
			if tt.only && !strings.HasPrefix(r.ID, "expect/") {
				t.Errorf("ControlsOnly: ran %s, not a positive control", r.ID)
			}
		}
		if o := rep.Outcome(); o != OutcomeControlFailed {
			t.Errorf("ControlsOnly %v: outcome %s, want control-failed", tt.only, o)
		}
	}
}
