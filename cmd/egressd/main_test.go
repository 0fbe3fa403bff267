package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runCmd(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestCheckContract(t *testing.T) {
	code, out, _ := runCmd("check", "--json", "http://0xA9FEA9FE/latest/meta-data/")
	var res map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("--json output %q: %v", out, err)
	}
	if code != exitDeny || res["decision"] != "deny" || res["high_risk"] != true || res["addr"] != "169.254.169.254" || res["reason"] != "high-risk" {
		t.Errorf("metadata in hex: exit %d, %v", code, res)
	}
	for _, k := range []string{"decision", "rule", "reason", "page_type", "host", "addr", "high_risk"} {
		if _, ok := res[k]; !ok {
			t.Errorf("--json lacks %q", k)
		}
	}
	if code, out, _ := runCmd("check", "https://pypi.org/simple/requests/"); code != exitOK || !strings.HasPrefix(out, "allow") {
		t.Errorf("pypi index: exit %d %q", code, out)
	}
	if code, _, _ := runCmd("check", "--method", "POST", "https://pypi.org/legacy/"); code != exitDeny {
		t.Errorf("pypi upload: exit %d, want 1", code)
	}
	if code, out, _ := runCmd("check", "pypi.org:443", "--json"); code != exitOK || !strings.Contains(out, `"inspect":true`) {
		t.Errorf("CONNECT pypi.org: exit %d %q", code, out)
	}
	if code, out, _ := runCmd("check", "--json", "http://user@169.254.169.254/"); code != exitDeny || !strings.Contains(out, `"reason":"bad-target"`) {
		t.Errorf("userinfo: exit %d %q", code, out)
	}
	if code, _, _ := runCmd("check"); code != exitUsage {
		t.Errorf("no target: exit %d, want 2", code)
	}
}

func TestValidateContract(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("version: 1\nallow:\n  - hosts: [\"*.com\"]\n    bogus: 1\n"), 0o600)
	code, _, errs := runCmd("validate", "--config", bad)
	if code != exitUsage || !strings.Contains(errs, bad+":3: allow[0].hosts[0]") || !strings.Contains(errs, bad+`:4: allow[0]: unknown key "bogus"`) {
		t.Errorf("broken config: exit %d, stderr %q", code, errs)
	}
	if code, out, _ := runCmd("validate"); code != exitOK || !strings.Contains(out, "ok") {
		t.Errorf("embedded default: exit %d %q", code, out)
	}
	if code, _, _ := runCmd("check", "--config", bad, "http://example.com/"); code != exitUsage {
		t.Errorf("check with a broken config: exit %d, want 2", code)
	}
}
