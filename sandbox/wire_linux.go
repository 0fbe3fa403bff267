//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Wire creates the veth described by spec: the gateway end in
// spec.GatewayNS, the sandbox end in spec.SandboxNS, both up with DAD off
// (accept_dad 0 and IFA_F_NODAD), the sandbox's lo up, and the sandbox's
// default routes (IPv4 and IPv6, for each pool given) via the gateway end's
// address. It returns once the link carries traffic, so the first connect
// does not lose its SYN. On error nothing is left behind.
func Wire(spec Veth) (*Link, error) {
	l, err := wire(spec)
	if err != nil {
		return nil, fmt.Errorf("sandbox: wire %s%d: %w", spec.Prefix, spec.Index, err)
	}
	return l, nil
}

// plan names a link's interfaces and picks its addresses from the pools,
// checking the spec; nothing is created.
func plan(spec Veth) (l *Link, err error) {
	l = &Link{GatewayName: spec.Prefix + strconv.Itoa(spec.Index), SandboxName: spec.SandboxName, gw: spec.GatewayNS}
	if l.SandboxName == "" {
		l.SandboxName = "eth0"
	}
	for _, n := range []string{l.GatewayName, l.SandboxName} {
		if len(n) > unix.IFNAMSIZ-1 || n == "" || n == "." || n == ".." {
			return nil, fmt.Errorf("invalid interface name %q (at most %d bytes)", n, unix.IFNAMSIZ-1)
		}
	}
	if !spec.Pool4.IsValid() && !spec.Pool6.IsValid() {
		return nil, errors.New("no address pool")
	}
	if spec.Pool4.IsValid() {
		if !spec.Pool4.Addr().Is4() {
			return nil, fmt.Errorf("Pool4 %s is not IPv4", spec.Pool4)
		}
		if l.Gateway4, l.Sandbox4, err = Slot(spec.Pool4, orDefault(spec.Slot4Bits, 30), spec.Index); err != nil {
			return nil, err
		}
	}
	if spec.Pool6.IsValid() {
		if !spec.Pool6.Addr().Is6() {
			return nil, fmt.Errorf("Pool6 %s is not IPv6", spec.Pool6)
		}
		if l.Gateway6, l.Sandbox6, err = Slot(spec.Pool6, orDefault(spec.Slot6Bits, 126), spec.Index); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// linkEnd is one end of a veth pair, with the handle of its namespace.
type linkEnd struct {
	h            *netlink.Handle
	link         netlink.Link
	addr4, addr6 netip.Prefix
}

// upInOrder addresses both ends and brings them up in the order that loses
// no first packet (see the comments inside).
func upInOrder(ends []linkEnd) error {
	for _, e := range ends {
		if err := addAddr(e.h, e.link, e.addr4); err != nil {
			return err
		}
		if err := e.h.LinkSetUp(e.link); err != nil {
			return fmt.Errorf("set %s up: %w", e.link.Attrs().Name, err)
		}
	}
	// The order below avoids losing the first packets, which would cost
	// the first connect a full second (the SYN or ARP/ND retransmit):
	//  - a packet queued before the kernel marks the link running is
	//    dropped, so wait for that;
	//  - an IPv6 address added before then turns tentative at link-up, even
	//    with IFA_F_NODAD, so add IPv6 addresses afterwards; and wait until
	//    each is routed locally (see waitLocal).
	for _, e := range ends {
		if err := waitRunning(e.h, e.link); err != nil {
			return err
		}
	}
	for _, e := range ends {
		if err := addAddr(e.h, e.link, e.addr6); err != nil {
			return err
		}
	}
	for _, e := range ends {
		if err := waitLocal(e.h, e.link, e.addr6); err != nil {
			return err
		}
	}
	return nil
}

func wire(spec Veth) (_ *Link, err error) {
	sbx, gw := spec.SandboxNS, spec.GatewayNS
	if sbx == nil || gw == nil || sbx.fd < 0 || gw.fd < 0 {
		return nil, ErrClosed
	}
	if sbx.cookie == gw.cookie {
		return nil, fmt.Errorf("sandbox and gateway are the same namespace (%s)", sbx)
	}
	l, err := plan(spec)
	if err != nil {
		return nil, err
	}

	hg, err := netlink.NewHandleAt(netns.NsHandle(gw.fd))
	if err != nil {
		return nil, fmt.Errorf("netlink in %s: %w", gw, err)
	}
	defer hg.Close()
	hs, err := netlink.NewHandleAt(netns.NsHandle(sbx.fd))
	if err != nil {
		return nil, fmt.Errorf("netlink in %s: %w", sbx, err)
	}
	defer hs.Close()

	gl, sl, err := addVeth(hg, hs, l.GatewayName, l.SandboxName, sbx)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = hg.LinkDel(gl) // takes the peer with it
		}
	}()
	l.GatewayIndex = gl.Attrs().Index
	lo, err := hs.LinkByName("lo")
	if err != nil {
		return nil, fmt.Errorf("find lo in %s: %w", sbx, err)
	}

	// Global addresses carry IFA_F_NODAD; accept_dad 0 also spares the
	// link-local its DAD where net.ipv6.conf.all.accept_dad is 0 too. It
	// is an optimisation: where /proc/sys is read-only (systemd's
	// ProtectKernelTunables, a container runtime) the link-local just
	// runs its DAD.
	if spec.Pool6.IsValid() {
		for _, e := range []struct {
			ns   *NS
			name string
		}{{gw, l.GatewayName}, {sbx, l.SandboxName}} {
			if err := setSysctl(e.ns, "net/ipv6/conf/"+e.name+"/accept_dad", "0"); err != nil && !errors.Is(err, unix.EROFS) {
				return nil, err
			}
		}
	}
	ends := []linkEnd{{hg, gl, l.Gateway4, l.Gateway6}, {hs, sl, l.Sandbox4, l.Sandbox6}}
	if err := hs.LinkSetUp(lo); err != nil {
		return nil, fmt.Errorf("set lo up in %s: %w", sbx, err)
	}
	if err := upInOrder(ends); err != nil {
		return nil, err
	}
	for _, g := range []netip.Prefix{l.Gateway4, l.Gateway6} {
		if !g.IsValid() {
			continue
		}
		r := &netlink.Route{LinkIndex: sl.Attrs().Index, Gw: net.IP(g.Addr().AsSlice())}
		if err := hs.RouteAdd(r); err != nil {
			return nil, fmt.Errorf("add default route via %s in %s: %w", g.Addr(), sbx, err)
		}
	}
	return l, nil
}

