package selftest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// HistoryFile, in the state directory, gets one JSON line per run
// (selftest command, serve, and in-sandbox probes reported to serve);
// `egressd report` reads it.
const HistoryFile = "selftest-history.jsonl"

// maxHistoryLine bounds one line of the history file.
const maxHistoryLine = 1 << 20

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

// AppendHistory appends a line to the history in stateDir.
func AppendHistory(stateDir string, h HistoryLine) error {
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return fmt.Errorf("record self-test history in %s: %w", stateDir, err)
	}
	f, err := os.OpenFile(filepath.Join(stateDir, HistoryFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("record self-test history in %s: %w", stateDir, err)
	}
	// One write per line: O_APPEND keeps concurrent runs' lines whole.
	_, werr := f.Write(append(b, '\n'))
	return errors.Join(werr, f.Close())
}

// ReadHistory reads the history file, oldest first. A line that does not
// parse is kept as a run with no report, so a damaged history shows.
func ReadHistory(path string) ([]HistoryLine, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open self-test history: %w", err)
	}
	defer f.Close()
	var out []HistoryLine
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, maxHistoryLine)
	for n := 1; sc.Scan(); n++ {
		var h HistoryLine
		if err := json.Unmarshal(sc.Bytes(), &h); err != nil || h.Report == nil {
			out = append(out, HistoryLine{Source: fmt.Sprintf("unreadable line %d", n)})
			continue
		}
		out = append(out, h)
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("read self-test history %s: %w", path, err)
	}
	return out, nil
}
