package probe

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/egressd/egressd/selftest"
)

// TestScanCredentials: planted keys are found by name and location, and
// no value appears anywhere in what the scan returns.
func TestScanCredentials(t *testing.T) {
	home := t.TempDir()
	secrets := []string{"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "ghp_0123456789abcdefghijABCDEFGHIJ012345", "MC4CAQAwBQYDK2VwBCIEIEXAMPLEPRIVATEKEYBYTES", "hunter2hunter2"}
	write := func(rel, body string) {
		p := filepath.Join(home, rel)
		os.MkdirAll(filepath.Dir(p), 0o700)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(".aws/credentials", "[default]\naws_access_key_id = AKIAIOSFODNN7EXAMPLE\naws_secret_access_key = "+secrets[0]+"\n[ci]\naws_access_key_id = x\n")
	write(".ssh/id_ed25519", "-----BEGIN OPENSSH PRIVATE KEY-----\n"+secrets[2]+"\n-----END OPENSSH PRIVATE KEY-----\n")
	write(".ssh/id_ed25519.pub", "ssh-ed25519 AAAAC3Nza public\n")
	write(".ssh/known_hosts", "example.org ssh-ed25519 AAAA\n")
	write(".netrc", "machine example.org login me password "+secrets[3]+"\n")
	write(".docker/config.json", "") // empty: nothing to carry out
	env := []string{"PATH=/usr/bin", "GH_PAT=" + secrets[1], "DB_PASSWORD=" + secrets[3], "HOME=" + home, "EMPTY_TOKEN=", "SHORT_TOKEN=abc"}

	got := ScanCredentials(env, home)
	type f struct{ kind, name, loc string }
	var have []f
	for _, c := range got {
		have = append(have, f{c.Kind, c.Name, c.Location})
	}
	want := []f{
		{"aws-credentials", "default,ci", filepath.Join(home, ".aws/credentials")},
		{"netrc", ".netrc", filepath.Join(home, ".netrc")},
		{"private-key", "id_ed25519", filepath.Join(home, ".ssh/id_ed25519")},
		{"env-token", "GH_PAT", "env"},
		{"env-secret-name", "DB_PASSWORD", "env"},
	}
	for _, w := range want {
		if !slices.Contains(have, w) {
			t.Errorf("scan lacks %+v; got %+v", w, have)
		}
	}
	if len(have) != len(want) {
		t.Errorf("scan found %d, want %d: %+v", len(have), len(want), have)
	}
	b, _ := json.Marshal(&selftest.Report{Credentials: got})
	for _, s := range append(secrets, "AKIAIOSFODNN7EXAMPLE") {
		if strings.Contains(string(b), s) {
			t.Errorf("a secret value is in the report: %s", s)
		}
	}
	if got := ScanCredentials(nil, t.TempDir()); len(got) != 0 {
		t.Errorf("clean sandbox: %+v", got)
	}
}
