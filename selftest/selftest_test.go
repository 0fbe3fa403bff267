package selftest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"go/parser"
	"go/token"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/policy"
)

// TestImportsNothingOfOurs: selftest probes like an attacker, over the
// network only, so it can check a sandbox egressd did not build.
func TestImportsNothingOfOurs(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); strings.HasPrefix(p, "github.com/egressd/egressd") {
				t.Errorf("%s imports %s: selftest must import nothing of egressd's", f, p)
			}
		}
	}
}

// TestMetadataSpellings: every spelling is read by egressd's own parser as
// the address it spells, so the probes ask about the right target.
func TestMetadataSpellings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		addr string
		want []string
	}{
		{"aws", "169.254.169.254", []string{"169.254.169.254", "2852039166", "0xA9FEA9FE", "0251.0376.0251.0376", "169.254.43518", "[::ffff:169.254.169.254]"}},
		{"zero octets", "100.0.0.1", []string{"100.0.0.1", "1677721601", "0x64000001", "0144.00.00.01", "100.0.1", "[::ffff:100.0.0.1]"}},
		{"ipv6", "fd00:ec2::254", []string{"[fd00:ec2::254]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := netip.MustParseAddr(tt.addr)
			var got []string
			for _, s := range metadataSpellings(a) {
				got = append(got, s.host)
				pt, err := policy.ParseAuthority(s.host + ":80")
				if err != nil || pt.Addr.Unmap() != a {
					t.Errorf("%s spelling %q: policy reads %v (%v), want %s", s.name, s.host, pt.Addr, err, a)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestRefusal(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		resp   response
		want   string
		status Status
	}{
		{"egressd 403", response{status: 403, deny: "no-rule"}, "", Pass},
		{"egressd 400", response{status: 400, deny: "host-mismatch"}, "", Pass},
		{"reason as required", response{status: 403, deny: "high-risk"}, "high-risk", Pass},
		{"refused for another reason", response{status: 403, deny: "special-address"}, "high-risk", Leak},
		{"origin answered", response{status: 200}, "", Leak},
		{"origin's own 403", response{status: 403}, "", Leak},
		{"tunnel established", response{status: 200, stage: "connect"}, "", Leak},
		{"allowed, upstream down", response{status: 502, deny: "upstream-unreachable"}, "", Leak},
		{"allowed, upstream slow", response{status: 504, deny: "upstream-timeout"}, "", Leak},
		{"not ready", response{status: 503, deny: "not-ready"}, "", Error},
		{"conn limit", response{status: 429, deny: "conn-limit"}, "", Error},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := refusal(&tt.resp, tt.want); got.status != tt.status {
				t.Errorf("got %s (%s), want %s", got.status, got.detail, tt.status)
			}
		})
	}
}

func TestOutcome(t *testing.T) {
	t.Parallel()
	r := func(ss ...Status) *Report {
		rep := &Report{}
		for i, s := range ss {
			rep.Results = append(rep.Results, Result{ID: strconv.Itoa(i), Status: s})
		}
		return rep
	}
	tests := []struct {
		name string
		rep  *Report
		want string
	}{
		{"all pass", r(Pass, Pass), OutcomeSealed},
		{"a leak", r(Pass, Leak, NotRun), OutcomeLeak},
		{"a failed control", r(Pass, Failed), OutcomeControlFailed},
		{"a failed control and a leak", r(Failed, Leak), OutcomeLeak},
		{"not run", r(Pass, NotRun), OutcomeIncomplete},
		{"error", r(Error, Pass), OutcomeIncomplete},
		{"empty", r(), OutcomeIncomplete},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.rep.Outcome(); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
			if got := tt.rep.Sealed(); got != (tt.want == OutcomeSealed) {
				t.Errorf("Sealed: got %v", got)
			}
		})
	}
}

