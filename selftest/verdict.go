package selftest

// Verdict is the outcome of a verification (self-test) run.
type Verdict struct {
	Sealed bool     // no leak found
	Leaks  []string // ids of the probes that leaked, with their reason
	// ControlsFailed are the positive controls that could not reach their
	// target: not sealed (nothing is proven), but not a leak either.
	ControlsFailed []string
	// Untestable are the probes an upstream outage left untested live
	// (the policy decides them offline): never a leak, and they do not
	// take Sealed away.
	Untestable []string
	Err        error  // the run could not complete (counts as not sealed)
	Note       string // what a sealed run did not cover (shown in /readyz)
	// Incomplete: no leak found, but probes did not run or could not
	// tell (an upstream did not answer): not a proof, and not a leak.
	Incomplete bool
	// HistoryErr: the run could not be written to the self-test history
	// (a read-only or full state directory): evidence lost, shown.
	HistoryErr error
}

// Leaked reports whether the verdict holds evidence of a leak (a probe
// got past the policy or the walls). A failed positive control, an
// untestable probe or a run that could not complete is an outage, not a
// leak: Leaked is false for them.
func (v Verdict) Leaked() bool { return len(v.Leaks) > 0 }
