package testnet

import (
	"bytes"
	"testing"
)

// TestRootTestsLine: a package's TestMain prints one line saying whether
// its root-only namespace tests ran, so `go test ./...` without -v tells
// a non-root developer they were skipped.
func TestRootTestsLine(t *testing.T) {
	saved, ran, skipped := geteuid, rootTests.ran.Load(), rootTests.skipped.Load()
	defer func() {
		geteuid = saved
		rootTests.ran.Store(ran)
		rootTests.skipped.Store(skipped)
	}()
	for _, tc := range []struct {
		name  string
		euids []int
		want  string
	}{
		{"none", nil, ""},
		{"ran", []int{0, 0}, "egressd nft: root-only namespace tests: ran (as root)\n"},
		{"skipped", []int{1000, 1000, 1000}, "egressd nft: root-only namespace tests: skipped: not root (3 tests; sudo go test ./... runs them)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("EGRESSD_REQUIRE_NETNS", "")
			rootTests.ran.Store(0)
			rootTests.skipped.Store(0)
			for _, e := range tc.euids {
				geteuid = func() int { return e }
				RequireRoot(&fakeTB{TB: t})
			}
			var b bytes.Buffer
			writeRootTests(&b, "nft")
			if b.String() != tc.want {
				t.Errorf("line %q, want %q", b.String(), tc.want)
			}
		})
	}
}
