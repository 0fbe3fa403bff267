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
	strict := fs.Bool("strict", false, "make warnings errors (exit 2): for CI")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) > 0 && *cfg == "" && len(pos) == 1 {
		*cfg = pos[0] // "egressd validate FILE" reads as one expects
	} else if len(pos) > 0 {
		fmt.Fprintln(stderr, "usage: egressd validate [--strict] [--config FILE]")
		return exitUsage
	}
	p, err := loadPolicy(*cfg)
	if err != nil {
		printConfigError(stderr, err)
		return exitUsage
	}
	level := "warning"
	if *strict {
		level = "error"
	}
	warned := append(p.Warnings(), p.Lints()...)
	for _, w := range warned {
		fmt.Fprintf(stderr, "%s: %s: %s\n", p.Source, level, w)
	}
	if *strict && len(warned) > 0 {
		return exitUsage
	}
	fmt.Fprintf(stdout, "%s: ok: %d allow rules, %d identities\n", p.Source, len(p.Rules), len(p.Identities))
	return exitOK
}
