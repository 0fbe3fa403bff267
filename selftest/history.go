package selftest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// HistoryFile, in the state directory, gets one JSON line per run
// (selftest command, serve, and in-sandbox probes reported to serve);
// `egressd report` reads it.
const HistoryFile = "selftest-history.jsonl"

// Bounds of the history: what a sandbox posting results can make egressd
// keep. A record is capped after encoding (JSON escapes "<" to six bytes:
// a 1 MiB post of them was a 5.8 MB line); the file is capped in all, and
// when it is over, each source (egressd's own runs, each sandbox identity)
// keeps a ring of its newest records, leaks before passes.
const (
	maxHistoryRecord = 64 << 10

	historyRing = 256 // records kept per source when the file is compacted
	// maxHistoryLine bounds a line the reader parses; longer ones (an
	// older egressd's) are skipped and counted, never fatal.
	maxHistoryLine = 1 << 20
)

// maxHistoryBytes caps the history file (a variable for tests).
var maxHistoryBytes int64 = 32 << 20

// HistoryLine is one line of the history file.
type HistoryLine struct {
	Source string  `json:"source"` // "selftest", "serve", or "probe" (in-sandbox)
	Mode   string  `json:"mode"`   // where the probes ran: namespace, loopback, or sandbox
	Config string  `json:"config"` // the config file the run tested
	Report *Report `json:"report"`
	// Identity is the sandbox an in-sandbox probe ran in, as the proxy
	// identified it by its source ("" for egressd's own runs).
	Identity string `json:"identity,omitempty"`
}

// AppendHistory appends a line to the history in stateDir: encoded within
// maxHistoryRecord (shrunk if need be, its outcome kept), and the file
// compacted to a ring per source once it is over maxHistoryBytes.
func AppendHistory(stateDir string, h HistoryLine) error {
	b, err := encodeHistoryLine(h)
	if err != nil {
		return fmt.Errorf("record self-test history: %w", err)
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return fmt.Errorf("record self-test history in %s: %w", stateDir, err)
	}
	path := filepath.Join(stateDir, HistoryFile)
	if st, err := os.Stat(path); err == nil && st.Size()+int64(len(b)) > maxHistoryBytes {
		if err := compactHistory(path); err != nil {
			return fmt.Errorf("compact self-test history %s: %w", path, err)
		}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("record self-test history in %s: %w", stateDir, err)
	}
	// One write per line: O_APPEND keeps concurrent runs' lines whole.
	_, werr := f.Write(b)
	return errors.Join(werr, f.Close())
}

// encodeHistoryLine is h as one line of at most maxHistoryRecord bytes.
// An oversized report is shrunk in steps (texts clipped, then only the
// probes that did not pass, then only a count of them) so that a leak it
// records is never lost for its size.
func encodeHistoryLine(h HistoryLine) ([]byte, error) {
	for step := 0; ; step++ {
		b, err := json.Marshal(h)
		if err != nil {
			return nil, err
		}
		if len(b)+1 <= maxHistoryRecord {
			return append(b, '\n'), nil
		}
		if h.Report == nil || step > 3 {
			return nil, fmt.Errorf("a history record of %d bytes is over the %d-byte cap", len(b), maxHistoryRecord)
		}
		r := *h.Report
		h.Report = &r
		h.Source, h.Mode, h.Config, h.Identity = clip(h.Source, 64), clip(h.Mode, 64), clip(h.Config, 512), clip(h.Identity, 256)
		r.shrink(step)
	}
}

