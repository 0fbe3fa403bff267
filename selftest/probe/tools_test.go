package probe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/testutil"
	"github.com/egressd/egressd/selftest"
)

func TestParseToolServer(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want selftest.ToolServer
		err  string
	}{
		{"web=http://10.237.0.1:8931/mcp", selftest.ToolServer{Name: "web", URL: "http://10.237.0.1:8931/mcp", Tool: "fetch", Arg: "url"}, ""},
		{"w=https://tools.example/mcp,tool=get,arg=address", selftest.ToolServer{Name: "w", URL: "https://tools.example/mcp", Tool: "get", Arg: "address"}, ""},
		{"http://x/mcp", selftest.ToolServer{}, "want NAME=URL"},
		{"=http://x/mcp", selftest.ToolServer{}, "want NAME=URL"},
		{"a/b=http://x/mcp", selftest.ToolServer{}, "want NAME=URL"},
		{"w=x:8931", selftest.ToolServer{}, "want the http:// or https:// URL"},
		{"w=http://x/mcp,tool=", selftest.ToolServer{}, "want tool=TOOL"},
		{"w=http://x/mcp,colour=red", selftest.ToolServer{}, "unknown option \"colour\""},
	} {
		got, err := ParseToolServer(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %+v %v, want %+v", tc.in, got, err, tc.want)
		}
	}
}

// TestProbeRunsGivenToolServers: `egressd probe --tool-server` asks the
// tool servers this sandbox is given for the plan's refused targets: a
// careless one is a leak naming it.
func TestProbeRunsGivenToolServers(t *testing.T) {
	careless := testutil.CarelessFetchServer(t)
	pl := &Plan{Identity: "agent", Token: "t", Targets: selftest.Targets{
		Metadata: []netip.Addr{netip.MustParseAddr("169.254.169.254")}, CanaryURL: "http://egressd-canary.example/",
		Unlisted: "egressd-selftest-unlisted.invalid:443", Timeout: 2 * time.Second,
	}}
	var d net.Dialer
	loopback := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if ap, err := netip.ParseAddrPort(addr); err != nil || !ap.Addr().IsLoopback() {
			return nil, fmt.Errorf("test: no dial to %s", addr)
		}
		return d.DialContext(ctx, network, addr)
	}
	ts, err := ParseToolServer("careless=" + careless)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Run(t.Context(), pl, Options{Dial: loopback, ToolServers: []selftest.ToolServer{ts},
		ListenICMP: func(string) (net.PacketConn, error) { return nil, errors.New("test: no icmp") }})
	if err != nil {
		t.Fatal(err)
	}
	var leaks []string
	for _, r := range rep.Leaks() {
		if strings.HasPrefix(r.ID, "tool-server/careless/") {
			leaks = append(leaks, r.ID)
		}
	}
	if len(leaks) != 8 { // canary, 6 metadata spellings, unlisted
		t.Errorf("tool-server leaks %v, want 8: %+v", leaks, rep.Results)
	}
}