// addVeth creates the pair and returns both ends. The kernel's linkwatch
// treats a veth whose ifindex equals its peer's (common across fresh
// namespaces: both get 2) as a non-urgent event and marks it running up to
// a second late (measured: 1.0 s), which Wire would have to wait for. On
// such a collision the pair is recreated with a gateway ifindex far from
// the peer's.
func addVeth(hg, hs *netlink.Handle, gwName, sbxName string, sbx *NS) (gl, sl netlink.Link, err error) {
	index := 0 // kernel's choice
	for attempt := 0; ; attempt++ {
		veth := &netlink.Veth{
			LinkAttrs:     netlink.LinkAttrs{Name: gwName, Index: index},
			PeerName:      sbxName,
			PeerNamespace: netlink.NsFd(sbx.fd),
		}
		if err := hg.LinkAdd(veth); err != nil {
			return nil, nil, fmt.Errorf("add veth %s/%s: %w", gwName, sbxName, err)
		}
		if gl, err = hg.LinkByName(gwName); err == nil {
			sl, err = hs.LinkByName(sbxName)
		}
		if err != nil {
			_ = hg.LinkDel(veth)
			return nil, nil, fmt.Errorf("find veth %s/%s: %w", gwName, sbxName, err)
		}
		if gl.Attrs().Index != sl.Attrs().Index {
			return gl, sl, nil
		}
		if err := hg.LinkDel(gl); err != nil {
			return nil, nil, fmt.Errorf("recreate veth %s: %w", gwName, err)
		}
		if attempt == 3 {
			return nil, nil, fmt.Errorf("add veth %s/%s: ifindex keeps colliding with the peer's", gwName, sbxName)
		}
		index = sl.Attrs().Index + 1<<16 + attempt
		for ; ; index++ {
			if _, err := hg.LinkByIndex(index); err != nil {
				break // free
			}
		}
	}
}

