//go:build linux

package nft

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/egressd/egressd/internal/testnet"
	"github.com/egressd/egressd/sandbox"
	"github.com/google/nftables"
)

var nsSeq atomic.Int64

// nsPrefix names this package's test namespaces, so that leftovers of a
// killed run can be recognised.
const nsPrefix = "egnft-"

// newNS creates a fresh, named network namespace holding only lo (down) and
// returns an fd for it and its name; cleanup deletes it. Nothing links it to
// the root namespace.
func newNS(t testing.TB) (int, string) {
	t.Helper()
	testnet.RequireRoot(t)
	ns, err := sandbox.Create(sandbox.PIDName(nsPrefix, strconv.FormatInt(nsSeq.Add(1), 10)))
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() {
		ns.Close()
		if err := sandbox.Delete(ns.Name()); err != nil {
			t.Errorf("delete namespace %s: %v", ns.Name(), err)
		}
	})
	if root := testnet.RootCookie(t); ns.Cookie() == root || ns.Fd() <= 0 {
		t.Fatalf("namespace %s: cookie %d, fd %d; root cookie %d", ns.Name(), ns.Cookie(), ns.Fd(), root)
	}
	return ns.Fd(), ns.Name()
}

// nftCLI runs the nft command inside the named namespace; it skips the test
// when nft is not installed. nsenter runs nothing if it cannot enter the
// namespace, so nft never acts on the root namespace.
func nftCLI(t testing.TB, nsName string, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath("nft"); err != nil {
		if os.Getenv("EGRESSD_REQUIRE_NETNS") == "1" {
			t.Fatal("nft CLI not installed (apt-get install -y nftables)")
		}
		t.Skip("nft CLI not installed (apt-get install -y nftables)")
	}
	cmd := exec.Command("nsenter", append([]string{"--net=" + filepath.Join(sandbox.NetnsDir, nsName), "--", "nft"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("nsenter --net=%s nft %s: %v\n%s", filepath.Join(sandbox.NetnsDir, nsName), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// rootTables lists the tables of the test process's own namespace (read
// only), to prove afterwards that the tests added none.
func rootTables() ([]string, error) {
	c, err := nftables.New()
	if err != nil {
		return nil, err
	}
	ts, err := c.ListTables()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, t := range ts {
		names = append(names, fmt.Sprintf("%d/%s", t.Family, t.Name))
	}
	slices.Sort(names)
	return names, nil
}

func TestMain(m *testing.M) {
	var before []string
	if os.Geteuid() == 0 {
		// Namespaces left by a killed run of this package.
		if _, err := sandbox.CleanupStale(nsPrefix); err != nil {
			fmt.Fprintf(os.Stderr, "clean up stale namespaces: %v\n", err)
		}
		var err error
		if before, err = rootTables(); err != nil {
			fmt.Fprintf(os.Stderr, "list root namespace tables: %v\n", err)
			os.Exit(2)
		}
	}
	code := m.Run()
	testnet.ReportRootTests("nft")
	if os.Geteuid() == 0 {
		after, err := rootTables()
		if err != nil || !slices.Equal(before, after) {
			fmt.Fprintf(os.Stderr, "SAFETY: root namespace tables changed during the tests: before %v, after %v (err %v)\n", before, after, err)
			code = 1
		}
	}
	os.Exit(code)
}
