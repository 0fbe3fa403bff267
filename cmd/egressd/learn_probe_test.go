package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// probeOnlyLog holds only egressd's own traffic: the self-test's canary,
// its unlisted CONNECT and a refused publish, and an in-sandbox probe's
// canary, as serve and run log them.
const probeOnlyLog = `{"msg":"decision","identity":"egressd-selftest","method":"GET","host":"canary.example.net","port":80,"path":"/","page_type":"read","decision":"deny","reason":"no-rule"}
{"msg":"decision","identity":"egressd-selftest","method":"CONNECT","host":"egressd-selftest-unlisted.invalid","port":443,"decision":"deny","reason":"no-rule"}
{"msg":"decision","identity":"egressd-selftest","method":"GET","host":"docs.example.org","port":443,"path":"/egressd-selftest","page_type":"read","rule":"docs","decision":"deny","reason":"page-type","inspected":true}
{"msg":"decision","identity":"egressd-probe/agent-a","method":"GET","host":"canary.example.net","port":80,"path":"/","page_type":"read","decision":"deny","reason":"no-rule"}
`

// TestLearningSkipsProbeTraffic: suggest proposes nothing and replay
// decides nothing again from a log of egressd's own probe traffic (before,
// suggest proposed allow rules for the canary and the unlisted name:
// pasting the first turns the canary probe into a real leak); the agent's
// own lines beside them still count, and --with-probes reads them all.
func TestLearningSkipsProbeTraffic(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	log := filepath.Join(dir, "decisions.jsonl")
	os.WriteFile(log, []byte(probeOnlyLog), 0o600)
	code, out, errs := runCmd("suggest", "--log", log)
	if code != exitOK || !strings.Contains(out, "0 hosts") || strings.Contains(out, "\nallow:\n") || strings.Contains(out, "canary") {
		t.Errorf("suggest on probe traffic only: exit %d\n%s%s", code, out, errs)
	}
	cfg := filepath.Join(dir, "open.yaml")
	os.WriteFile(cfg, []byte("version: 1\nallow:\n  - {name: all, hosts: [\"*\"]}\n"), 0o600)
	if code, out, errs := runCmd("replay", "--config", cfg, "--log", log); code != exitOK || strings.Contains(out, "canary") {
		t.Errorf("replay on probe traffic only: exit %d, want 0 (nothing of the agent's to decide again)\n%s%s", code, out, errs)
	}
	if code, out, _ := runCmd("suggest", "--log", log, "--with-probes"); code != exitOK || !strings.Contains(out, "canary.example.net") {
		t.Errorf("suggest --with-probes: exit %d\n%s", code, out)
	}
	agent := `{"msg":"decision","identity":"10.0.0.2","method":"GET","host":"wiki.example.org","port":80,"path":"/","page_type":"read","decision":"deny","reason":"no-rule"}` + "\n"
	os.WriteFile(log, []byte(probeOnlyLog+agent), 0o600)
	if code, out, _ := runCmd("suggest", "--log", log); code != exitOK || !strings.Contains(out, "hosts: [wiki.example.org]") || strings.Contains(out, "canary") {
		t.Errorf("suggest with an agent line: exit %d\n%s", code, out)
	}
}
