//go:build !linux

package nft

import (
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// Counter is a packet and byte count.
type Counter struct {
	Packets uint64
	Bytes   uint64
}

var errUnsupported = fmt.Errorf("nft: nftables needs Linux: %w", errors.ErrUnsupported)

// AddRedirect is not supported on this platform.
func AddRedirect(ns int, table string, addrs []netip.Addr, ttl time.Duration) error {
	return errUnsupported
}

// Apply is not supported on this platform.
func Apply(ns int, s Spec) error { return errUnsupported }

// Down is not supported on this platform.
func Down(ns int, table string) error { return errUnsupported }

// Check is not supported on this platform.
func Check(ns int, s Spec) ([]string, error) { return nil, errUnsupported }

// Ensure is not supported on this platform.
func Ensure(ns int, s Spec) ([]string, error) { return nil, errUnsupported }

// LeftTrial is not supported on this platform: a check that cannot read
// says so.
func LeftTrial(ns int, table string) []string {
	return []string{"trial check failed: " + errUnsupported.Error()}
}

// Show is not supported on this platform.
func Show(ns int, table string) (string, error) { return "", errUnsupported }

// Counters is not supported on this platform.
func Counters(ns int, table string) (map[string]Counter, error) { return nil, errUnsupported }

// Tables is Linux-only.
func Tables(ns int, prefix string) ([]string, error) { return nil, errUnsupported }

// TryOn is not supported on this platform.
func TryOn(ns int, table string, cand Spec, iface string) error { return errUnsupported }

// EndTry is not supported on this platform.
func EndTry(ns int, table string) error { return errUnsupported }

// Settle is not supported on this platform.
func Settle(ns int, s Spec) error { return errUnsupported }
