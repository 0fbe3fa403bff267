package runbox

import (
	"bytes"
	"net/netip"
	"reflect"
	"testing"

	"github.com/egressd/egressd/configs"
	"github.com/egressd/egressd/policy"
)

// TestPolicyOnlyMovesListen: a run serves the config exactly as serve
// does — daemon.NewGateway consumes the same policy — except the listen
// addresses, which move to the run's link. A per-run override of any other
// key (the way run once dropped upstream_ca) fails here.
func TestPolicyOnlyMovesListen(t *testing.T) {
	t.Parallel()
	p, err := policy.Parse(bytes.NewReader(configs.Default), configs.DefaultName)
	if err != nil {
		t.Fatal(err)
	}
	p.UpstreamCA = "/etc/egressd/upstream-ca.pem"
	gw := netip.MustParseAddr("10.201.0.9")
	q := Policy(p, gw, true)
	pv, qv := reflect.ValueOf(p).Elem(), reflect.ValueOf(q).Elem()
	for i := range pv.NumField() {
		f := pv.Type().Field(i)
		if !f.IsExported() || f.Name == "Listen" {
			continue
		}
		if !reflect.DeepEqual(pv.Field(i).Interface(), qv.Field(i).Interface()) {
			t.Errorf("run changes config key %s: serve %v, run %v", f.Name, pv.Field(i).Interface(), qv.Field(i).Interface())
		}
	}
	if want := "10.201.0.9:3128"; q.Listen.Proxy != want {
		t.Errorf("listen.proxy: got %q, want %q", q.Listen.Proxy, want)
	}
	if want := "10.201.0.9:53"; q.Listen.DNS != want {
		t.Errorf("listen.dns: got %q, want %q", q.Listen.DNS, want)
	}
	if q.Listen.Admin != "" {
		t.Errorf("listen.admin: got %q, want off", q.Listen.Admin)
	}
	if q.Listen.Transparent != "10.201.0.9:3129" || q.Listen.TransparentHTTP != "10.201.0.9:3130" {
		t.Errorf("transparent listeners: got %q %q", q.Listen.Transparent, q.Listen.TransparentHTTP)
	}
	if p.Listen == q.Listen {
		t.Error("the run's policy shares the config's listen addresses")
	}
}

func mustAP(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// TestPolicyMovesToolsEndpoint: a run serves the tool endpoint on its
// link like the proxy, and the self-test's entry for egressd's own
// endpoint follows it; other tool servers stay as configured.
func TestPolicyMovesToolsEndpoint(t *testing.T) {
	t.Parallel()
	p, err := policy.Parse(bytes.NewReader([]byte(`version: 1
tools:
  listen: 10.237.0.1:8931
selftest:
  tool_servers:
    - {name: egressd, url: "http://10.237.0.1:8931/mcp"}
    - {name: web, url: "http://127.0.0.1:8000/mcp"}
`)), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	q := Policy(p, netip.MustParseAddr("10.201.0.9"), false)
	if q.Tools.Listen != "10.201.0.9:8931" {
		t.Errorf("tools.listen: %q, want 10.201.0.9:8931", q.Tools.Listen)
	}
	if got := q.Selftest.ToolServers; got[0].URL != "http://10.201.0.9:8931/mcp" || got[1].URL != "http://127.0.0.1:8000/mcp" {
		t.Errorf("tool servers %+v", got)
	}
	if p.Selftest.ToolServers[0].URL != "http://10.237.0.1:8931/mcp" {
		t.Errorf("the serve policy changed: %+v", p.Selftest.ToolServers)
	}
}
