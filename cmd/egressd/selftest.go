package main

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/egressd/egressd/ca"
	"github.com/egressd/egressd/daemon"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/selftest"
	"github.com/egressd/egressd/selftest/plan"
	"github.com/egressd/egressd/selftest/probens"
)

func init() { commands["selftest"] = cmdSelftest }

func cmdSelftest(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("selftest", stderr)
	cfg := configFlag(fs)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	stateDir := fs.String("state-dir", defaultStateDir(), "directory holding egressd's CA and the self-test history")
	if pos, err := parseFlags(fs, args); err != nil || len(pos) > 0 {
		fmt.Fprintln(stderr, "usage: egressd selftest [--config FILE] [--json] [--state-dir DIR]")
		return exitUsage
	}
	p, err := loadPolicy(*cfg)
	if err != nil {
		printConfigError(stderr, err)
		return exitUsage
	}
	rep, mode, err := runSelftest(ctx, p, *stateDir, true, true)
	if err != nil {
		fmt.Fprintf(stderr, "egressd selftest: could not run: %v\n", err)
		return exitUsage
	}
	if err := recordRun(*stateDir, "selftest", mode, p, rep); err != nil {
		fmt.Fprintf(stderr, "egressd selftest: %v\n", err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetEscapeHTML(false)
		enc.Encode(rep)
	} else {
		rep.WriteTable(stdout)
	}
	if mode == probens.ModeLoopback && os.Geteuid() != 0 {
		fmt.Fprintln(stderr, "egressd selftest: not root: only the probes through the proxy and the resolver ran, from loopback; the direct-route probes need a probe namespace: run `sudo egressd selftest`")
	}
	switch rep.Outcome() {
	case selftest.OutcomeSealed:
		return exitOK
	case selftest.OutcomeLeak:
		return exitDeny
	}
	return exitUsage
}

// wireSelftest connects the self-test to serve: boot, reload and schedule
// all run the catalog (from a probe namespace as root; from loopback, with
// the direct-route probes reported as not run, otherwise), append the run
// to the history, and turn the report into the daemon's verdict. An
// incomplete run is never a sealed one.
func wireSelftest(opt *daemon.Gateway, stateDir string) {
	if opt.NoSelftest {
		return
	}
	log := opt.Logger
	walls := opt.WallsSpec != nil
	opt.ProxyConfig.ReadyExempt = probens.Conns.Has
	opt.Verify = func(ctx context.Context, p *policy.Policy) daemon.Verdict {
		rep, mode, err := runSelftest(ctx, p, stateDir, walls, false)
		v := probens.Verdict(rep, err)
		if err == nil {
			// the daemon counts and shows a history it cannot write
			v.HistoryErr = recordRun(stateDir, "serve", mode, p, rep)
		}
		if rep != nil && log != nil {
			for _, r := range rep.Untestables() {
				log.LogAttrs(ctx, slog.LevelWarn, "self-test probe untestable live", slog.String("probe", r.ID),
					slog.String("route", r.Route), slog.String("target", r.Target), slog.String("result", r.Result), slog.String("detail", r.Detail))
			}
		}
		if rep != nil && log != nil && !v.Sealed {
			for _, r := range append(rep.Failures(), rep.Unfinished()...) {
				log.LogAttrs(ctx, slog.LevelError, "self-test probe", slog.String("probe", r.ID), slog.String("status", string(r.Status)),
					slog.String("route", r.Route), slog.String("target", r.Target), slog.String("result", r.Result), slog.String("detail", r.Detail))
			}
		}
		return v
	}
	opt.Controls = func(ctx context.Context, p *policy.Policy) daemon.Verdict {
		// an outage's retries: the positive controls alone, from where the
		// self-test runs them
		return probens.Verdict(probens.Controls(ctx, p, selftestRoots(p, stateDir), walls))
	}
}

// runSelftest runs the catalog for p, trusting egressd's own CA in
// stateDir too (inspected rules).
func runSelftest(ctx context.Context, p *policy.Policy, stateDir string, namespace, remote bool) (*selftest.Report, string, error) {
	return probens.Run(ctx, p, selftestRoots(p, stateDir), namespace, remote)
}

// selftestRoots are the self-test's trust roots: the upstreams' and
// egressd's own CA in stateDir (inspected rules).
func selftestRoots(p *policy.Policy, stateDir string) *x509.CertPool {
	return plan.TrustRoots(p, filepath.Join(stateDir, "ca", ca.CertFile))
}

// recordRun appends a run to the history in stateDir.
func recordRun(stateDir, source, mode string, p *policy.Policy, rep *selftest.Report) error {
	return selftest.AppendHistory(stateDir, selftest.HistoryLine{Source: source, Mode: mode, Config: p.Source, Report: rep})
}
