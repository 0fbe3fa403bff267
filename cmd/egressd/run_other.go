//go:build !linux

package main

import (
	"context"
	"fmt"
	"io"
)

func init() { commands["run"] = cmdRun }

// cmdRun off Linux: run needs network namespaces and nftables.
func cmdRun(_ context.Context, _ []string, _, stderr io.Writer) int {
	fmt.Fprintln(stderr, "egressd run: needs Linux (network namespaces and nftables)")
	return exitUsage
}
