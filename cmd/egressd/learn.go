package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/egressd/egressd/suggest"
)

func init() {
	commands["suggest"] = cmdSuggest
	commands["replay"] = cmdReplay
}

func readEntries(path string, stderr io.Writer) ([]suggest.Entry, bool) {
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
	return entries, true
}

func cmdSuggest(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("suggest", stderr)
	logFile := fs.String("log", "", "decision log of a trial run (JSON lines of egressd serve)")
	identity := fs.String("identity", "", "only this identity's denials; the proposed rules name it")
	if pos, err := parseFlags(fs, args); err != nil || len(pos) > 0 || *logFile == "" {
		fmt.Fprintln(stderr, "usage: egressd suggest --log FILE [--identity ID]")
		return exitUsage
	}
	entries, ok := readEntries(*logFile, stderr)
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
	if pos, err := parseFlags(fs, args); err != nil || len(pos) > 0 || *logFile == "" {
		fmt.Fprintln(stderr, "usage: egressd replay [--config FILE] --log FILE [--fail-on-loosen]")
		return exitUsage
	}
	p, err := loadPolicy(*cfg)
	if err != nil {
		printConfigError(stderr, err)
		return exitUsage
	}
	entries, ok := readEntries(*logFile, stderr)
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
