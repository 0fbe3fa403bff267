package testutil

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"time"
)

// LogWatch is an io.Writer that collects a process's log and lets a test
// wait until a line containing a given text has been written: the process
// says when it is ready, and the test waits for exactly that, however slow
// the machine.
type LogWatch struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // closed and replaced on every write
}

// NewLogWatch returns an empty LogWatch.
func NewLogWatch() *LogWatch { return &LogWatch{changed: make(chan struct{})} }

// Write appends p and wakes the waiters.
func (w *LogWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	close(w.changed)
	w.changed = make(chan struct{})
	return n, err
}

// String returns everything written so far.
func (w *LogWatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// Wait blocks until the log holds a complete line containing every one of
// texts, or done is closed (the process exited), or timeout passes, and
// returns that line. The timeout is a bound for a wedged process, not a
// synchronisation delay.
func (w *LogWatch) Wait(timeout time.Duration, done <-chan struct{}, texts ...string) (string, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		w.mu.Lock()
		line, ok := findLine(w.buf.String(), texts)
		changed := w.changed
		w.mu.Unlock()
		if ok {
			return line, nil
		}
		select {
		case <-changed:
		case <-done:
			if line, ok := findLine(w.String(), texts); ok {
				return line, nil
			}
			return "", fmt.Errorf("the process exited before logging %q", texts)
		case <-t.C:
			return "", fmt.Errorf("no log line with %q after %v", texts, timeout)
		}
	}
}

// findLine returns the first complete line containing all texts.
func findLine(log string, texts []string) (string, bool) {
	for {
		i := strings.IndexByte(log, '\n')
		if i < 0 {
			return "", false
		}
		line := log[:i]
		log = log[i+1:]
		all := true
		for _, s := range texts {
			if !strings.Contains(line, s) {
				all = false
				break
			}
		}
		if all {
			return line, true
		}
	}
}
