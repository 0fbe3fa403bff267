package selftest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func historyReport(status Status, detail string) *Report {
	return &Report{Results: []Result{
		{ID: "tcp/a", Status: Pass},
		{ID: "metadata/direct", Status: status, Leak: status == Leak, Detail: detail},
	}}
}

// TestHistoryRecordCapped: a report posted from a sandbox with a 1 MiB
// text of '<' (six bytes each once JSON-escaped) is kept within the
// record cap, and the leak it reports is kept with it.
func TestHistoryRecordCapped(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	big := strings.Repeat("<", 1<<20)
	if err := AppendHistory(dir, HistoryLine{Source: "probe", Identity: "sb", Report: historyReport(Leak, big)}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, HistoryFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > maxHistoryRecord {
		t.Errorf("history line of %d bytes, want at most %d", len(b), maxHistoryRecord)
	}
	runs, skipped, err := ReadHistory(filepath.Join(dir, HistoryFile))
	if err != nil || skipped != 0 || len(runs) != 1 {
		t.Fatalf("read back: %d runs, %d skipped, %v", len(runs), skipped, err)
	}
	if runs[0].Report.Outcome() != OutcomeLeak {
		t.Errorf("outcome %s after shrinking, want leak", runs[0].Report.Outcome())
	}
}

// TestReadHistorySurvivesAnyLine: a line longer than any record (an older
// egressd wrote 5.8 MB ones), garbage and a truncated line are skipped and
// counted; the runs after them, a leak among them, still show.
func TestReadHistorySurvivesAnyLine(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), HistoryFile)
	line := func(h HistoryLine) string {
		b, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		return string(b) + "\n"
	}
	var buf bytes.Buffer
	buf.WriteString(line(HistoryLine{Source: "serve", Report: historyReport(Pass, "")}))
	buf.WriteString(`{"source":"probe","report":{"results":[{"detail":"` + strings.Repeat("\\u003c", 1<<20) + `"}]}}` + "\n")
	buf.WriteString("not json at all\n")
	buf.WriteString(line(HistoryLine{Source: "probe", Identity: "sb", Report: historyReport(Leak, "got out")}))
	buf.WriteString(`{"source":"serve","rep`) // cut short, no newline
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	runs, skipped, err := ReadHistory(path)
	if err != nil {
		t.Fatalf("ReadHistory: %v", err)
	}
	if len(runs) != 2 || skipped != 3 {
		t.Fatalf("%d runs and %d skipped, want 2 and 3", len(runs), skipped)
	}
	if runs[1].Report.Outcome() != OutcomeLeak {
		t.Errorf("the leak after the long line: %s", runs[1].Report.Outcome())
	}
}

// TestHistoryRing: once the file is over its cap, each source keeps a
// ring of its newest records, leaks apart: one sandbox flooding the
// history cannot push out another's records, nor its own leak.
func TestHistoryRing(t *testing.T) {
	t.Parallel()
	old := maxHistoryBytes
	maxHistoryBytes = 256 << 10
	t.Cleanup(func() { maxHistoryBytes = old })
	dir := t.TempDir()
	app := func(h HistoryLine) {
		t.Helper()
		if err := AppendHistory(dir, h); err != nil {
			t.Fatal(err)
		}
	}
	app(HistoryLine{Source: "serve", Report: historyReport(Pass, "")})
	app(HistoryLine{Source: "probe", Identity: "flood", Report: historyReport(Leak, "the flood's own leak")})
	app(HistoryLine{Source: "probe", Identity: "quiet", Report: historyReport(Pass, "")})
	pad := strings.Repeat("x", 2000)
	for range 2000 { // ~4 MiB offered, 16 times the cap
		app(HistoryLine{Source: "probe", Identity: "flood", Report: historyReport(Pass, pad)})
	}
	path := filepath.Join(dir, HistoryFile)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() > maxHistoryBytes {
		t.Errorf("history of %d bytes, over its cap of %d", st.Size(), maxHistoryBytes)
	}
	runs, _, err := ReadHistory(path)
	if err != nil {
		t.Fatal(err)
	}
	var serve, quiet, floodLeak int
	for _, h := range runs {
		switch {
		case h.Source == "serve":
			serve++
		case h.Identity == "quiet":
			quiet++
		case h.Identity == "flood" && h.Report.Outcome() == OutcomeLeak:
			floodLeak++
		}
	}
	if serve != 1 || quiet != 1 || floodLeak != 1 {
		t.Errorf("after the flood: %d own runs, %d of the quiet sandbox, %d flood leaks; want 1 each", serve, quiet, floodLeak)
	}
}

// FuzzHistoryRecord: whatever report a sandbox posts (its results' texts
// and statuses), its history record is one line within the cap that reads
// back with the same outcome; and no file content stops ReadHistory.
func FuzzHistoryRecord(f *testing.F) {
	f.Add("metadata/direct", "LEAK", strings.Repeat("<", 70000), 3)
	f.Add("tcp/a", "pass", "ok", 1)
	f.Add("\n", "weird", "\x00\xff", 500)
	f.Fuzz(func(t *testing.T, id, status, text string, n int) {
		n = min(max(n, 0), 300)
		r := &Report{}
		for i := range n {
			r.Results = append(r.Results, Result{ID: id, Status: Status(status), Detail: text, Result: text, Leak: i == n-1 && status == string(Leak)})
		}
		r.Clean()
		h := HistoryLine{Source: "probe", Identity: id, Report: r}
		b, err := encodeHistoryLine(h)
		if err != nil {
			t.Fatalf("encode: %v", err)
		}
		if len(b) > maxHistoryRecord || bytes.Count(b, []byte("\n")) != 1 {
			t.Fatalf("record of %d bytes, %d lines", len(b), bytes.Count(b, []byte("\n")))
		}
		path := filepath.Join(t.TempDir(), HistoryFile)
		os.WriteFile(path, append(append([]byte(text+"\n"), b...), text...), 0o600)
		runs, _, err := ReadHistory(path)
		if err != nil {
			t.Fatalf("ReadHistory: %v", err)
		}
		// The probe record reads back with its outcome (its identity may
		// read back cleaned: JSON turns bytes that are not UTF-8 into
		// U+FFFD; and text around it may itself parse as a record).
		found := false
		for _, run := range runs {
			if run.Source == "probe" && run.Report != nil && run.Report.Outcome() == r.Outcome() {
				found = true
			}
		}
		if !found {
			t.Fatalf("read back %+v, want a probe record of outcome %s", runs, r.Outcome())
		}
	})
}
