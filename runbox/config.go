//go:build linux

package runbox

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"syscall"

	"github.com/egressd/egressd/daemon"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/sandbox"
)

// firstIndex..lastIndex are the link indexes run picks from: four digits,
// so no link name is a prefix of another and each run's wall matches its
// own link only.
const (
	firstIndex = 1000
	lastIndex  = 9999
)

// Config is one run.
type Config struct {
	Policy *policy.Policy
	// Logger is egressd's own log on the terminal: warnings and errors.
	// Decision and DNS lines go to LogFile only.
	Logger *slog.Logger
	// LogFile receives every log line (JSON), decisions included; ""
	// means StateDir/run.log.
	LogFile string
	// StateDir holds egressd's CA (shared with serve) and the self-test
	// history.
	StateDir string
	// RunDir holds the records of live runs; "" means DefaultRunDir.
	RunDir string
	// Cred is the unprivileged user CMD runs as.
	Cred *syscall.Credential
	Argv []string
	// Env is the host environment; CleanEnv starts CMD from a minimal
	// one instead, KeepEnv names variables passed through either way (and
	// not warned about).
	Env      []string
	CleanEnv bool
	KeepEnv  []string
	// Honeytokens places canary credentials in CMD's environment and an
	// AWS shared credentials file (also when the policy says honeytokens:
	// true); they are added to StateDir's store, which the gateway watches.
	Honeytokens bool
	// Identity, if set, names the run's sandbox addresses (WithIdentity):
	// decisions are logged as this identity, so trial runs add up.
	Identity string
	// NoTransparent turns off the transparent listeners on the run's link
	// (on by default: the sandbox is egressd's own namespace).
	NoTransparent bool
	// Probe proves the sandbox from inside before CMD starts (cmd wires
	// the self-test catalog); NoProbe skips it, loudly.
	Probe   func(ctx context.Context, t ProbeTarget) daemon.Verdict
	NoProbe bool
	// ReadyExempt lets the probe's own connections through the proxy
	// before the sandbox is proven (see daemon.Options).
	ReadyExempt func(client, server netip.AddrPort) bool
	Stdin       io.Reader
	Stdout      io.Writer
	Stderr      io.Writer
	// Self is the egressd binary to re-execute into the namespace
	// ("/proc/self/exe" when empty).
	Self string
}

// ProbeTarget is the sandbox the probe runs in, and the gateway it sees.
type ProbeTarget struct {
	Name       string // the sandbox namespace's name, its identity in the history
	NS         *sandbox.NS
	Policy     *policy.Policy // the run's policy
	Proxy, DNS netip.AddrPort // as the sandbox reaches them
}

// ExitNotSealed is the exit code of a run whose probe found the sandbox
// not sealed: CMD did not run.
const ExitNotSealed = 3

// NotSealedError says why CMD did not run.
type NotSealedError struct{ Reason string }

func (e *NotSealedError) Error() string {
	return "the sandbox is not sealed, the command did not run: " + e.Reason
}

func verdictReason(v daemon.Verdict) string {
	switch {
	case v.Err != nil:
		return fmt.Sprintf("probe could not run: %v", v.Err)
	case len(v.Leaks) > 0:
		return fmt.Sprintf("probe %s", v.Leaks[0]) + more(len(v.Leaks)-1)
	}
	return "probe found a leak"
}

func more(n int) string {
	if n <= 0 {
		return ""
	}
	return fmt.Sprintf(" (and %d more)", n)
}
