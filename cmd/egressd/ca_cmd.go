package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/egressd/egressd/ca"
)

func init() { commands["ca"] = cmdCA }

func cmdCA(_ context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "export" {
		fmt.Fprintln(stderr, "usage: egressd ca export [--state-dir DIR]")
		return exitUsage
	}
	fs := newFlagSet("ca export", stderr)
	stateDir := fs.String("state-dir", defaultStateDir(), "directory holding egressd's CA")
	if pos, err := parseFlags(fs, args[1:]); err != nil || len(pos) > 0 {
		return exitUsage
	}
	c, err := ca.LoadOrCreate(filepath.Join(*stateDir, "ca"))
	if err != nil {
		fmt.Fprintf(stderr, "egressd: %v\n", err)
		return exitUsage
	}
	stdout.Write(c.CertPEM())
	return exitOK
}
