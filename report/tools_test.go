package report

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/policy"
)

// TestToolCallsInReport: fetches made by egressd's tool endpoint (via:
// tool) are sandbox decisions like any other, counted apart in the
// summary, and a high-risk one is marked as a tool call.
func TestToolCallsInReport(t *testing.T) {
	log := `{"time":"2026-11-30T10:00:01Z","msg":"decision","identity":"agent-a","method":"GET","host":"169.254.169.254","port":80,"path":"/latest/","decision":"deny","reason":"high-risk","high_risk":true,"via":"tool"}
{"time":"2026-11-30T10:00:02Z","msg":"decision","identity":"agent-a","method":"GET","host":"docs.example","port":443,"page_type":"read","decision":"allow","reason":"allowed","via":"tool"}
{"time":"2026-11-30T10:00:03Z","msg":"decision","identity":"agent-a","method":"GET","host":"docs.example","port":443,"page_type":"read","decision":"allow","reason":"allowed"}
{"time":"2026-11-30T10:00:04Z","msg":"decision","identity":"egressd-selftest","method":"GET","host":"169.254.169.254","port":80,"decision":"deny","reason":"high-risk","high_risk":true,"via":"tool"}
`
	dl, err := parseDecisionLog(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Parse(strings.NewReader("version: 1\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	in := Input{Now: time.Unix(0, 0), Policy: p, Log: dl, LogFile: "f"}
	var md bytes.Buffer
	Write(&md, in)
	for _, want := range []string{"2 through egressd's fetch tool (1 denied)", "GET 169.254.169.254:80/latest/ (via tool)"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, md.String())
		}
	}
	var js bytes.Buffer
	if err := WriteJSON(&js, in); err != nil {
		t.Fatal(err)
	}
	var pk Pack
	if err := json.Unmarshal(js.Bytes(), &pk); err != nil {
		t.Fatal(err)
	}
	if pk.Decisions.ToolCalls != 2 || pk.Decisions.ToolDenied != 1 || pk.Decisions.HighRisk[0].Via != "tool" {
		t.Errorf("JSON decisions: %+v", pk.Decisions)
	}
}
