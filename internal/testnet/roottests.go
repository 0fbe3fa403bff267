package testnet

import (
	"fmt"
	"io"
	"os"
	"sync/atomic"
)

// rootCounts counts RequireRoot's verdicts in this test binary.
type rootCounts struct{ ran, skipped atomic.Int64 }

var rootTests rootCounts

// ReportRootTests prints, from a package's TestMain after m.Run, whether
// its root-only namespace tests ran: "egressd nft: root-only namespace
// tests: ran (as root)" or "…: skipped: not root (…)". go test shows a passing
// package's output only with -v, so the line goes to the controlling
// terminal when there is one (a developer's `go test ./...`), else to
// stdout (shown with -v, and for a failing package).
func ReportRootTests(pkg string) {
	var w io.Writer = os.Stdout
	if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
		defer tty.Close()
		w = tty
	}
	writeRootTests(w, pkg)
}

func writeRootTests(w io.Writer, pkg string) {
	ran, skipped := rootTests.ran.Load(), rootTests.skipped.Load()
	switch {
	case skipped > 0:
		fmt.Fprintf(w, "egressd %s: root-only namespace tests: skipped: not root (%d tests; sudo go test ./... runs them)\n", pkg, skipped)
	case ran > 0:
		fmt.Fprintf(w, "egressd %s: root-only namespace tests: ran (as root)\n", pkg)
	}
}
