package plan

import (
	"context"
	"net"
	"net/netip"
	"syscall"
	"testing"

	"github.com/egressd/egressd/proxy"
	"github.com/egressd/egressd/selftest"
)

const identityProbeConfig = `version: 1
identities:
  - {name: research, user: research, token_sha256: 2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881}
  - {name: build, user: build, token_sha256: 2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881}
  - {name: ci, cidrs: [198.51.100.30/32]}
allow:
  - name: docs
    hosts: [docs.example.com]
    identities: [research]
  - name: registry
    hosts: [registry.example.com]
    mirror: npm
    identities: [build]
  - name: ci-only
    hosts: [ci.example.com]
    identities: [ci, build]       # ci is known by source: never a probe target
  - name: shared
    hosts: [status.example.com]
`

// TestIdentityProbes: one probe per token identity, to a host only its own
// rules allow, sent with its user name but not its token; against the real
// proxy each is refused. (Negative control: rules that apply to everyone
// let one through and the probe reports a leak.)
func TestIdentityProbes(t *testing.T) {
	p := mustPolicy(t, identityProbeConfig)
	probes := identityProbes(p)
	got := map[string]string{}
	for _, q := range probes {
		got[q.ID] = q.ProxyUser + " " + q.URL + " " + q.Reason
	}
	want := map[string]string{
		"identity-label/research/docs":  "research https://docs.example.com/ no-rule",
		"identity-label/build/registry": "build https://registry.example.com/ no-rule",
	}
	if len(got) != len(want) {
		t.Errorf("probes %v, want %v", got, want)
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("%s = %q, want %q", id, got[id], w)
		}
	}

	// live: the probes against the proxy; no dial may happen at all
	px := proxy.New(p, proxy.Config{Control: func(_, addr string, _ syscall.RawConn) error {
		t.Errorf("the proxy dialed %s for an identity probe", addr)
		return syscall.EPERM
	}})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go px.Serve(l)
	t.Cleanup(func() { px.Shutdown(context.Background()) })
	var d net.Dialer
	rep, err := selftest.Run(t.Context(), selftest.Config{
		Dial: d.DialContext, Proxy: netip.MustParseAddrPort(l.Addr().String()),
		SkipDirect: "test", Refused: probes,
	})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range rep.Results {
		if r.Status == selftest.NotRun {
			continue
		}
		n++
		if r.Status != selftest.Pass {
			t.Errorf("%s: %s %s: %s", r.ID, r.Status, r.Result, r.Detail)
		}
	}
	if n != len(probes) {
		t.Errorf("%d probes ran, want %d", n, len(probes))
	}
}
