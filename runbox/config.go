package runbox

import (
	"io"
	"log/slog"
	"syscall"

	"github.com/egressd/egressd/policy"
)

// NSPrefix names the namespaces `egressd run` creates; CleanupStale
// removes those whose egressd died.
const NSPrefix = "egr"

// TablePrefix starts the name of each run's wall table: TablePrefix+index.
const TablePrefix = "egressd-run-"

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
	Logger *slog.Logger
	// StateDir holds egressd's CA (shared with serve).
	StateDir string
	// Cred is the unprivileged user CMD runs as.
	Cred *syscall.Credential
	Argv []string
	// Env is the environment CMD starts from; Run adds the proxy and CA
	// variables.
	Env            []string
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Self is the egressd binary to re-execute into the namespace
	// ("/proc/self/exe" when empty).
	Self string
}
