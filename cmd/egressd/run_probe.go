//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/egressd/egressd/ca"
	"github.com/egressd/egressd/daemon"
	"github.com/egressd/egressd/runbox"
	"github.com/egressd/egressd/selftest"
	"github.com/egressd/egressd/selftest/plan"
	"github.com/egressd/egressd/selftest/probens"
)

// runProbe is `egressd run`'s proof before CMD: the self-test catalog for
// the run's policy, every probe socket created inside the run's own
// sandbox namespace, the proxy and the resolver as the sandbox sees them.
// The run goes into the self-test history under the sandbox's name.
func runProbe(stateDir string, stderr io.Writer) func(context.Context, runbox.ProbeTarget) daemon.Verdict {
	return func(ctx context.Context, t runbox.ProbeTarget) daemon.Verdict {
		e := probens.NSEnv(t.NS)
		e.InNS(t.Proxy, t.DNS)
		c := plan.Derive(t.Policy, plan.TrustRoots(t.Policy, filepath.Join(stateDir, "ca", ca.CertFile)))
		e.Apply(&c)
		rep, err := selftest.Run(ctx, c)
		if err == nil {
			if herr := recordRun(stateDir, "run", "sandbox "+t.Name, t.Policy, rep); herr != nil {
				fmt.Fprintf(stderr, "egressd run: %v\n", herr)
			}
			// an outage or a rule that can never allow: said, never a leak
			for _, w := range rep.UntestableLines() {
				fmt.Fprintf(stderr, "egressd run: warning: %s\n", w)
			}
		}
		return probens.Verdict(rep, err)
	}
}
