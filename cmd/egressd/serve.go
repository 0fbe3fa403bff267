package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/egressd/egressd/daemon"
	"github.com/egressd/egressd/event"
	"github.com/egressd/egressd/nft"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/selftest"
)

func init() { commands["serve"] = cmdServe }

// defaultStateDir is where the CA and the self-test history live.
func defaultStateDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/egressd"
	}
	if d, err := os.UserConfigDir(); err == nil {
		return filepath.Join(d, "egressd")
	}
	return ".egressd"
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: %w", level, err)
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l, ReplaceAttr: event.ReadableDurations})), nil
}

func cmdServe(ctx context.Context, args []string, _, stderr io.Writer) int {
	fs := newFlagSet("serve", stderr)
	cfg := configFlag(fs)
	stateDir := fs.String("state-dir", defaultStateDir(), "directory for egressd's CA and self-test history")
	noSelftest := fs.Bool("no-selftest", false, "run no self-test: /readyz stays 503 and the proxy refuses everything, unless --allow-unverified is given too")
	allowUnverified := fs.Bool("allow-unverified", false, "with --no-selftest: serve unverified anyway (a warning at every start and in /readyz; egressd_verified 0)")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	wallsEvery := fs.Duration("walls-interval", 30*time.Second, "how often --walls reads the table back and repairs drift")
	auditLog := fs.String("audit-log", "", "also append every decision to FILE as a hash-chained line (egressd audit verify FILE)")
	walls := fs.Bool("walls", false, "apply the nftables walls for the config's sandbox settings in this namespace (root), keep them in sync, and leave them in place on exit")
	if pos, err := parseFlags(fs, args); err != nil || len(pos) > 0 {
		fmt.Fprintln(stderr, "usage: egressd serve [--config FILE] [--state-dir DIR] [--walls] [--walls-interval D] [--audit-log FILE] [--log-level L] [--no-selftest [--allow-unverified]]")
		return exitUsage
	}
	log, err := newLogger(stderr, *level)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	g := daemon.Gateway{Options: daemon.Options{
		Load: func() (*policy.Policy, error) {
			p, err := loadPolicy(*cfg)
			if err == nil {
				for _, w := range p.Warnings() { // at start and at every reload
					log.Warn("config warning", "config", p.Source, "warning", w)
				}
			}
			return p, err
		},
		Logger:          log,
		NoSelftest:      *noSelftest,
		AllowUnverified: *allowUnverified,
		ProbeResult: func(r daemon.ProbeResult) error {
			return selftest.AppendHistory(*stateDir, selftest.HistoryLine{Source: "probe", Mode: "sandbox", Identity: r.Identity, Report: r.Report})
		},
	}, StateDir: *stateDir, AuditLog: *auditLog}
	if *walls {
		g.WallsSpec = func(p *policy.Policy) (nft.Spec, error) { return daemon.WallSpec(p) }
		g.WallsNS = nft.CurrentNamespace
		g.WallsInterval = *wallsEvery
	}
	wireSelftest(&g, *stateDir)
	trackInForce(&g, *cfg, *stateDir)
	d, err := daemon.NewGateway(g)
	if err != nil {
		fmt.Fprintf(stderr, "egressd: %v\n", err)
		return exitUsage
	}
	defer d.Close() // the audit seal, after Run returns
	go d.WatchReload(ctx, *cfg)
	if err := d.Run(ctx, nil); err != nil {
		fmt.Fprintf(stderr, "egressd: %v\n", err)
		return exitUsage
	}
	return exitOK
}
