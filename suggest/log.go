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
	"time"
)

// Entry is one decision line of the proxy's JSON log (the fields egressd
// serve writes on stderr, and the audit log repeats).
type Entry struct {
	Time      time.Time `json:"time"`
	Msg       string    `json:"msg"`
	Identity  string    `json:"identity"`
	View      string    `json:"view"`
	Method    string    `json:"method"`
	Host      string    `json:"host"`
	Port      int       `json:"port"`
	Path      string    `json:"path"`
	PageType  string    `json:"page_type"`
	Rule      string    `json:"rule"`
	Decision  string    `json:"decision"`
	Reason    string    `json:"reason"`
	HighRisk  bool      `json:"high_risk"`
	Inspected bool      `json:"inspected"`
}

// maxLine bounds one log line.
const maxLine = 1 << 20

// Read returns the decision lines of a log; other lines (not JSON, or not
// a decision) are counted in skipped.
func Read(r io.Reader) (entries []Entry, skipped int, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, maxLine)
	for sc.Scan() {
		var e Entry
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Msg != "decision" {
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
func (e *Entry) who() string {
	if e.View != "" {
		return e.View
	}
	return e.Identity
}
