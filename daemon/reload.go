package daemon

// The reload: a new policy is loaded, verified beside the one in force (its
// walls tried on the probe link alone) and swapped in, or dropped; under
// --no-selftest it is applied unverified and rolled back if it cannot be.

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"weak"

	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/selftest"
)

// load reads a policy with the collector kept close behind the heap, then
// hands the load's garbage back to the system.
//
// The collector normally lets the heap grow to twice what was live at its
// last cycle (GOGC=100); a load builds a policy as large as the one in
// force while that one keeps serving, so a reload of a million-host
// policy peaked at twice both (bench/RESULTS.md). While it loads, egressd
// collects when the heap has grown by loadGCPercent instead: the host
// index and lists hold no pointers, so those cycles cost little (the YAML
// parser's nodes of hosts written inline in the config do: CPU for
// memory). Afterwards FreeOSMemory returns what the load freed: the Go
// runtime would otherwise keep it mapped long after.
func load(f func() (*policy.Policy, error)) (*policy.Policy, error) {
	if prev := debug.SetGCPercent(loadGCPercent); prev >= 0 && prev < loadGCPercent {
		debug.SetGCPercent(prev) // an operator's lower GOGC stands
	} else {
		defer debug.SetGCPercent(prev)
	}
	p, err := f()
	debug.FreeOSMemory()
	return p, err
}

// loadGCPercent is the collector's GOGC while a policy loads: with 1M
// hosts in hosts files, 20 took a reload's peak RSS from 244-249 MiB to
// 206-207 MiB at about the same CPU (100, 25 and 20 measured).
const loadGCPercent = 20

