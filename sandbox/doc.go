// Package sandbox is egressd's network-namespace plumbing: named namespaces,
// running code and opening sockets inside them, the veth that wires a
// sandbox namespace to the gateway namespace egressd serves from, and the
// re-exec helper that starts `egressd run`'s command inside a sandbox.
//
// A socket belongs to the namespace of the thread that called socket(2),
// for its whole life; goroutines, net.Resolver lookups and http.Transport
// dials all run on threads of the runtime's choosing, which are in the
// process's own namespace. So nothing here relies on the caller's thread:
// every socket is created by [Do] on a thread locked into the target
// namespace, and every socket is checked by a guard ([GuardControl]) that
// compares its SO_NETNS_COOKIE with the namespace it must be in, after
// socket(2) and before connect(2) or bind(2). A wrong socket is refused
// before it sends a packet.
//
// Sketch:
//
//	sbx, err := sandbox.Create("egressd-sbx0")      // /run/netns/egressd-sbx0
//	gw, err := sandbox.Current()                     // where egressd runs
//	link, err := sandbox.Wire(sandbox.Veth{Prefix: "egsbx", SandboxNS: sbx, GatewayNS: gw,
//		Pool4: netip.MustParsePrefix("10.201.0.0/16")})
//	d := &sandbox.Dialer{NS: sbx}
//	c, err := d.DialContext(ctx, "tcp", link.Gateway4.Addr().String()+":3128")
//	cmd := sandbox.NSExecCommand("/proc/self/exe", sbx.Path(), resolvConf, argv)
//
// Everything but the pure helpers ([Slot], [WriteResolvConf]) is Linux-only
// and returns [errors.ErrUnsupported] elsewhere. Build with CGO_ENABLED=0 (or
// -tags netgo): the cgo resolver reads the host's resolver configuration on
// whatever thread it runs.
package sandbox
