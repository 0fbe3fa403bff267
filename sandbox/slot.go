package sandbox

import (
	"fmt"
	"math/big"
	"net/netip"
)

// Slot splits pool into subnets of length bits and returns the gateway and
// sandbox addresses of subnet number index, each with prefix length bits:
// the first and second host addresses (network+1, network+2), or for a
// point-to-point /31 (IPv4) or /127 (IPv6) the two addresses of the slot.
// For example pool 10.201.0.0/16, bits 30, index 2 gives 10.201.0.9/30 and
// 10.201.0.10/30; pool 2001:db8:7::/48, bits 64, index 1 gives
// 2001:db8:7:1::1/64 and 2001:db8:7:1::2/64.
func Slot(pool netip.Prefix, bits, index int) (gw, sbx netip.Prefix, err error) {
	if !pool.IsValid() || pool != pool.Masked() {
		return gw, sbx, fmt.Errorf("sandbox: slot: pool %s is not a network prefix", pool)
	}
	if pool.Addr().Is4In6() || pool.Addr().Zone() != "" {
		return gw, sbx, fmt.Errorf("sandbox: slot: pool %s: mapped or zoned address", pool)
	}
	total := pool.Addr().BitLen()
	if bits < pool.Bits() || bits > total-1 {
		return gw, sbx, fmt.Errorf("sandbox: slot: length /%d does not fit pool %s (want /%d to /%d)", bits, pool, pool.Bits(), total-1)
	}
	slots := new(big.Int).Lsh(big.NewInt(1), uint(bits-pool.Bits()))
	if index < 0 || big.NewInt(int64(index)).Cmp(slots) >= 0 {
		return gw, sbx, fmt.Errorf("sandbox: slot: index %d out of range: pool %s has %s slots of /%d", index, pool, slots, bits)
	}
	base := new(big.Int).SetBytes(pool.Addr().AsSlice())
	base.Add(base, new(big.Int).Lsh(big.NewInt(int64(index)), uint(total-bits)))
	first := int64(1)
	if bits == total-1 {
		first = 0 // point-to-point (RFC 3021, RFC 6164): both addresses usable
	}
	g := addrFromInt(new(big.Int).Add(base, big.NewInt(first)), total)
	s := addrFromInt(new(big.Int).Add(base, big.NewInt(first+1)), total)
	return netip.PrefixFrom(g, bits), netip.PrefixFrom(s, bits), nil
}

func addrFromInt(v *big.Int, bitLen int) netip.Addr {
	b := v.FillBytes(make([]byte, bitLen/8))
	a, _ := netip.AddrFromSlice(b)
	return a
}
