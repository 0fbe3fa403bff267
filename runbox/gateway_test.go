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
