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
