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
	t.Parallel()
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
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("version: 1\nallow:\n  - hosts: [\"*.com\"]\n    bogus: 1\n"), 0o600)
	code, _, errs := runCmd("validate", "--config", bad)
	if code != exitUsage || !strings.Contains(errs, bad+":3: allow[0].hosts[0]") || !strings.Contains(errs, bad+`:4: allow[0]: unknown key "bogus"`) {
		t.Errorf("broken config: exit %d, stderr %q", code, errs)
	}
	if code, out, _ := runCmd("validate", "--offline"); code != exitOK || !strings.Contains(out, "ok") {
		t.Errorf("embedded default: exit %d %q", code, out)
	}
	if code, _, _ := runCmd("check", "--config", bad, "http://example.com/"); code != exitUsage {
		t.Errorf("check with a broken config: exit %d, want 2", code)
	}
}

func TestCheckIdentity(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(cfg, []byte(`version: 1
identities:
  - {name: research, cidrs: [198.51.100.10/32]}
  - {name: build, cidrs: [198.51.100.20/32]}
deny:
  message: "ask #platform"
allow:
  - name: docs
    hosts: [docs.example.com]
    identities: [research]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, _ := runCmd("check", "--config", cfg, "--identity", "research", "--json", "https://docs.example.com/")
	if code != exitOK || !strings.Contains(out, `"identity":"research"`) || !strings.Contains(out, `"rule":"docs"`) {
		t.Errorf("research: exit %d %s", code, out)
	}
	code, out, _ = runCmd("check", "--config", cfg, "--identity", "build", "https://docs.example.com/")
	if code != exitDeny || !strings.Contains(out, "identity=build") || !strings.Contains(out, "message: ask #platform") {
		t.Errorf("build: exit %d %s", code, out)
	}
	if code, _, _ := runCmd("check", "--config", cfg, "https://docs.example.com/"); code != exitDeny {
		t.Errorf("no identity: exit %d, want deny", code)
	}
	if code, _, errs := runCmd("check", "--config", cfg, "--identity", "nobody", "https://docs.example.com/"); code != exitUsage || !strings.Contains(errs, "not declared") {
		t.Errorf("undeclared identity: exit %d %q", code, errs)
	}
}

func TestInitValidates(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "egressd.yaml")
	if code, _, errs := runCmd("init", "--preset", "pypi,crates,github-read,docs,npm=npm.internal.example", "--sandbox", "kubernetes", "--out", out); code != exitOK {
		t.Fatalf("init: exit %d %s", code, errs)
	}
	if code, stdout, errs := runCmd("validate", "--offline", "--config", out); code != exitOK {
		t.Errorf("validate of the init output: exit %d %s %s", code, stdout, errs)
	}
	if code, _, errs := runCmd("init", "--preset", "pypi", "--out", out); code != exitUsage || !strings.Contains(errs, "exists") {
		t.Errorf("init over an existing file: exit %d %q", code, errs)
	}
	if code, _, errs := runCmd("init", "--preset", "npm"); code != exitUsage || !strings.Contains(errs, "needs a host") {
		t.Errorf("npm without host: exit %d %q", code, errs)
	}
}

func TestSuggestReplayCommands(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	log := filepath.Join(dir, "decisions.jsonl")
	os.WriteFile(log, []byte(`{"msg":"decision","identity":"10.0.0.2","method":"GET","host":"wiki.internal.example","port":80,"path":"/howto","page_type":"read","decision":"deny","reason":"no-rule"}
{"msg":"decision","identity":"10.0.0.2","method":"GET","host":"docs.python.org","port":443,"path":"/3/","page_type":"read","rule":"docs","decision":"allow","reason":"allowed","inspected":true}
`), 0o600)
	code, out, _ := runCmd("suggest", "--log", log)
	if code != exitOK || !strings.Contains(out, "hosts: [wiki.internal.example]") {
		t.Errorf("suggest: exit %d\n%s", code, out)
	}
	looser := filepath.Join(dir, "new.yaml")
	os.WriteFile(looser, []byte("version: 1\nallow:\n  - {name: wiki, hosts: [wiki.internal.example], ports: [80]}\n"), 0o600)
	stricter := filepath.Join(dir, "strict.yaml")
	os.WriteFile(stricter, []byte("version: 1\nallow: []\n"), 0o600)
	for _, tt := range []struct {
		cfg  string
		args []string
		want int
	}{
		{looser, nil, exitDeny},
		{looser, []string{"--fail-on-loosen"}, exitDeny},
		{stricter, nil, exitDeny},                        // docs becomes a deny: a change
		{stricter, []string{"--fail-on-loosen"}, exitOK}, // but nothing is loosened
	} {
		if code, out, errs := runCmd(append([]string{"replay", "--config", tt.cfg, "--log", log}, tt.args...)...); code != tt.want {
			t.Errorf("replay %s %v: exit %d, want %d\n%s%s", filepath.Base(tt.cfg), tt.args, code, tt.want, out, errs)
		}
	}
	if code, _, _ := runCmd("suggest"); code != exitUsage {
		t.Errorf("suggest without --log: exit %d", code)
	}
}

// TestCheckInjectNeverShowsSecret: check reports that a rule injects a
// credential, never the credential or its file's content.
func TestCheckInjectNeverShowsSecret(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	secret := filepath.Join(dir, "token")
	os.WriteFile(secret, []byte("chk-tok-31337\n"), 0o600)
	cfg := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfg, []byte("version: 1\nallow:\n  - name: reg\n    hosts: [registry.internal.example]\n    inject: {prefix: \"Bearer \", value_from: \"file:"+secret+"\"}\n"), 0o600)
	code, out, errs := runCmd("check", "--config", cfg, "--json", "https://registry.internal.example/pkg")
	if code != exitOK || !strings.Contains(out, `"inject":true`) {
		t.Errorf("check: exit %d %s %s", code, out, errs)
	}
	_, text, _ := runCmd("check", "--config", cfg, "https://registry.internal.example/pkg")
	if strings.Contains(out+text+errs, "chk-tok") {
		t.Error("check shows the secret")
	}
}
