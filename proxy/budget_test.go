package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/policy"
)

// TestDialNameBudget is issue 12 item 4 on the proxy's own resolver: a
// host-only wildcard rule made egressd look up any <data>.example.com.
func TestDialNameBudget(t *testing.T) {
	t.Parallel()
	p, err := policy.Parse(strings.NewReader("version: 1\nlimits:\n  dns_wildcard_names: 2\nallow:\n  - hosts: [\"*.wild.example\"]\n    pages: [\"*\"]\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	x := &checkedDialer{log: slog.New(slog.NewTextHandler(&logs, nil)), budget: new(policy.NameBudget)}
	// An upstream that answers nothing (the discard port on loopback): a
	// lookup within budget fails as a lookup, not as a refusal.
	x.cur.Store(&dialSettings{res: &Resolver{Upstreams: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:9")}, Timeout: 50 * time.Millisecond}, timeout: time.Second})
	ctx := context.WithValue(context.Background(), keyDecision, &request{identity: "agent"})
	refused := 0
	for i := range 5 {
		tgt, err := policy.ParseAuthority(fmt.Sprintf("%040x.wild.example:443", i))
		if err != nil {
			t.Fatal(err)
		}
		d := p.DecideTarget(&tgt)
		if !d.Allow {
			t.Fatalf("decide: %s", d.Reason)
		}
		_, _, err = x.dial(ctx, p, &d, 443)
		var de *DenyError
		if errors.As(err, &de) && de.Reason == policy.ReasonWildcardBudget {
			refused++
		} else if i >= 2 {
			t.Errorf("name %d past the budget: %v, want a wildcard-budget refusal", i, err)
		}
	}
	if refused != 3 {
		t.Errorf("%d refused, want 3", refused)
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 {
		t.Errorf("%d warnings, want 1:\n%s", n, logs.String())
	}
}

// TestNameBudgetIgnoresUserLabels: the Proxy-Authorization user is a label
// the client picks, so a budget keyed by it was a fresh budget per request:
// "user:a", "user:b", ... each resolved dns_wildcard_names new names, and
// <data>.wild.test carried unbounded data to wild.test's name servers.
// The budget follows the source address (or the identity its cidrs give).
func TestNameBudgetIgnoresUserLabels(t *testing.T) {
	t.Parallel()
	const cfg = `
version: 1
resolver:
  upstreams: ["{DNS}"]
limits:
  dns_wildcard_names: 2
allow:
  - name: wild
    hosts: ["*.wild.test"]
    cidrs: [127.0.0.0/8]
    ports: ["1-65535"]
    pages: ["*"]
`
	names := map[string][]string{}
	for i := range 6 {
		names[fmt.Sprintf("n%d.wild.test", i)] = []string{"127.0.0.1"}
	}
	h := newHarness(t, cfg, names)
	allowed := 0
	for i := range 6 {
		user := fmt.Sprintf("label-%d", i)
		resp, body := h.do("GET", fmt.Sprintf("http://n%d.wild.test:%s/", i, h.plain.port()), nil,
			map[string]string{"Proxy-Authorization": "Basic " + basic(user)})
		if resp == nil {
			t.Fatalf("request %d: %s", i, body)
		}
		switch {
		case resp.StatusCode == 200:
			allowed++
		case resp.Header.Get("X-Egressd-Deny") != policy.ReasonWildcardBudget.String():
			t.Errorf("request %d: %d %s, want 200 or wildcard-budget", i, resp.StatusCode, resp.Header.Get("X-Egressd-Deny"))
		}
	}
	if allowed != 2 {
		t.Errorf("%d new names resolved under *.wild.test from one address with changing user labels, want 2 (the budget)", allowed)
	}
}
