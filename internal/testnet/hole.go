//go:build linux

package testnet

import (
	"net/netip"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// InsertAccept opens one way out of the sandbox, the negative control a
// leak test needs: it inserts "<family> daddr A <proto> [dport P] accept"
// at the top of the sandbox forward chain (sbx_fwd) of egressd's table in
// the namespace ns (a Topo's Gateway.Fd()), ahead of the walls' drops. A
// zero port matches every port (ICMP).
func InsertAccept(t testing.TB, ns int, table string, proto byte, dst netip.AddrPort) {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(ns))
	if err != nil {
		t.Fatal(err)
	}
	fam, off, l4 := byte(unix.NFPROTO_IPV4), uint32(16), uint32(4)
	if dst.Addr().Is6() {
		fam, off, l4 = unix.NFPROTO_IPV6, 24, 16
	}
	exprs := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{fam}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: l4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: dst.Addr().AsSlice()},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
	}
	if dst.Port() != 0 {
		exprs = append(exprs,
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(dst.Port())})
	}
	exprs = append(exprs, &expr.Verdict{Kind: expr.VerdictAccept})
	tbl := &nftables.Table{Family: nftables.TableFamilyINet, Name: table}
	c.InsertRule(&nftables.Rule{Table: tbl, Chain: &nftables.Chain{Name: "sbx_fwd", Table: tbl}, Exprs: exprs})
	if err := c.Flush(); err != nil {
		t.Fatalf("testnet: insert accept for %d %s in table %s: %v", proto, dst, table, err)
	}
}