func TestReportJSONAndTable(t *testing.T) {
	t.Parallel()
	rep := &Report{Start: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), Duration: 1500 * time.Millisecond, Results: []Result{
		{ID: "tcp/203.0.113.1:443", Route: "direct tcp", Target: "203.0.113.1:443", Expected: expNoConn, Status: Pass, Result: "blocked (no answer)", Duration: time.Second},
		{ID: "http-canary", Route: "proxy http", Target: "http://canary.example/", Expected: expRefused, Status: Leak, Leak: true, Result: "200 from beyond egressd", Detail: "went through"},
	}}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"outcome":"leak"`, `"sealed":false`, `"probes":2`, `"leaks":1`, `"duration_ms":1500`, `"id":"http-canary"`} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("JSON %s lacks %s", b, want)
		}
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !back.Start.Equal(rep.Start) || back.Duration != rep.Duration || len(back.Results) != 2 || back.Results[1] != rep.Results[1] {
		t.Errorf("round trip: got %+v, want %+v", back, rep)
	}
	var tb bytes.Buffer
	if err := rep.WriteTable(&tb); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"PROBE", "ROUTE", "TARGET", "EXPECTED", "RESULT", "TIME", "LEAK http-canary: went through", "leak: 2 probes, 1 passed, 1 leaked"} {
		if !strings.Contains(tb.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tb.String())
		}
	}
}

// wall is a Dial that behaves like a dropping firewall: nothing comes back
// until the probe gives up.
func wall(ctx context.Context, _, _ string) (net.Conn, error) {
	<-ctx.Done()
	return nil, &net.OpError{Op: "dial", Err: ctx.Err()}
}

// TestDirectProbesLoopback runs the direct probes on 127.0.0.1 (no root
// needed): open targets leak, a wall passes, and missing hooks or
// SkipDirect report not run, never pass.
func TestDirectProbesLoopback(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := netip.MustParseAddrPort(closed.Addr().String())
	closed.Close()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(buf[:n], from)
		}
	}()
	open := netip.MustParseAddrPort(ln.Addr().String())
	echo := netip.MustParseAddrPort(pc.LocalAddr().String())
	var d net.Dialer
	base := Config{
		TCP:     []netip.AddrPort{open, closedAddr},
		UDP:     []netip.AddrPort{echo},
		ICMP:    []netip.Addr{netip.MustParseAddr("127.0.0.1")},
		Timeout: 300 * time.Millisecond,
	}
	tests := []struct {
		name   string
		dial   DialFunc
		skip   string
		status map[string]Status
	}{
		{"open loopback", d.DialContext, "", map[string]Status{
			"tcp/" + open.String(): Leak, "tcp/" + closedAddr.String(): Leak, "udp/" + echo.String(): Leak, "icmp/127.0.0.1": NotRun}},
		{"behind a wall", wall, "", map[string]Status{
			"tcp/" + open.String(): Pass, "tcp/" + closedAddr.String(): Pass, "udp/" + echo.String(): Pass, "icmp/127.0.0.1": NotRun}},
		{"skip direct", d.DialContext, "needs root", map[string]Status{
			"tcp/" + open.String(): NotRun, "tcp/" + closedAddr.String(): NotRun, "udp/" + echo.String(): NotRun, "icmp/127.0.0.1": NotRun}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			c.Dial, c.SkipDirect = tt.dial, tt.skip
			rep, err := Run(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Results) != len(tt.status) {
				t.Fatalf("got %d results, want %d", len(rep.Results), len(tt.status))
			}
			for _, r := range rep.Results {
				if r.Status != tt.status[r.ID] {
					t.Errorf("%s: got %s (%s: %s), want %s", r.ID, r.Status, r.Result, r.Detail, tt.status[r.ID])
				}
			}
			if rep.Sealed() {
				t.Errorf("got sealed, want not")
			}
		})
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	t.Parallel()
	_, err := Run(context.Background(), Config{CanaryURL: "ftp://x/", Refused: []Request{{ID: "a", URL: "http://x/"}, {ID: "a", URL: "http://x/"}}})
	if !errors.Is(err, ErrConfig) {
		t.Fatalf("got %v, want ErrConfig", err)
	}
	for _, want := range []string{"Options.Dial is required", "ftp://x/", `refused request "a"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}
