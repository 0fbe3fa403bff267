package main

import "github.com/egressd/egressd/daemon"

// wireSelftest connects the self-test to serve's boot, reload and schedule.
// Until the probe catalog lands (issue 5) there is nothing to wire, and
// serve requires --no-selftest, which it reports on every start.
func wireSelftest(_ *daemon.Options, _ string) {}
