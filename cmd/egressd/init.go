package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/egressd/egressd/presets"
)

func init() { commands["init"] = cmdInit }

func cmdInit(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("init", stderr)
	list := fs.String("preset", "", "comma-separated presets: "+strings.Join(presets.Names(), ", "))
	kind := fs.String("sandbox", "local", "sandbox kind: local, docker or kubernetes")
	uid := fs.Uint("uid", 1000, "local: the uid the agent runs as")
	out := fs.String("out", "", "write the config to FILE (refuses to overwrite); default: stdout")
	if pos, err := parseFlags(fs, args); err != nil || len(pos) > 0 {
		fmt.Fprintln(stderr, "usage: egressd init --preset pypi,npm=HOST,... [--sandbox local|docker|kubernetes] [--uid N] [--out FILE]")
		return exitUsage
	}
	var names []string
	if *list != "" {
		names = strings.Split(*list, ",")
	}
	b, err := presets.Render(presets.Options{Presets: names, Sandbox: *kind, UID: uint32(*uid)})
	if err != nil {
		fmt.Fprintf(stderr, "egressd: init: %v\n", err)
		return exitUsage
	}
	if *out == "" {
		stdout.Write(b)
		return exitOK
	}
	f, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		fmt.Fprintf(stderr, "egressd: init: %v\n", err)
		return exitUsage
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		fmt.Fprintf(stderr, "egressd: init: write %s: %v\n", *out, err)
		return exitUsage
	}
	if err := f.Close(); err != nil {
		fmt.Fprintf(stderr, "egressd: init: %v\n", err)
		return exitUsage
	}
	fmt.Fprintf(stdout, "wrote %s: review it, then egressd validate --config %s\n", *out, *out)
	return exitOK
}