// shrink makes a report smaller for the history, keeping its outcome:
// step 0 clips every text, 1 keeps only the probes that did not pass,
// 2 keeps one per status with a count in its Result, 3 drops credentials.
func (r *Report) shrink(step int) {
	switch step {
	case 0:
		rs := make([]Result, len(r.Results))
		for i, x := range r.Results {
			x.ID, x.Route, x.Target, x.Expected, x.Result, x.Detail = clip(x.ID, 128), clip(x.Route, 64), clip(x.Target, 128), clip(x.Expected, 64), clip(x.Result, 128), clip(x.Detail, 256)
			rs[i] = x
		}
		r.Results = rs
		cs := make([]Credential, min(len(r.Credentials), 64))
		for i := range cs {
			c := r.Credentials[i]
			cs[i] = Credential{Kind: clip(c.Kind, 64), Name: clip(c.Name, 128), Location: clip(c.Location, 256)}
		}
		r.Credentials = cs
	case 1:
		var keep []Result
		for _, x := range r.Results {
			if x.Status != Pass && len(keep) < 256 {
				keep = append(keep, x)
			}
		}
		r.Results = keep
	case 2:
		n := map[Status]int{}
		var keep []Result
		for _, x := range r.Results {
			if n[x.Status]++; n[x.Status] == 1 {
				keep = append(keep, x)
			}
		}
		for i := range keep {
			keep[i].Result = fmt.Sprintf("%d probes with status %s (shrunk for the history)", n[keep[i].Status], keep[i].Status)
			keep[i].Detail = ""
		}
		r.Results = keep
	default:
		r.Credentials = nil
	}
}

// compactHistory rewrites the history as a ring per source: each source
// (egressd's own runs; each sandbox identity) keeps its newest records,
// leaks first, halving the ring until the file is under half its cap.
// Unreadable lines are dropped. The rewrite is atomic (rename).
func compactHistory(path string) error {
	runs, _, err := ReadHistory(path)
	if err != nil {
		return err
	}
	ring := historyRing
	for ; ring > 1; ring /= 2 {
		var buf bytes.Buffer
		for _, h := range keepRing(runs, ring) {
			b, err := encodeHistoryLine(h)
			if err != nil {
				continue
			}
			buf.Write(b)
		}
		if int64(buf.Len()) <= maxHistoryBytes/2 || ring == 2 {
			tmp := path + ".tmp"
			if err := os.WriteFile(tmp, buf.Bytes(), 0o600); err != nil {
				return err
			}
			return os.Rename(tmp, path)
		}
	}
	return nil
}

// keepRing keeps, per source, the newest n records that found a leak and
// the newest n others, in their order.
func keepRing(runs []HistoryLine, n int) []HistoryLine {
	type key struct {
		source string
		leak   bool
	}
	left := map[key]int{}
	keep := make([]bool, len(runs))
	for i := len(runs) - 1; i >= 0; i-- {
		h := runs[i]
		k := key{h.Source + "\x00" + h.Identity, h.Report.Outcome() == OutcomeLeak}
		if left[k] < n {
			left[k]++
			keep[i] = true
		}
	}
	var out []HistoryLine
	for i, h := range runs {
		if keep[i] {
			out = append(out, h)
		}
	}
	return out
}

// ReadHistory reads the history file, oldest first. A line that does not
// parse, or is longer than any record egressd writes, is skipped and
// counted: no line stops the report.
func ReadHistory(path string) (runs []HistoryLine, skipped int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, fmt.Errorf("open self-test history: %w", err)
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 64<<10)
	for {
		line, long, rerr := readLine(br, maxHistoryLine)
		if len(line) > 0 || long {
			var h HistoryLine
			if long || json.Unmarshal(line, &h) != nil || h.Report == nil {
				skipped++
			} else {
				runs = append(runs, h)
			}
		}
		if rerr == io.EOF {
			return runs, skipped, nil
		}
		if rerr != nil {
			return runs, skipped, fmt.Errorf("read self-test history %s: %w", path, rerr)
		}
	}
}

// readLine reads one line (without its newline); a line over max is
// discarded to its end and reported as long.
func readLine(br *bufio.Reader, max int) (line []byte, long bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		if !long {
			if len(line)+len(chunk) > max+1 {
				long, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		return bytes.TrimRight(line, "\r\n"), long, err
	}
}
