package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
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
	// never mint: a CA made here would not be the one serve uses, and
	// clients told to trust it would fail (a wrong --state-dir must fail)
	dir := filepath.Join(*stateDir, "ca")
	c, err := ca.Load(dir)
	if errors.Is(err, ca.ErrNoCA) || errors.Is(err, iofs.ErrNotExist) {
		fmt.Fprintf(stderr, "egressd ca export: no CA in %s: egressd serve creates one at its first start; pass the --state-dir serve uses\n", dir)
		return exitUsage
	}
	if err != nil {
		fmt.Fprintf(stderr, "egressd ca export: %v\n", err)
		return exitUsage
	}
	stdout.Write(c.CertPEM())
	return exitOK
}
