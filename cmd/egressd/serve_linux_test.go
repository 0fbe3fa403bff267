//go:build linux

package main

import (
	"os"
	"slices"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/testnet"
	"github.com/egressd/egressd/internal/testutil"
	"github.com/egressd/egressd/sandbox"
)

// serveProc is an `egressd serve` running in the gateway namespace of a
// test topology.
type serveProc struct {
	logs   *testutil.LogWatch
	exited chan struct{}
	proc   *os.Process
}

// startServeIn starts `egressd serve args...` in topo's gateway and waits
// for its "ready" log line: listeners bound, walls applied, boot self-test
// done (or skipped). Stop is registered with t.Cleanup and prints the log
// of a failed test.
func startServeIn(t *testing.T, topo *testnet.Topo, bin string, args ...string) *serveProc {
	t.Helper()
	return startServeWrapped(t, topo, bin, nil, `"msg":"ready"`, args...)
}

// startServeWrapped is startServeIn with serve run under wrap (a command
// that execs the rest of its arguments, e.g. setpriv ... --), waiting for
// a log line containing until.
func startServeWrapped(t *testing.T, topo *testnet.Topo, bin string, wrap []string, until string, args ...string) *serveProc {
	t.Helper()
	cmd := sandbox.NSExecCommand(bin, topo.Gateway.Path(), "", append(append(slices.Clip(wrap), bin, "serve"), args...))
	s := &serveProc{logs: testutil.NewLogWatch(), exited: make(chan struct{})}
	cmd.Stderr = s.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.proc = cmd.Process
	go func() { cmd.Wait(); close(s.exited) }()
	t.Cleanup(func() {
		s.stop()
		if t.Failed() {
			t.Logf("serve logs:\n%s", s.logs.String())
		}
	})
	if _, err := s.wait(until); err != nil {
		t.Fatalf("serve did not log %s: %v\n%s", until, err, s.logs.String())
	}
	return s
}

// wait waits for serve to log a line containing all texts.
func (s *serveProc) wait(texts ...string) (string, error) {
	return s.logs.Wait(60*time.Second, s.exited, texts...)
}

// stop interrupts serve and waits for it to exit; idempotent.
func (s *serveProc) stop() {
	s.proc.Signal(os.Interrupt)
	<-s.exited
}