// addAddr adds p to link, with IFA_F_NODAD for IPv6; a zero p is skipped.
func addAddr(h *netlink.Handle, link netlink.Link, p netip.Prefix) error {
	if !p.IsValid() {
		return nil
	}
	addr := &netlink.Addr{IPNet: prefixIPNet(p)}
	if p.Addr().Is6() {
		addr.Flags = unix.IFA_F_NODAD
	}
	if err := h.AddrAdd(link, addr); err != nil {
		return fmt.Errorf("add %s to %s: %w", p, link.Attrs().Name, err)
	}
	return nil
}

// waitLocal polls until the kernel routes p's address locally, at most
// 5 s. An IPv6 address is listed (and with IFA_F_NODAD never tentative)
// before the DAD worker inserts its local route; a packet arriving in
// between is taken for one to forward and dropped.
func waitLocal(h *netlink.Handle, link netlink.Link, p netip.Prefix) error {
	if !p.IsValid() {
		return nil
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		routes, err := h.RouteGet(net.IP(p.Addr().AsSlice()))
		if err == nil && len(routes) > 0 && routes[0].Type == unix.RTN_LOCAL {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("wait for %s on %s: not local after 5s (%v)", p, link.Attrs().Name, err)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitRunning polls until link is operationally up (IFF_RUNNING), at most
// 5 s.
func waitRunning(h *netlink.Handle, link netlink.Link) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		l, err := h.LinkByIndex(link.Attrs().Index)
		if err != nil {
			return fmt.Errorf("wait for %s: %w", link.Attrs().Name, err)
		}
		if l.Attrs().RawFlags&unix.IFF_RUNNING != 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("wait for %s: not running after 5s (operstate %s)", link.Attrs().Name, l.Attrs().OperState)
		}
		time.Sleep(time.Millisecond)
	}
}

// Delete removes the veth pair now, from the gateway side.
func (l *Link) Delete() error {
	if l.gw == nil || l.gw.fd < 0 {
		return fmt.Errorf("sandbox: delete %s: %w", l.GatewayName, ErrClosed)
	}
	h, err := netlink.NewHandleAt(netns.NsHandle(l.gw.fd))
	if err != nil {
		return fmt.Errorf("sandbox: delete %s: netlink in %s: %w", l.GatewayName, l.gw, err)
	}
	defer h.Close()
	link, err := h.LinkByIndex(l.GatewayIndex)
	if err != nil || link.Attrs().Name != l.GatewayName {
		return fmt.Errorf("sandbox: delete %s: not found in %s", l.GatewayName, l.gw)
	}
	if err := h.LinkDel(link); err != nil {
		return fmt.Errorf("sandbox: delete %s: %w", l.GatewayName, err)
	}
	return nil
}

// AddAddress adds p to interface ifName in ns (an IPv6 address with
// IFA_F_NODAD) and returns once the kernel delivers p's address locally,
// so that it can be bound and reached at once; see waitLocal. A host
// address on lo (p with the full length) is how an extra "host" is put in
// a namespace.
func AddAddress(ns *NS, ifName string, p netip.Prefix) error {
	if ns == nil || ns.fd < 0 {
		return fmt.Errorf("sandbox: add address %s: %w", p, ErrClosed)
	}
	if !p.IsValid() {
		return fmt.Errorf("sandbox: add address: invalid prefix %s", p)
	}
	h, err := netlink.NewHandleAt(netns.NsHandle(ns.fd))
	if err != nil {
		return fmt.Errorf("sandbox: add address %s: netlink in %s: %w", p, ns, err)
	}
	defer h.Close()
	link, err := h.LinkByName(ifName)
	if err == nil {
		err = addAddr(h, link, p)
	}
	if err == nil {
		err = waitLocal(h, link, p)
	}
	if err != nil {
		return fmt.Errorf("sandbox: add address in %s: %w", ns, err)
	}
	return nil
}

// SetSysctl writes value to /proc/sys/<key> as seen from inside ns, e.g.
// SetSysctl(gw, "net/ipv4/ip_forward", "1"). Network sysctls are
// per-namespace; the file is opened on a thread inside ns.
func SetSysctl(ns *NS, key, value string) error {
	return setSysctl(ns, key, value)
}

func setSysctl(ns *NS, key, value string) error {
	p := filepath.Join("/proc/sys", filepath.Clean("/"+key))
	err := Do(ns, func() error { return os.WriteFile(p, []byte(value), 0) })
	if err != nil {
		return fmt.Errorf("set %s=%s in %s: %w", key, value, ns, err)
	}
	return nil
}

func prefixIPNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}
