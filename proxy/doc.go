// Package proxy is egressd's checkpoint: a default-deny forward proxy built
// on github.com/elazarl/goproxy. Every request and CONNECT is decided by the
// current policy.Policy; names are resolved only through the configured
// upstreams and every answer is checked, and the proxy dials the address it
// checked (no second lookup, no DNS-rebinding window). Host-only CONNECT
// rules are spliced after the TLS ClientHello's SNI is checked against the
// CONNECT host; rules that check pages, methods, paths or a mirror grammar
// are inspected with egressd's own CA. Denials are 403 with
// X-Egressd-Deny; every decision is one JSON log line and a metric.
//
//	px := proxy.New(pol, proxy.Config{Logger: log, Registry: reg, CA: ca})
//	go px.Serve(listener)
//	px.SetPolicy(newPol) // on reload
package proxy
