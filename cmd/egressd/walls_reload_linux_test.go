//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egressd/egressd/daemon"
	"github.com/egressd/egressd/nft"
	"github.com/miekg/dns"
)

// TestServeWallsReloadRefusesNothing: `serve --walls` reloads a config
// whose walls differ (another sandbox cidr) while a sandbox keeps asking
// for an allowed page: the candidate's walls are tried on the self-test's
// probe link alone and the sandbox is never refused (before, the candidate
// went in force gated and every allowed request got 503 while it was
// verified). A second such candidate that leaks (it allowlists the canary)
// is dropped: its walls were never in force for the sandbox, the walls
// read back are the first reload's exactly, and no trial table is left.
func TestServeWallsReloadRefusesNothing(t *testing.T) {
	l := newSTLab(t)
	l.startServe(t)
	render := func(cidr, extra string) string {
		cfg := strings.NewReplacer("{CA}", filepath.Join(l.dir, "upstream-ca.pem"), "{PREFIX}", l.topo.IfPrefix, "{EXTRA}", extra).Replace(stConfig)
		return strings.Replace(cfg, "  pool6: 2001:db8:3::/64\n", "  pool6: 2001:db8:3::/64\n  cidrs: ["+cidr+"]\n", 1)
	}
	write := func(cfg string) {
		t.Helper()
		if err := os.WriteFile(l.cfg+".tmp", []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(l.cfg+".tmp", l.cfg); err != nil {
			t.Fatal(err)
		}
	}
	client := l.topo.HTTPClientInSandbox(&url.URL{Scheme: "http", Host: "198.51.100.1:3128"}, nil)
	var requests, queries, refused atomic.Int64
	var lastDNS time.Time // the asking goroutine's own
	var firstRefusal atomic.Pointer[string]
	stop, done, asking := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for i := range 100_000 { // bounded; stopped once both reloads are done
			select {
			case <-stop:
				return
			default:
			}
			if i == 3 {
				close(asking)
			}
			requests.Add(1)
			// DNS at most 20 times a second: the filter's rate limit is 50
			if time.Since(lastDNS) >= 50*time.Millisecond {
				lastDNS = time.Now()
				queries.Add(1)
				if rcode, err := askDNS(l, "allowed.test"); err != nil || rcode != dns.RcodeSuccess {
					refused.Add(1)
					why := fmt.Sprintf("DNS: rcode %s, err %v", dns.RcodeToString[rcode], err)
					firstRefusal.CompareAndSwap(nil, &why)
				}
			}
			resp, err := client.Get("http://allowed.test/during-reload")
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			if err != nil || resp.StatusCode != http.StatusOK {
				refused.Add(1)
				why := "error"
				if err != nil {
					why = err.Error()
				} else {
					why = resp.Status + " " + resp.Header.Get("X-Egressd-Deny")
				}
				firstRefusal.CompareAndSwap(nil, &why)
			}
		}
	}()
	<-asking
	first := render("198.51.100.240/32", "")
	write(first)
	if _, err := l.serve.wait(`"msg":"reload applied"`); err != nil {
		t.Fatalf("the reload whose walls differ: %v", err)
	}
	write(render("198.51.100.244/32", "  - name: canary\n    hosts: [canary-web.test]\n    cidrs: [203.0.113.0/24]\n    pages: [\"*\"]"))
	line, err := l.serve.wait(`"msg":"reload `, "http-canary")
	close(stop)
	<-done
	if err != nil {
		t.Fatalf("the leaking candidate whose walls differ: %v", err)
	}
	if !strings.Contains(line, "the candidate failed its self-test and was dropped") {
		t.Errorf("the leaking candidate whose walls differ: %s, want it dropped", line)
	}
	if n := refused.Load(); n > 0 {
		t.Errorf("%d of %d allowed requests and %d DNS queries of the sandbox refused across the reloads, want 0 (first: %s)", n, requests.Load(), queries.Load(), *firstRefusal.Load())
	}
	t.Logf("%d allowed requests and %d DNS queries across a walls-changing reload and a dropped one, %d refused", requests.Load(), queries.Load(), refused.Load())
	// the walls in force are the first reload's, exactly, and no trial is left
	spec, err := daemon.WallSpec(mustPolicy(t, first))
	if err != nil {
		t.Fatal(err)
	}
	if drift, err := nft.Check(l.topo.Gateway.Fd(), spec); err != nil || len(drift) > 0 {
		t.Errorf("walls after the dropped candidate: drift %q, err %v, want the first reload's walls", drift, err)
	}
	if ts, err := nft.Tables(l.topo.Gateway.Fd(), nft.DefaultTable); err != nil || !slices.Equal(ts, []string{nft.DefaultTable}) {
		t.Errorf("tables after the reloads: %q %v, want only %s (no trial left)", ts, err, nft.DefaultTable)
	}
	resp, err := client.Get("http://canary-web.test/after-drop")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("canary after the dropped candidate: %d, want 403", resp.StatusCode)
	}
}

// askDNS asks egressd's DNS for name's A record from the sandbox, over UDP
// as a sandbox's resolver does, and returns the rcode.
func askDNS(l *stLab, name string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := l.topo.DialFromSandbox(ctx, "udp", "198.51.100.1:53")
	if err != nil {
		return 0, err
	}
	defer c.Close()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	resp, _, err := (&dns.Client{Timeout: 2 * time.Second}).ExchangeWithConnContext(ctx, m, &dns.Conn{Conn: c})
	if err != nil {
		return 0, err
	}
	return resp.Rcode, nil
}
