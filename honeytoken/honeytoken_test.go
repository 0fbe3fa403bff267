package honeytoken

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func mustIssue(t testing.TB, id string) []Token {
	t.Helper()
	ts, err := Issue(id)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func TestIssueShapes(t *testing.T) {
	shape := map[Kind]*regexp.Regexp{
		AWSAccessKeyID:     regexp.MustCompile(`^AKIA[A-Z2-7]{16}$`),
		AWSSecretAccessKey: regexp.MustCompile(`^[A-Za-z0-9]{40}$`),
		GitHubToken:        regexp.MustCompile(`^ghp_[A-Za-z0-9]{36}$`),
		APIKey:             regexp.MustCompile(`^[A-Za-z0-9]{40}$`),
	}
	seen := map[string]bool{}
	for i := 0; i < 200; i++ {
		for _, tk := range mustIssue(t, "agent-a") {
			if !shape[tk.Kind].MatchString(tk.Value) {
				t.Fatalf("%s %q does not look real", tk.Kind, tk.Value)
			}
			if seen[tk.Value] {
				t.Fatalf("%s issued twice", tk.Value)
			}
			seen[tk.Value] = true
			switch tk.Kind {
			case AWSAccessKeyID:
				acct, newGen := AWSAccount(tk.Value)
				if !newGen || acct < minAccount || acct >= 1<<40 {
					t.Fatalf("%s encodes account %d (new generation %v): want a 13-digit account, which cannot exist", tk.Value, acct, newGen)
				}
			case GitHubToken:
				sums := GitHubChecksums(tk.Value)
				if len(sums) != 4 || slices.Contains(sums, tk.Value[len(tk.Value)-6:]) {
					t.Fatalf("%s carries a checksum GitHub could accept (%v)", tk.Value, sums)
				}
			}
		}
	}
	// the decoder itself, on the researchers' published example
	if acct, _ := AWSAccount("ASIAY34FZKBOKMUTVV7A"); acct != 609629065308 {
		t.Fatalf("AWSAccount(example) = %d, want 609629065308", acct)
	}
}

func TestScan(t *testing.T) {
	r := NewRegistry()
	a, b := mustIssue(t, "agent-a"), mustIssue(t, "agent-b")
	r.Set("run", a)
	r.Set(SourceState, b)
	ghA, awsB := a[2].Value, b[0].Value
	basic := base64.StdEncoding.EncodeToString([]byte("x-access-token:" + ghA))
	// A byte that differs from the token's even ignoring case (the scan
	// ignores case: "x" for an issued "X" was the token itself, 1 run in 32).
	off := "x"
	if strings.EqualFold(awsB[10:11], off) {
		off = "y"
	}
	tests := []struct {
		name, in string
		want     string // the value found, "" none
	}{
		{"query", "/search?q=1&token=" + ghA + "&x=2", ghA},
		{"whole", awsB, awsB},
		{"at the end", "key=" + awsB, awsB},
		{"dns label, lower case", strings.ToLower(awsB) + ".exfil.example.com", awsB},
		{"upper case", strings.ToUpper(ghA), ghA},
		{"cut short", awsB[:19], ""},
		{"one byte off", awsB[:10] + off + awsB[11:], ""},
		{"nothing", "GET /simple/requests/ HTTP/1.1", ""},
		{"short input", "AKIA", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := r.ScanString(tt.in)
			if ok != (tt.want != "") || (ok && got.Value != tt.want) {
				t.Fatalf("ScanString = %+v, %v; want %q", got, ok, tt.want)
			}
			if got2, ok2 := r.Scan([]byte(tt.in)); ok2 != ok || got2 != got {
				t.Fatalf("Scan and ScanString disagree")
			}
		})
	}
	if got, ok := r.ScanHeader("Authorization", "Basic "+basic); !ok || got.Value != ghA || got.Identity != "agent-a" {
		t.Fatalf("Basic credentials: %+v %v", got, ok)
	}
	// Any header holding the base64 of a token matches by its encoded
	// form, Basic or not.
	if got, ok := r.ScanHeader("X-Other", "Basic "+basic); !ok || got.Value != ghA {
		t.Fatalf("base64 in another header: %+v %v", got, ok)
	}
	r.Set("run", nil)
	if _, ok := r.ScanString(ghA); ok {
		t.Fatal("a removed source still matches")
	}
	if len(r.Tokens()) != 4 {
		t.Fatalf("tokens left: %d", len(r.Tokens()))
	}
	var nilReg *Registry
	if _, ok := nilReg.ScanString(ghA); ok || !nilReg.Empty() {
		t.Fatal("a nil registry matched")
	}
}

