package report

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/policy"
)

// TestProbeTrafficIsNotASandbox: decisions logged under egressd-selftest
// or egressd-probe/… are counted apart and appear in no sandbox table.
func TestProbeTrafficIsNotASandbox(t *testing.T) {
	log := `{"time":"2026-11-30T10:00:01Z","msg":"decision","identity":"egressd-selftest","method":"GET","host":"169.254.169.254","port":80,"decision":"deny","reason":"high-risk","high_risk":true}
{"time":"2026-11-30T10:00:02Z","msg":"decision","identity":"egressd-probe/agent-a","method":"POST","host":"app.example","port":443,"page_type":"login","decision":"deny","reason":"page-type"}
{"time":"2026-11-30T10:00:03Z","msg":"decision","identity":"agent-a","method":"GET","host":"169.254.169.254","port":80,"decision":"deny","reason":"high-risk","high_risk":true}
{"time":"2026-11-30T10:00:04Z","msg":"decision","identity":"agent-a","method":"GET","host":"docs.example","port":443,"page_type":"read","decision":"allow","reason":"allowed"}
`
	dl, err := parseDecisionLog(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	if dl.decisions != 2 || dl.probes != 2 || len(dl.highRisk) != 1 || dl.highRisk[0].Identity != "agent-a" || len(dl.blocked) != 1 {
		t.Errorf("decisions %d, probe %d, high-risk %+v, blocked %d", dl.decisions, dl.probes, dl.highRisk, len(dl.blocked))
	}
	if rows := reachRows(dl); len(rows) != 1 || rows[0].Host != "docs.example" || rows[0].PageTypes[0] != "read" {
		t.Errorf("reached: %+v", rows)
	}
}

// FuzzDecisionLog: any log renders into both forms without a panic.
func FuzzDecisionLog(f *testing.F) {
	f.Add([]byte(`{"time":"2026-11-30T10:00:03Z","msg":"decision","identity":"a|b","host":"h\n","decision":"allow","page_type":"read"}` + "\nnot json\n"))
	f.Add([]byte(`{"msg":"decision","identity":"egressd-probe/","high_risk":true,"page_type":"login"}`))
	p, err := policy.Parse(strings.NewReader("version: 1\n"), "t.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		dl, err := parseDecisionLog(bytes.NewReader(b))
		if err != nil {
			return
		}
		in := Input{Now: time.Unix(0, 0), Policy: p, Log: dl, LogFile: "f"}
		Write(io.Discard, in)
		if err := WriteJSON(io.Discard, in); err != nil {
			t.Fatal(err)
		}
	})
}
