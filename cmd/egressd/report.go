package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/egressd/egressd/nft"
	"github.com/egressd/egressd/report"
	"github.com/egressd/egressd/selftest"
)

func init() { commands["report"] = cmdReport }

// showWalls reads the kernel walls with their counters; tests replace it.
var showWalls = func() (string, error) { return nft.Show(nft.CurrentNamespace, nft.DefaultTable) }

func cmdReport(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("report", stderr)
	cfg := configFlag(fs)
	stateDir := fs.String("state-dir", defaultStateDir(), "directory holding the self-test history")
	logFile := fs.String("log", "", "decision log `FILE`: the JSON lines egressd serve writes on stderr")
	asJSON := fs.Bool("json", false, "write the evidence pack as JSON instead of Markdown")
	if pos, err := parseFlags(fs, args); err != nil || len(pos) > 0 {
		fmt.Fprintln(stderr, "usage: egressd report [--config FILE] [--state-dir DIR] [--log FILE] [--json]")
		return exitUsage
	}
	p, err := reportPolicy(*cfg, *stateDir, stderr)
	if err != nil {
		printConfigError(stderr, err)
		return exitUsage
	}
	runs, err := selftest.ReadHistory(filepath.Join(*stateDir, selftest.HistoryFile))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(stderr, "egressd report: %v\n", err)
		return exitUsage
	}
	var dl *report.DecisionLog
	if *logFile != "" {
		if dl, err = report.ReadDecisionLog(*logFile); err != nil {
			fmt.Fprintf(stderr, "egressd report: %v\n", err)
			return exitUsage
		}
	}
	walls, wallsErr := showWalls()
	in := report.Input{Now: time.Now().UTC(), Policy: p, Runs: runs, Log: dl, LogFile: *logFile, Walls: walls, WallsErr: wallsErr}
	if *asJSON {
		if err := report.WriteJSON(stdout, in); err != nil {
			fmt.Fprintf(stderr, "egressd report: %v\n", err)
			return exitUsage
		}
		return exitOK
	}
	report.Write(stdout, in)
	return exitOK
}
