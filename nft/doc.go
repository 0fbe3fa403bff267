// Package nft is egressd's kernel wall: it owns one nftables table,
// "inet egressd", and nothing else.
//
// Traffic from a sandbox — recognised by input-interface name prefix, by
// source address, or (for local-user sandboxes, in the output hook) by socket
// uid — may reach only the proxy port, the DNS port and any extra TCP ports on
// the gateway addresses. Everything else it sends (TCP, UDP, ICMP; IPv4 and
// IPv6; forwarded or addressed to the gateway host) is dropped and counted in
// a named counter. High-risk destinations (cloud metadata) are dropped by a
// rule of their own, ahead of everything, even on the gateway itself.
//
// The table is rendered from a plain Spec and installed by one atomic batch
// that adds, deletes and re-adds the table, so Apply is idempotent and never
// leaves a half-built wall. The table outlives the process (fail-closed): only
// Down removes it. Check reads the table back and lists every difference from
// what Apply would install; Ensure and Watch repair drift.
//
// Every function takes the network namespace to act in, as an open file
// descriptor (CurrentNamespace for the caller's own):
//
//	s := nft.Spec{IfPrefixes: []string{"egsbx"}, Gateways: gws, ProxyPort: 3128, DNSPort: 53,
//		HighRisk: []netip.Prefix{netip.MustParsePrefix("169.254.169.254/32")}}
//	if err := nft.Apply(nsFd, s); err != nil { ... }
//	drift, err := nft.Check(nsFd, s)          // nil: the kernel holds exactly s
//	go nft.Watch(ctx, nsFd, s, time.Minute, func(drift []string, err error) { log and count })
//	text, err := nft.Show(nsFd, s.TableName())
//
// The package imports nothing of egressd's and never logs.
package nft
