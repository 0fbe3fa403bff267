package sandbox

import (
	"net/netip"
	"os"
	"strings"
	"testing"
)

func TestSlot(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		pool          string
		bits, index   int
		wantGW, wantS string
		wantErr       string
	}{
		{name: "v4 /30 first", pool: "10.201.0.0/16", bits: 30, index: 0, wantGW: "10.201.0.1/30", wantS: "10.201.0.2/30"},
		{name: "v4 /30 third", pool: "10.201.0.0/16", bits: 30, index: 2, wantGW: "10.201.0.9/30", wantS: "10.201.0.10/30"},
		{name: "v4 /30 last", pool: "10.201.0.0/16", bits: 30, index: 16383, wantGW: "10.201.255.253/30", wantS: "10.201.255.254/30"},
		{name: "v4 /31 point-to-point", pool: "198.51.100.0/24", bits: 31, index: 5, wantGW: "198.51.100.10/31", wantS: "198.51.100.11/31"},
		{name: "v4 whole pool", pool: "198.51.100.0/24", bits: 24, index: 0, wantGW: "198.51.100.1/24", wantS: "198.51.100.2/24"},
		{name: "v6 /126", pool: "2001:db8:1::/64", bits: 126, index: 3, wantGW: "2001:db8:1::d/126", wantS: "2001:db8:1::e/126"},
		{name: "v6 /127", pool: "2001:db8:1::/64", bits: 127, index: 1, wantGW: "2001:db8:1::2/127", wantS: "2001:db8:1::3/127"},
		{name: "v6 /64 from /48", pool: "2001:db8:7::/48", bits: 64, index: 1, wantGW: "2001:db8:7:1::1/64", wantS: "2001:db8:7:1::2/64"},
		{name: "v6 /64 last of /48", pool: "2001:db8:7::/48", bits: 64, index: 65535, wantGW: "2001:db8:7:ffff::1/64", wantS: "2001:db8:7:ffff::2/64"},
		{name: "index past end", pool: "10.201.0.0/16", bits: 30, index: 16384, wantErr: "out of range"},
		{name: "negative index", pool: "10.201.0.0/16", bits: 30, index: -1, wantErr: "out of range"},
		{name: "slot /32 holds one address", pool: "10.201.0.0/16", bits: 32, wantErr: "does not fit"},
		{name: "slot shorter than pool", pool: "10.201.0.0/16", bits: 8, wantErr: "does not fit"},
		{name: "v6 /128", pool: "2001:db8::/64", bits: 128, wantErr: "does not fit"},
		{name: "pool with host bits", pool: "10.201.0.1/16", bits: 30, wantErr: "not a network prefix"},
		{name: "mapped pool", pool: "::ffff:10.0.0.0/120", bits: 126, wantErr: "mapped"},
		{name: "zero pool", pool: "", bits: 30, wantErr: "not a network prefix"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var pool netip.Prefix
			if tc.pool != "" {
				pool = netip.MustParsePrefix(tc.pool)
			}
			gw, s, err := Slot(pool, tc.bits, tc.index)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got err %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("got err %v, want nil", err)
			}
			if gw.String() != tc.wantGW || s.String() != tc.wantS {
				t.Errorf("got %s, %s; want %s, %s", gw, s, tc.wantGW, tc.wantS)
			}
		})
	}
}

func TestWriteResolvConf(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p, err := WriteResolvConf(dir, netip.MustParseAddr("198.51.100.1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := WriteResolvConf(dir, netip.Addr{}); err == nil {
		t.Error("got nil error for the zero address, want one")
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o644 {
		t.Errorf("got mode %v, want 0644: the command may run unprivileged", got)
	}
	b, err := readFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(b, "\nnameserver 198.51.100.1\n") || strings.Count(b, "nameserver") != 1 {
		t.Errorf("got %q, want a single nameserver 198.51.100.1 line", b)
	}
}

func readFile(p string) (string, error) {
	b, err := os.ReadFile(p)
	return string(b), err
}