func TestStoreAndWatch(t *testing.T) {
	dir := t.TempDir()
	r := NewRegistry()
	w := &Watch{Dir: dir, Reg: r}
	if err := w.Refresh(); err != nil || !r.Empty() {
		t.Fatalf("no store: %v", err)
	}
	a := mustIssue(t, "pod-a")
	if err := Append(dir, a); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(filepath.Join(dir, StoreFile))
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("store mode %v", st.Mode())
	}
	if err := w.Refresh(); err != nil {
		t.Fatal(err)
	}
	if tk, ok := r.ScanString("x" + a[3].Value); !ok || tk.Identity != "pod-a" || tk.Kind != APIKey {
		t.Fatalf("after Append: %+v %v", tk, ok)
	}
	b := mustIssue(t, "pod-b")
	Append(dir, b)
	w.Refresh()
	if len(r.Tokens()) != 8 {
		t.Fatalf("%d tokens, want 8", len(r.Tokens()))
	}
	os.WriteFile(filepath.Join(dir, StoreFile), []byte("garbage\n"), 0o600)
	if err := w.Refresh(); err == nil || len(r.Tokens()) != 8 {
		t.Fatalf("a broken store: err %v, %d tokens (the loaded ones stay)", err, len(r.Tokens()))
	}
}

func TestFilesAndEnv(t *testing.T) {
	ts := mustIssue(t, "a")
	env := EnvLines(ts)
	if len(env) != 4 || !strings.HasPrefix(env[0], "AWS_ACCESS_KEY_ID=AKIA") {
		t.Fatalf("env %v", env)
	}
	f := Files(ts)
	if !strings.Contains(f[".aws/credentials"], ts[0].Value) || !strings.Contains(f[".git-credentials"], ts[2].Value) {
		t.Fatalf("files %v", f)
	}
}

func FuzzScan(f *testing.F) {
	ts, _ := Issue("fuzz")
	r := NewRegistry()
	r.Set("f", ts)
	f.Add([]byte("x" + ts[0].Value + "y"))
	f.Add([]byte(strings.ToLower(ts[2].Value)))
	f.Add([]byte("nothing here"))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := r.Scan(b)
		lb := bytes.ToLower(b)
		want := false
		var found []string
		for _, tk := range ts {
			for _, f := range forms(tk.Value) {
				if bytes.Contains(lb, []byte(strings.ToLower(f))) {
					want = true
					found = append(found, tk.Value)
				}
			}
		}
		if ok != want {
			t.Fatalf("Scan(%q) = %v, want %v", b, ok, want)
		}
		if ok && !slices.Contains(found, got.Value) {
			t.Fatalf("reported %q, not in the input", got.Value)
		}
	})
}

func BenchmarkScan(b *testing.B) {
	r := NewRegistry()
	for i := 0; i < 64; i++ { // 64 identities, 256 tokens
		ts, _ := Issue("id")
		r.Set(string(rune('a'+i)), ts)
	}
	body := bytes.Repeat([]byte(`{"name":"requests","version":"2.32.3","query":"abcdefghijklmnop"}`), 1<<14)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, ok := r.Scan(body); ok {
			b.Fatal("false positive")
		}
	}
}
