package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/egressd/egressd/suggest"
)

func init() {
	commands["suggest"] = cmdSuggest
	commands["replay"] = cmdReplay
}

// readEntries reads a decision log; without withProbes, egressd's own
// probe traffic is left out (and counted on stderr).
func readEntries(path string, withProbes bool, stderr io.Writer) ([]suggest.Entry, bool) {
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintf(stderr, "egressd: %v\n", err)
		return nil, false
	}
	defer f.Close()
	entries, _, err := suggest.Read(f)
	if err != nil {
		fmt.Fprintf(stderr, "egressd: %s: %v\n", path, err)
		return nil, false
	}
	if !withProbes {
		var n int
		if entries, n = suggest.WithoutProbes(entries); n > 0 {
			fmt.Fprintf(stderr, "egressd: %d lines of egressd's own probe traffic left out (--with-probes reads them)\n", n)
		}
	}
	return entries, true
}

// withProbesFlag is suggest's and replay's --with-probes.
func withProbesFlag(fs *flag.FlagSet) *bool {
	return fs.Bool("with-probes", false, "read egressd's own probe traffic too (the self-test's and in-sandbox probes' lines, left out by default)")
}

func cmdSuggest(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("suggest", stderr)
	logFile := fs.String("log", "", "decision log of a trial run (JSON lines of egressd serve)")
	identity := fs.String("identity", "", "only this identity's denials; the proposed rules name it")
	withProbes := withProbesFlag(fs)
	if pos, err := parseFlags(fs, args); err != nil || len(pos) > 0 || *logFile == "" {
		fmt.Fprintln(stderr, "usage: egressd suggest --log FILE [--identity ID] [--with-probes]")
		return exitUsage
	}
	entries, ok := readEntries(*logFile, *withProbes, stderr)
	if !ok {
		return exitUsage
	}
	suggest.Suggest(stdout, entries, suggest.Options{Identity: *identity})
	return exitOK
}

func cmdReplay(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("replay", stderr)
	cfg := configFlag(fs)
	logFile := fs.String("log", "", "decision log to decide again (JSON lines of egressd serve)")
	loosen := fs.Bool("fail-on-loosen", false, "exit 1 only when the config allows something the log shows denied (a pre-deploy gate)")
	withProbes := withProbesFlag(fs)
	if pos, err := parseFlags(fs, args); err != nil || len(pos) > 0 || *logFile == "" {
		fmt.Fprintln(stderr, "usage: egressd replay [--config FILE] --log FILE [--fail-on-loosen] [--with-probes]")
		return exitUsage
	}
	p, err := loadPolicy(*cfg)
	if err != nil {
		printConfigError(stderr, err)
		return exitUsage
	}
	entries, ok := readEntries(*logFile, *withProbes, stderr)
	if !ok {
		return exitUsage
	}
	d := suggest.Replay(p, entries)
	d.Write(stdout)
	if *loosen && d.Loosened() || !*loosen && len(d.Changes) > 0 {
		return exitDeny
	}
	return exitOK
}
