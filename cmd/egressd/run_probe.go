//go:build linux

package main

import (
	"context"
	"fmt"
	"io"

	"github.com/egressd/egressd/daemon"
	"github.com/egressd/egressd/runbox"
	"github.com/egressd/egressd/selftest"
)

// runProbe is `egressd run`'s proof before CMD: the self-test catalog for
// the run's policy, every probe socket created inside the run's own
// sandbox namespace, the proxy and the resolver as the sandbox sees them.
// The run goes into the self-test history under the sandbox's name.
func runProbe(stateDir string, stderr io.Writer) func(context.Context, runbox.ProbeTarget) daemon.Verdict {
	return func(ctx context.Context, t runbox.ProbeTarget) daemon.Verdict {
		e := nsProbeEnv(t.NS)
		e.proxy, e.proxyDial = t.Proxy, e.dial
		e.dns, e.dnsDial = t.DNS, e.dial
		c := selftestConfig(t.Policy, trustRoots(t.Policy, stateDir))
		e.apply(&c)
		rep, err := selftest.Run(ctx, c)
		if err == nil {
			if herr := recordRun(stateDir, "run", "sandbox "+t.Name, t.Policy, rep); herr != nil {
				fmt.Fprintf(stderr, "egressd run: %v\n", herr)
			}
		}
		return verdict(rep, err)
	}
}
