package main

import (
	"context"
	"fmt"
	"io"
)

func init() { commands["validate"] = cmdValidate }

func cmdValidate(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("validate", stderr)
	cfg := configFlag(fs)
	pos, err := parseFlags(fs, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) > 0 && *cfg == "" && len(pos) == 1 {
		*cfg = pos[0] // "egressd validate FILE" reads as one expects
	} else if len(pos) > 0 {
		fmt.Fprintln(stderr, "usage: egressd validate [--config FILE]")
		return exitUsage
	}
	p, err := loadPolicy(*cfg)
	if err != nil {
		printConfigError(stderr, err)
		return exitUsage
	}
	for _, w := range p.Warnings() {
		fmt.Fprintf(stderr, "%s: warning: %s\n", p.Source, w)
	}
	fmt.Fprintf(stdout, "%s: ok: %d allow rules, %d identities\n", p.Source, len(p.Rules), len(p.Identities))
	return exitOK
}