// Reload is the verified reload: parse, then verify the candidate beside
// the policy in force (sandboxes keep being decided by the verified
// policy and judged by the walls in force; only the self-test's own
// connections meet the candidate, and its probe link the candidate's
// walls), then swap atomically, or drop the candidate and say why. A
// config that does not parse, or does not change the policy, changes
// nothing. Triggers that
// arrive while a reload runs coalesce into one more reload, which reads
// the config as it is then; every caller gets the result of the round it
// joined.
func (d *Daemon) Reload(ctx context.Context, why string) error {
	d.nextMu.Lock()
	r := d.next
	lead := r == nil
	if lead {
		r = &reloadRound{done: make(chan struct{})}
		d.next = r
	}
	d.nextMu.Unlock()
	if !lead {
		select {
		case <-r.done:
			return r.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	d.reloadMu.Lock()
	d.nextMu.Lock()
	d.next = nil // from here a trigger is newer than the config this round reads
	d.nextMu.Unlock()
	r.err = d.reload(ctx, why)
	d.reloadMu.Unlock()
	close(r.done)
	// Whichever of the old and the new policy lost is garbage now: give
	// its memory back rather than keep it mapped until the next load.
	debug.FreeOSMemory()
	return r.err
}

// reloadRound is one reload and the triggers it answers.
type reloadRound struct {
	done chan struct{}
	err  error
}

// reload runs one round; the caller holds reloadMu.
func (d *Daemon) reload(ctx context.Context, why string) error {
	next, err := load(d.opt.Load)
	if err != nil {
		d.reloads.WithLabelValues("invalid").Inc()
		d.log.Error("reload rejected: the old policy stays in force", "trigger", why, "err", err)
		return fmt.Errorf("reload: %w", err)
	}
	old := d.Policy()
	if ready, _ := d.Ready(); ready && next.Same(old) {
		d.reloads.WithLabelValues("unchanged").Inc()
		d.log.Info("reload: the config did not change the policy: nothing to verify", "trigger", why, "config", next.Source)
		return nil
	}
	if next.Listen != old.Listen || next.Tools.Listen != old.Tools.Listen {
		d.log.Warn("reload: listen addresses changed; they take effect on restart", "old", old.Listen, "new", next.Listen)
	}
	if d.opt.NoSelftest {
		err = d.reloadUnverified(ctx, why, old, next)
	} else {
		err = d.reloadBeside(ctx, why, next, d.opt.Walls != nil && !d.opt.Walls.Same(old, next))
	}
	if err == nil && next.Selftest.Interval != old.Selftest.Interval {
		select {
		case d.interval <- struct{}{}:
		default: // Run has one pending already and reads the policy
		}
	}
	return err
}

// reloadBeside verifies next beside the policy in force: the proxy and the
// DNS filter decide the self-test's own connections with next, everyone
// else with the verified policy. When next needs other walls (tryWalls),
// they are put on the self-test's probe link alone while it runs
// (Walls.Try, called by the run once its link is wired); every sandbox
// keeps the walls in force. Sealed: next's walls go in force for everyone
// (one transaction, the trial with it), then one swap puts next in force
// (and decides the open tunnels again). Not sealed: the trial is taken off
// the probe link and next is dropped; nothing else changed, so nothing was
// refused and there is nothing to roll back.
func (d *Daemon) reloadBeside(ctx context.Context, why string, next *policy.Policy, tryWalls bool) error {
	d.setCandidate(next)
	vctx := ctx
	var tried atomic.Bool
	if tryWalls {
		vctx = selftest.WithProbeLink(ctx, func(iface string) error {
			tried.Store(true)
			return d.opt.Walls.Try(ctx, next, iface)
		})
	}
	if testHookSwapped != nil {
		testHookSwapped()
	}
	v := d.verify(vctx, "reload", next)
	d.setCandidate(nil)
	cause := verdictError(v)
	if v.Sealed && v.Err == nil {
		cause = nil
	}
	if tryWalls && cause == nil && !tried.Load() {
		cause = errors.New("its walls differ and were not tried: the self-test built no probe link to try them on (walls need root)")
	}
	if tryWalls && cause == nil {
		if err := d.opt.Walls.Apply(ctx, next); err != nil {
			cause = fmt.Errorf("its tried walls could not be put in force (the walls in force stand): %w", err)
		}
	}
	if cause != nil {
		if tryWalls {
			if err := d.opt.Walls.EndTry(ctx); err != nil {
				return d.trialStuck(why, cause, err)
			}
		}
		d.reloads.WithLabelValues("dropped").Inc()
		d.log.Error("reload refused: the candidate failed its self-test and was dropped; the verified policy and walls stay in force", "trigger", why, "err", cause)
		return fmt.Errorf("reload refused, candidate dropped: %w", cause)
	}
	d.swap(next, v)
	d.reloads.WithLabelValues("applied").Inc()
	d.log.Info("reload applied", "trigger", why, "config", next.Source, "rules", len(next.Rules))
	return nil
}

// trialStuck is a dropped candidate whose walls could not be taken off the
// probe link: the next self-test would judge those walls there, not the
// ones in force, so nothing is let through until a self-test passes (the
// drift check removes a trial it finds).
func (d *Daemon) trialStuck(why string, cause, err error) error {
	d.ready.Store(false)
	d.setStatus("not ready: a reload's candidate was dropped (" + cause.Error() + ") but its walls could not be taken off the probe link: " + err.Error())
	d.reloads.WithLabelValues("rollback-failed").Inc()
	d.log.Error("reload dropped, and its walls could not be taken off the probe link: nothing is let through until a self-test passes", "trigger", why, "err", cause, "end_trial_err", err)
	return fmt.Errorf("reload refused, candidate dropped: %w; taking its walls off the probe link failed: %w", cause, err)
}

// setCandidate shows p (nil: none) to the self-test's own connections.
func (d *Daemon) setCandidate(p *policy.Policy) {
	d.cand.Store(p)
	d.px.SetCandidate(p)
}

// swap puts a verified policy in force. The retired policy was verified
// too: a request it decided an instant before the swap still passes the
// gate, so the swap refuses nothing.
func (d *Daemon) swap(next *policy.Policy, v Verdict) {
	if prev := d.verified.Load(); prev != nil {
		w := weak.Make(prev)
		d.retired.Store(&w)
	}
	d.verified.Store(next)
	d.pol.Store(next)
	d.px.SetPolicy(next)
	d.probes.setPolicy(next)
	d.setReadiness(next, v)
}

// reloadUnverified is a reload without a self-test (--no-selftest): next
// goes in force with its walls at once, as the boot's policy did; one
// whose walls cannot be applied is rolled back.
func (d *Daemon) reloadUnverified(ctx context.Context, why string, old, next *policy.Policy) error {
	wasStatus := *d.status.Load()
	d.verified.Store(next) // nothing to wait for: it serves once in force
	if err := d.apply(ctx, next); err != nil {
		return d.rollback(ctx, why, old, wasStatus, fmt.Errorf("applying the walls: %w", err))
	}
	d.reloads.WithLabelValues("applied").Inc()
	d.log.Info("reload applied", "trigger", why, "config", next.Source, "rules", len(next.Rules))
	return nil
}

// rollback restores old after an unverified reload whose walls could not
// be applied. If the walls cannot be restored either, their state is
// unknown: egressd stops letting anything through (and, with no
// self-test to prove them again, stays so until a restart).
func (d *Daemon) rollback(ctx context.Context, why string, old *policy.Policy, wasStatus string, cause error) error {
	d.verified.Store(old)
	if err := d.apply(ctx, old); err != nil {
		d.ready.Store(false)
		d.setStatus("not ready: a reload failed (" + cause.Error() + ") and so did its rollback: " + err.Error())
		d.reloads.WithLabelValues("rollback-failed").Inc()
		d.log.Error("reload failed and its rollback failed too: nothing is let through until a restart (no self-test runs to prove the walls again)", "trigger", why, "err", cause, "rollback_err", err)
		return fmt.Errorf("reload rolled back: %w; the rollback failed: %w", cause, err)
	}
	d.setStatus(wasStatus)
	d.reloads.WithLabelValues("rolled-back").Inc()
	d.log.Error("reload rolled back: the old policy stays in force", "trigger", why, "err", cause)
	return fmt.Errorf("reload rolled back: %w", cause)
}

// verdictError says why a verdict keeps a policy out: the self-test could
// not run, or the leaks it found.
func verdictError(v Verdict) error {
	if v.Err != nil {
		return fmt.Errorf("the self-test could not run: %w", v.Err)
	}
	if len(v.Leaks) == 0 && len(v.ControlsFailed) > 0 {
		return fmt.Errorf("control-failed: a positive control could not reach its target, so the new policy is not proven (not a leak): %s", strings.Join(v.ControlsFailed, "; "))
	}
	return fmt.Errorf("the new policy leaks: %s", strings.Join(v.Leaks, "; "))
}

// testHookSwapped, when set (tests), runs in Reload right after the
// candidate is shown to the self-test and before its self-test: a request
// there must not be allowed by the unverified policy.
var testHookSwapped func()

// apply puts p and its walls in force without a self-test
// (reloadUnverified and its rollback).
func (d *Daemon) apply(ctx context.Context, p *policy.Policy) error {
	d.pol.Store(p)
	d.px.SetPolicy(p)
	d.probes.setPolicy(p)
	if d.opt.Walls != nil {
		return d.opt.Walls.Apply(ctx, p)
	}
	return nil
}
