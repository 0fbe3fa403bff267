package selftest

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// slowFirstProxy answers each request line 403 no-rule, except the first
// time it sees it: then it answers nothing until the probe gives up and
// closes (a proxy on a loaded machine, late once).
func slowFirstProxy(t *testing.T) netip.AddrPort {
	t.Helper()
	var mu sync.Mutex
	seen := map[string]bool{}
	return fakeProxy(t, func(req *http.Request, c net.Conn) {
		line := req.Method + " " + req.RequestURI
		mu.Lock()
		first := !seen[line]
		seen[line] = true
		mu.Unlock()
		if first {
			c.Read(make([]byte, 1)) // until the probe closes
			return
		}
		c.Write([]byte(noRule))
	})
}

// TestSecondLook: a probe that could not tell in its timeout (here egressd's
// own refusal came late, as on a loaded machine) is asked once more with a
// longer timeout before the run is called incomplete; one late answer must
// not make `run` refuse its command. Before, the run was incomplete.
func TestSecondLook(t *testing.T) {
	t.Parallel()
	var d net.Dialer
	c := Config{
		Proxy: slowFirstProxy(t),
		Dial:  d.DialContext,
		Refused: []Request{
			{ID: "identity-label/a/web", Method: "GET", URL: "http://web.example/", Reason: "no-rule"},
		},
		Timeout: 300 * time.Millisecond,
	}
	rep, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Outcome() != OutcomeSealed {
		t.Fatalf("outcome %s, want sealed after a second look:\n%s", rep.Outcome(), rep.Summary())
	}
	for _, res := range rep.Results {
		if res.Status != Pass {
			t.Errorf("%s: %s %s %s", res.ID, res.Status, res.Result, res.Detail)
		}
	}
}
