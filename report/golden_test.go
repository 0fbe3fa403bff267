package report

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/testutil"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/selftest"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/ from what the code writes now")

// goldenHistory: an own sealed run, and an in-sandbox probe run that found
// a long-lived key, as they are written to the history file.
const goldenHistory = `{"source":"serve","mode":"namespace","config":"egressd.yaml","report":{"time":"2026-11-30T09:59:00Z","duration_ms":1200,"results":[{"id":"metadata/169.254.169.254:80","route":"metadata","target":"169.254.169.254:80","expected":"refused","status":"pass","result":"403 high-risk","duration_ns":1000000,"leak":false},{"id":"tcp/198.51.100.7:443","route":"direct","target":"198.51.100.7:443","expected":"dropped","status":"pass","result":"no answer","duration_ns":2000000,"leak":false}]}}
{"source":"probe","mode":"sandbox","config":"","identity":"agent-a","report":{"time":"2026-11-30T10:00:00Z","duration_ms":900,"results":[{"id":"canary/http","route":"canary","target":"http://canary.example/","expected":"refused","status":"pass","result":"403 no-rule","duration_ns":1000000,"leak":false}],"credentials":[{"kind":"env-token","name":"GITHUB_TOKEN","location":"env"}]}}
`

const goldenLog = `{"time":"2026-11-30T10:00:01Z","msg":"decision","identity":"egressd-selftest","method":"GET","host":"169.254.169.254","port":80,"decision":"deny","reason":"high-risk","high_risk":true}
{"time":"2026-11-30T10:00:03Z","msg":"decision","identity":"agent-a","method":"GET","host":"169.254.169.254","port":80,"path":"/latest/meta-data/","page_type":"read","decision":"deny","reason":"high-risk","high_risk":true}
{"time":"2026-11-30T10:00:04Z","msg":"decision","identity":"agent-a","method":"GET","host":"docs.example","port":443,"page_type":"read","rule":"docs","decision":"allow","reason":"allowed"}
{"time":"2026-11-30T10:00:05Z","msg":"decision","identity":"agent-a","method":"POST","host":"docs.example","port":443,"path":"/login","page_type":"login","rule":"docs","decision":"deny","reason":"page-type"}
{"time":"2026-11-30T10:00:06Z","msg":"decision","identity":"agent-a","method":"PUT","host":"pypi.example","port":443,"path":"/legacy/","page_type":"publish","rule":"pypi","decision":"deny","reason":"mirror"}
`

const goldenConfig = `version: 1
allow:
  - name: docs
    hosts: [docs.example]
    pages: [read]
  - name: pypi
    hosts: [pypi.example]
    mirror: pypi
identities:
  - name: agent-a
    cidrs: [10.80.0.2/32]
`

// TestReportGolden holds the evidence pack, Markdown and JSON, to
// testdata/report.golden.md and report.golden.json for fixed inputs. The
// pack is what auditors read and scripts parse: a change is a contract
// change (rerun with -update and say why in the commit).
func TestReportGolden(t *testing.T) {
	dir := t.TempDir()
	hist := filepath.Join(dir, selftest.HistoryFile)
	if err := os.WriteFile(hist, []byte(goldenHistory), 0o600); err != nil {
		t.Fatal(err)
	}
	runs, skipped, err := selftest.ReadHistory(hist)
	if err != nil || skipped != 0 {
		t.Fatalf("history: %v, %d lines skipped", err, skipped)
	}
	p, err := policy.Parse(strings.NewReader(goldenConfig), "egressd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dl, err := parseDecisionLog(strings.NewReader(goldenLog))
	if err != nil {
		t.Fatal(err)
	}
	in := Input{
		Now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), Policy: p, Runs: runs, SkippedRuns: skipped, Log: dl, LogFile: "egressd.log",
		WallsTable: "egressd", Walls: "table inet egressd {\n\tcounter drop_direct { packets 3 bytes 180 }\n}\n",
	}
	var md, js bytes.Buffer
	Write(&md, in)
	if err := WriteJSON(&js, in); err != nil {
		t.Fatal(err)
	}
	testutil.Golden(t, filepath.Join("testdata", "report.golden.md"), md.String(), *update)
	testutil.Golden(t, filepath.Join("testdata", "report.golden.json"), js.String(), *update)
}
