// Package suggest reads the decision log of a trial run and helps an
// operator move from learning to enforcing without ever allowing by
// learning: Suggest turns denials into proposed rules that are only
// printed, for review; Replay shows what another policy would decide
// differently on the same traffic. Neither changes a config or a running
// egressd.
package suggest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"

	"github.com/egressd/egressd/event"
	"github.com/egressd/egressd/policy"
)

// Entry is one decision line of the proxy's JSON log (what egressd serve
// writes on stderr, and the audit log repeats).
type Entry = event.Record

// maxLine bounds one log line.
const maxLine = 1 << 20

// Read returns the decision lines of a log; other lines (not JSON, or not
// a decision) are counted in skipped.
func Read(r io.Reader) (entries []Entry, skipped int, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, maxLine)
	for sc.Scan() {
		var e Entry
		if json.Unmarshal(sc.Bytes(), &e) != nil || !e.IsDecision() {
			skipped++
			continue
		}
		entries = append(entries, e)
	}
	if err := sc.Err(); err != nil {
		return entries, skipped, fmt.Errorf("read decision log: %w", err)
	}
	return entries, skipped, nil
}

// who is the identity a line was decided for: the declared identity whose
// view applied, else the identity label the proxy logged.
func who(e *Entry) string {
	if e.View != "" {
		return e.View
	}
	return e.Identity
}

// WithoutProbes returns entries without egressd's own probe traffic (the
// self-test's, an in-sandbox probe's: policy.IsProbeIdentity) and how many
// lines it dropped. Learning from them would propose rules for the
// canary, whose allowing turns the canary probe into a real leak, and
// count refusals no agent met.
func WithoutProbes(entries []Entry) ([]Entry, int) {
	out := entries[:0:0]
	for _, e := range entries {
		if !policy.IsProbeIdentity(e.Identity) {
			out = append(out, e)
		}
	}
	return out, len(entries) - len(out)
}
