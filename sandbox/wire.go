package sandbox

import "net/netip"

// Veth describes the link that wires a sandbox namespace to the gateway
// namespace: a veth pair whose gateway end is named Prefix+Index and whose
// sandbox end is SandboxName, addressed from slot Index of the pools (see
// [Slot]), with the sandbox's default routes pointing at the gateway end.
type Veth struct {
	// Prefix starts the gateway-side interface name (nft rules match on
	// it). Prefix+Index must fit 15 bytes.
	Prefix string
	// Index selects the slot in both pools and ends the interface name.
	Index int
	// SandboxNS receives the sandbox end, its addresses and default routes.
	SandboxNS *NS
	// GatewayNS receives the gateway end: the namespace egressd serves
	// from (in production often [Current], in tests a test namespace).
	// Nothing else in it is changed; in particular forwarding stays as it is.
	GatewayNS *NS
	// Pool4 is split into /Slot4Bits subnets; the zero Prefix means no IPv4.
	Pool4 netip.Prefix
	// Slot4Bits is the IPv4 slot length; 0 means 30.
	Slot4Bits int
	// Pool6 is split into /Slot6Bits subnets; the zero Prefix means no
	// IPv6 address or route (the sandbox keeps only its link-local).
	Pool6 netip.Prefix
	// Slot6Bits is the IPv6 slot length; 0 means 126. Use 64 for a /64
	// per sandbox out of a /48 or /56 pool.
	Slot6Bits int
	// SandboxName names the sandbox end; "" means "eth0".
	SandboxName string
}

// Link is a wired veth. Deleting the sandbox namespace (once nothing holds
// it) deletes the pair; Delete does it at once.
type Link struct {
	// GatewayName and SandboxName are the interface names in GatewayNS and
	// SandboxNS; GatewayIndex is the gateway end's ifindex.
	GatewayName, SandboxName string
	GatewayIndex             int
	// Gateway4 and Sandbox4 are the IPv4 addresses with the slot's length;
	// zero without Pool4. Gateway6 and Sandbox6 likewise for IPv6.
	Gateway4, Sandbox4 netip.Prefix
	Gateway6, Sandbox6 netip.Prefix

	gw *NS
}
