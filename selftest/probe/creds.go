package probe

import (
	"bufio"
	"bytes"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/egressd/egressd/selftest"
)

// The credential scan looks for long-lived keys inside the sandbox: what
// an agent could carry out if a wall ever opened. It reports what a key is
// and where it is (kind, name, location), never a value: the report goes
// to egressd and into an evidence pack, and must not become a copy of the
// secret.

// maxScanFile bounds how much of one file the scan reads.
const maxScanFile = 1 << 20

// credFiles are the well-known credential files, relative to the home
// directory, with what each is.
var credFiles = []struct{ path, kind string }{
	{".aws/credentials", "aws-credentials"},
	{".aws/config", "aws-config"},
	{".config/gcloud/application_default_credentials.json", "gcloud-credentials"},
	{".config/gcloud/credentials.db", "gcloud-credentials"},
	{".azure/accessTokens.json", "azure-tokens"},
	{".azure/msal_token_cache.json", "azure-tokens"},
	{".kube/config", "kubeconfig"},
	{".docker/config.json", "docker-config"},
	{".netrc", "netrc"},
	{".git-credentials", "git-credentials"},
	{".config/gh/hosts.yml", "github-cli-token"},
	{".npmrc", "npmrc"},
	{".pypirc", "pypirc"},
}

// sshDir is searched for private keys (any file with a PEM private-key
// header), as are the files of credFiles.
const sshDir = ".ssh"

// tokenName matches environment variable names that hold secrets.
var tokenName = regexp.MustCompile(`(?i)(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIALS?)`)

// tokenShape matches values shaped like well-known long-lived tokens.
var tokenShape = regexp.MustCompile(`^(AKIA[0-9A-Z]{16}|ASIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,}|glpat-[A-Za-z0-9_-]{20,}|xox[abpr]-[A-Za-z0-9-]{10,}|sk-[A-Za-z0-9_-]{20,}|AIza[0-9A-Za-z_-]{35}|npm_[A-Za-z0-9]{36})$`)

var privateKeyHeader = []byte("PRIVATE KEY-----")

// ScanCredentials lists the long-lived keys in env (KEY=VALUE entries) and
// under home: token-shaped variables (by name, with a non-empty value, or
// by the value's shape), the well-known credential files that exist and
// are not empty, and PEM private keys in ~/.ssh. Never a value.
func ScanCredentials(env []string, home string) []selftest.Credential {
	var out []selftest.Credential
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || v == "" {
			continue
		}
		switch {
		case tokenShape.MatchString(v):
			out = append(out, selftest.Credential{Kind: "env-token", Name: k, Location: "env"})
		case tokenName.MatchString(k) && len(v) >= 8:
			out = append(out, selftest.Credential{Kind: "env-secret-name", Name: k, Location: "env"})
		}
	}
	if home == "" {
		return out
	}
	for _, f := range credFiles {
		p := filepath.Join(home, f.path)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Size() > 0 {
			out = append(out, selftest.Credential{Kind: f.kind, Name: credName(p, f.kind), Location: p})
		}
	}
	filepath.WalkDir(filepath.Join(home, sshDir), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !d.Type().IsRegular() {
			return nil
		}
		if hasPrivateKey(p) {
			out = append(out, selftest.Credential{Kind: "private-key", Name: d.Name(), Location: p})
		}
		return nil
	})
	slices.SortStableFunc(out, func(a, b selftest.Credential) int { return strings.Compare(a.Location, b.Location) })
	return out
}

// credName names what a credential file holds without its values: the
// profile names of an AWS credentials file, else the file's base name.
func credName(path, kind string) string {
	if kind != "aws-credentials" {
		return filepath.Base(path)
	}
	f, err := os.Open(path)
	if err != nil {
		return filepath.Base(path)
	}
	defer f.Close()
	var profiles []string
	sc := bufio.NewScanner(io.LimitReader(f, maxScanFile))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "[") && strings.HasSuffix(l, "]") {
			profiles = append(profiles, strings.Trim(l, "[] "))
		}
	}
	if len(profiles) == 0 {
		return filepath.Base(path)
	}
	return strings.Join(profiles, ",")
}

func hasPrivateKey(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	b := make([]byte, 4096)
	n, _ := f.Read(b)
	return bytes.Contains(b[:n], privateKeyHeader)
}
