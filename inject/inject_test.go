package inject

import (
	"encoding/base64"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/egressd/egressd/policy"
)

func TestApply(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	write := func(s string) {
		// write a new file and rename it over the old one, as a Kubernetes
		// Secret update does
		tmp := tok + ".tmp"
		if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, tok); err != nil {
			t.Fatal(err)
		}
	}
	write("s3cret-one\n")
	var s Store
	bearer := &policy.Inject{Header: "Authorization", Prefix: "Bearer ", File: tok}
	h := http.Header{"Authorization": {"Bearer sandbox-own"}, "X-Api-Key": {"own"}}
	if err := s.Apply(h, []string{"Authorization", "X-Api-Key"}, bearer); err != nil {
		t.Fatal(err)
	}
	if got := h.Values("Authorization"); len(got) != 1 || got[0] != "Bearer s3cret-one" {
		t.Errorf("Authorization = %q", got)
	}
	if h.Get("X-Api-Key") != "" {
		t.Error("the client's own X-Api-Key was not stripped")
	}
	write("s3cret-two")
	if v, _ := s.Value(bearer); v != "Bearer s3cret-two" {
		t.Errorf("after the file changed: %q, want the new secret", v)
	}
	basic := &policy.Inject{Header: "Authorization", BasicUser: "ci", File: tok}
	if v, _ := s.Value(basic); v != "Basic "+base64.StdEncoding.EncodeToString([]byte("ci:s3cret-two")) {
		t.Errorf("basic = %q", v)
	}
}

func TestSecretErrorsNeverHoldTheSecret(t *testing.T) {
	dir := t.TempDir()
	cases := map[string]string{
		"crlf":  "tok3n-abc\r\nX-Evil: 1",
		"nul":   "tok3n-abc\x00",
		"empty": "  \n",
		"big":   "tok3n-abc" + strings.Repeat("x", maxSecretBytes),
	}
	for name, content := range cases {
		t.Run(name, func(t *testing.T) {
			f := filepath.Join(dir, name)
			if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			var s Store
			h := http.Header{"Authorization": {"Bearer sandbox-own"}}
			err := s.Apply(h, nil, &policy.Inject{Header: "Authorization", File: f})
			if err == nil {
				t.Fatal("a bad secret file was accepted")
			}
			if strings.Contains(err.Error(), "tok3n") {
				t.Errorf("error holds the secret: %v", err)
			}
			if len(h.Values("Authorization")) != 0 {
				t.Errorf("on error the request still carries %q", h.Values("Authorization"))
			}
		})
	}
	var s Store
	if _, err := s.Value(&policy.Inject{File: filepath.Join(dir, "missing")}); err == nil {
		t.Error("missing file accepted")
	}
}
