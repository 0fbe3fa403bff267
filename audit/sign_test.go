package audit

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func testKey(t testing.TB) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func pubOf(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }

// signedLog returns a closed log of n decisions signed by k, a checkpoint
// every `every` lines.
func signedLog(t testing.TB, k ed25519.PrivateKey, n, every int) []byte {
	t.Helper()
	var buf bytes.Buffer
	s, err := NewSinkWith(&buf, Options{Sign: &SignOptions{Key: k, Records: every, Interval: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	logDecisions(slog.New(s.Handler(nil)), 0, n)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// kindsOf lists the audit kind of each line (checkpoints as cp:<at>).
func kindsOf(t testing.TB, log []byte) []string {
	t.Helper()
	var out []string
	for _, l := range splitLines(log) {
		l = bytes.TrimSuffix(l, []byte{'\n'})
		h, err := parseHeader(l)
		if err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		if h.kind == kindCheckpoint {
			c, err := ParseCheckpoint(l)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, "cp:"+c.At)
			continue
		}
		out = append(out, h.kind)
	}
	return out
}

func TestSignedCheckpointsWritten(t *testing.T) {
	k := testKey(t)
	log := signedLog(t, k, 7, 3)
	got := strings.Join(kindsOf(t, log), " ")
	// open's checkpoint resets the count: 3 records, a checkpoint, 3, a
	// checkpoint, 1, the seal and its checkpoint
	want := "open cp:open record record record cp:interval record record record cp:interval record seal cp:seal"
	if got != want {
		t.Fatalf("lines:\n got %s\nwant %s", got, want)
	}
	rep, err := Verify(bytes.NewReader(log), VerifyOptions{Key: pubOf(k)})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Sealed || rep.SignedLines != rep.Lines || rep.Checkpoints != 4 || rep.LastCheckpoint.At != AtSeal || rep.UnsignedFrom != 0 {
		t.Fatalf("report %+v", rep)
	}
	if _, err := Verify(bytes.NewReader(log), VerifyOptions{}); err != nil {
		t.Fatalf("without a key: %v", err)
	}
}

// editLine changes the host of line i (0-based) and rechains the log: a
// consistent rewrite.
func editLine(ls [][]byte, i int) [][]byte {
	ls = append([][]byte(nil), ls...)
	ls[i] = bytes.Replace(ls[i], []byte(`.example.com`), []byte(`.evil.example`), 1)
	return rechain(ls)
}

func TestVerifyKeyDetects(t *testing.T) {
	k, other := testKey(t), testKey(t)
	log := signedLog(t, k, 7, 3)
	ls := splitLines(log) // 0 open, 1 cp, 2-4 records, 5 cp, 6-8 records, 9 cp, 10 record, 11 seal, 12 cp
	// swap two signed stretches (records 2-5 and 6-9) and rechain
	swapped := append(append(append(append([][]byte{}, ls[:2]...), ls[6:10]...), ls[2:6]...), ls[10:]...)
	dropMid := append(append([][]byte{}, ls[:5]...), ls[6:]...)
	tests := []struct {
		name      string
		log       []byte
		noKeyOK   bool
		line      int
		kind      Kind
		detail    string
		verifyKey ed25519.PublicKey
	}{
		{"consistent rewrite", joinLines(editLine(ls, 7)), true, 7, Unsigned, "does not verify", nil},
		{"consistent rewrite of the last stretch", joinLines(editLine(ls, 10)), true, 11, Unsigned, "does not verify", nil},
		{"checkpoint removed, rechained", joinLines(rechain(dropMid)), true, 3, Unsigned, "does not verify", nil},
		{"seal checkpoint removed", joinLines(ls[:12]), true, 11, Unsigned, "ends without a checkpoint", nil},
		{"signed stretches reordered, rechained", joinLines(rechain(swapped)), true, 3, Unsigned, "does not verify", nil},
		{"another key", log, true, 1, Unsigned, "not by", pubOf(other)},
		{"re-signed by whoever rewrote it", signedLog(t, other, 7, 3), true, 1, Unsigned, "not by", nil},
		{"unsigned lines appended after the seal", append(append([]byte{}, log...), joinLines(rechain(append(append([][]byte{}, ls...), ls[0], ls[2], ls[11])))[len(log):]...), true, 14, Unsigned, "ends without a checkpoint", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Verify(bytes.NewReader(tc.log), VerifyOptions{})
			if tc.noKeyOK && err != nil {
				t.Fatalf("without a key the rewrite should pass (the chain is consistent): %v", err)
			}
			key := tc.verifyKey
			if key == nil {
				key = pubOf(k)
			}
			_, err = Verify(bytes.NewReader(tc.log), VerifyOptions{Key: key})
			var te *TamperError
			if !errors.As(err, &te) {
				t.Fatalf("with the key: err = %v, want a TamperError", err)
			}
			if te.Line != tc.line || te.Kind != tc.kind || !strings.Contains(te.Detail, tc.detail) {
				t.Fatalf("got %v, want line %d %s (%q)", te, tc.line, tc.kind, tc.detail)
			}
		})
	}
}

func TestVerifyLiveUnsignedTail(t *testing.T) {
	k := testKey(t)
	var buf bytes.Buffer
	s, err := NewSinkWith(&buf, Options{Sign: &SignOptions{Key: k, Records: 100, Interval: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.stopTicker()
	logDecisions(slog.New(s.Handler(nil)), 0, 2)
	s.mu.Lock()
	log := append([]byte(nil), buf.Bytes()...)
	s.mu.Unlock()
	rep, err := Verify(bytes.NewReader(log), VerifyOptions{Key: pubOf(k), Live: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.SignedLines != 2 || rep.UnsignedFrom != 3 || rep.Lines != 4 {
		t.Fatalf("report %+v: want lines 3-4 unsigned", rep)
	}
}

// clock is a settable time source for the sink.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestCheckpointInterval(t *testing.T) {
	k := testKey(t)
	var buf bytes.Buffer
	s, err := NewSinkWith(&buf, Options{Sign: &SignOptions{Key: k, Records: 100, Interval: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	s.stopTicker() // this test drives tick itself
	c := &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	s.mu.Lock()
	s.now = c.now
	s.mu.Unlock()
	log := slog.New(s.Handler(nil))
	logDecisions(log, 0, 1)
	s.tick()
	if got := strings.Join(kindsOf(t, buf.Bytes()), " "); got != "open cp:open record" {
		t.Fatalf("before the interval: %s", got)
	}
	c.t = c.t.Add(time.Minute)
	s.tick() // a quiet log: the ticker signs its tail
	c.t = c.t.Add(30 * time.Second)
	logDecisions(log, 1, 1)
	c.t = c.t.Add(time.Minute)
	logDecisions(log, 2, 1) // the first unsigned line waited an interval when this one is written
	if got := strings.Join(kindsOf(t, buf.Bytes()), " "); got != "open cp:open record cp:interval record record cp:interval" {
		t.Fatalf("got %s", got)
	}
}

func TestSignedResumeAndRotation(t *testing.T) {
	a, b := testKey(t), testKey(t)
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	session := func(o *SignOptions) {
		t.Helper()
		s, err := OpenWith(path, Options{Sign: o})
		if err != nil {
			t.Fatal(err)
		}
		logDecisions(slog.New(s.Handler(nil)), 0, 2)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	session(&SignOptions{Key: a})
	session(&SignOptions{Key: b, Previous: a}) // rotates: announced in a checkpoint a signs
	session(&SignOptions{Key: b, Previous: a}) // already rotated: b only
	log, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(log, []byte(`"previous":"sealed"`)) {
		t.Fatalf("a signed seal should read as sealed on resume:\n%s", log)
	}
	if n := bytes.Count(log, []byte(`"next_key"`)); n != 1 {
		t.Fatalf("%d announcements, want 1", n)
	}
	rep, err := Verify(bytes.NewReader(log), VerifyOptions{Key: pubOf(a), Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(rep.KeyIDs, ",") != KeyID(pubOf(a))+","+KeyID(pubOf(b)) || rep.SignedLines != rep.Lines {
		t.Fatalf("report %+v", rep)
	}
	// b alone cannot vouch for what a signed before the rotation
	if _, err := Verify(bytes.NewReader(log), VerifyOptions{Key: pubOf(b)}); !errors.Is(err, ErrTampered) {
		t.Fatalf("verify with the new key only: %v", err)
	}
	// a session signed by the retired key after the rotation fails
	session(&SignOptions{Key: a})
	log, _ = os.ReadFile(path)
	_, err = Verify(bytes.NewReader(log), VerifyOptions{Key: pubOf(a)})
	var te *TamperError
	if !errors.As(err, &te) || !strings.Contains(te.Detail, "rotated away") {
		t.Fatalf("retired key: %v", err)
	}
}

func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	pub, err := GenerateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, PrivateKeyFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("private key mode: %v %v", st.Mode(), err)
	}
	priv, err := ReadPrivateKey(filepath.Join(dir, PrivateKeyFile))
	if err != nil || !pubOf(priv).Equal(pub) {
		t.Fatalf("read private key: %v", err)
	}
	p2, err := ReadPublicKey(filepath.Join(dir, PublicKeyFile))
	if err != nil || !p2.Equal(pub) {
		t.Fatalf("read public key: %v", err)
	}
	if _, err := GenerateKey(dir); err == nil {
		t.Fatal("GenerateKey overwrote an existing key")
	}
	if err := os.Chmod(filepath.Join(dir, PrivateKeyFile), 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadPrivateKey(filepath.Join(dir, PrivateKeyFile)); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("a group-readable key was accepted: %v", err)
	}
	if _, err := ReadPublicKey(filepath.Join(dir, PrivateKeyFile)); err == nil {
		t.Fatal("a private key file read as a public key")
	}
}

func TestParseCheckpointRefuses(t *testing.T) {
	k := testKey(t)
	var cp []byte
	for _, l := range splitLines(signedLog(t, k, 1, 10)) {
		if bytes.Contains(l, []byte(`"audit":"checkpoint"`)) {
			cp = bytes.TrimSuffix(l, []byte{'\n'})
			break
		}
	}
	if _, err := ParseCheckpoint(cp); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func([]byte) []byte{
		"extra field":  func(b []byte) []byte { return bytes.Replace(b, []byte(`,"sig"`), []byte(`,"x":1,"sig"`), 1) },
		"spaces":       func(b []byte) []byte { return bytes.Replace(b, []byte(`,"at":`), []byte(`, "at":`), 1) },
		"unknown at":   func(b []byte) []byte { return bytes.Replace(b, []byte(`"at":"open"`), []byte(`"at":"boot"`), 1) },
		"short sig":    func(b []byte) []byte { return bytes.Replace(b, []byte(`"sig":"`), []byte(`"sig":"AAAA`), 1)[:len(b)-8] },
		"not a record": func(b []byte) []byte { return bytes.Replace(b, []byte(`"checkpoint"`), []byte(`"record"`), 1) },
	} {
		if _, err := ParseCheckpoint(mut(cp)); err == nil {
			t.Errorf("%s: accepted %s", name, mut(cp))
		}
	}
}

func FuzzParseCheckpoint(f *testing.F) {
	_, k, _ := ed25519.GenerateKey(rand.Reader)
	for _, l := range splitLines(signedLog(f, k, 3, 2)) {
		f.Add(bytes.TrimSuffix(l, []byte{'\n'}))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		c, err := ParseCheckpoint(line)
		if err != nil {
			return
		}
		if !bytes.Equal(renderCheckpoint(c), line) {
			t.Fatalf("accepted a line that is not its own rendering: %q", line)
		}
	})
}

// BenchmarkHandlerSigned is BenchmarkHandler's audit case with signed
// checkpoints at the default pace (one Ed25519 signature per 1000 lines).
func BenchmarkHandlerSigned(b *testing.B) {
	_, k, _ := ed25519.GenerateKey(rand.Reader)
	s, _ := NewSinkWith(io.Discard, Options{Sign: &SignOptions{Key: k}})
	defer s.Close()
	log := slog.New(s.Handler(nil))
	b.ReportAllocs()
	for b.Loop() {
		logDecisions(log, 0, 1)
	}
}
