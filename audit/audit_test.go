package audit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// logDecisions logs n decisions the way the proxy does.
func logDecisions(log *slog.Logger, from, n int) {
	for i := from; i < from+n; i++ {
		log.LogAttrs(context.Background(), slog.LevelInfo, DecisionMsg,
			slog.String("identity", "agent-1"),
			slog.String("host", fmt.Sprintf("h%d.example.com", i)),
			slog.Int("port", 443),
			slog.String("decision", "allow"),
			slog.String("reason", ""),
		)
	}
}

// sealedLog returns a closed log of n decisions: n+2 lines.
func sealedLog(t testing.TB, n int) []byte {
	t.Helper()
	var buf bytes.Buffer
	s, err := NewSink(&buf)
	if err != nil {
		t.Fatal(err)
	}
	logDecisions(slog.New(s.Handler(nil)), 0, n)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func splitLines(b []byte) [][]byte {
	ls := bytes.SplitAfter(b, []byte{'\n'})
	if len(ls[len(ls)-1]) == 0 {
		ls = ls[:len(ls)-1]
	}
	return ls
}

func joinLines(ls [][]byte) []byte { return bytes.Join(ls, nil) }

// rechain recomputes every seq and prev, as an attacker with write access
// can: the file alone no longer shows the change.
func rechain(ls [][]byte) [][]byte {
	var prev [32]byte
	out := make([][]byte, len(ls))
	for i, l := range ls {
		body := l[bytes.Index(l, []byte(`,"audit":"`)):]
		nl := fmt.Appendf(nil, `{"seq":%d,"prev":"%s"%s`, i+1, hex.EncodeToString(prev[:]), body)
		prev = sha256.Sum256(bytes.TrimSuffix(nl, []byte{'\n'}))
		out[i] = nl
	}
	return out
}

func lineHash(l []byte) string {
	s := sha256.Sum256(bytes.TrimSuffix(l, []byte{'\n'}))
	return hex.EncodeToString(s[:])
}

func TestVerifyClean(t *testing.T) {
	log := sealedLog(t, 10)
	rep, err := Verify(bytes.NewReader(log), VerifyOptions{})
	if err != nil {
		t.Fatalf("clean log: %v", err)
	}
	ls := splitLines(log)
	want := Report{Lines: 12, Records: 10, Sessions: 1, Sealed: true, Head: Anchor{12, lineHash(ls[11])}}
	if fmt.Sprint(rep) != fmt.Sprint(want) {
		t.Errorf("got %+v, want %+v", rep, want)
	}
	var first struct {
		Seq               uint64
		Prev, Audit, Time string
		Previous          string
	}
	if err := json.Unmarshal(ls[0], &first); err != nil {
		t.Fatal(err)
	}
	if first.Seq != 1 || first.Prev != strings.Repeat("0", 64) || first.Audit != "open" || first.Previous != "new" {
		t.Errorf("first line %s: want seq 1, genesis prev, an open record of a new log", ls[0])
	}
	if !bytes.Contains(ls[1], []byte(`"audit":"record","time":`)) || !bytes.Contains(ls[1], []byte(`"msg":"decision","identity":"agent-1","host":"h0.example.com"`)) {
		t.Errorf("record line %s lacks the decision fields", ls[1])
	}
}

func TestVerifyDetects(t *testing.T) {
	clean := splitLines(sealedLog(t, 10)) // lines 1 open, 2..11 records, 12 seal
	tests := []struct {
		name     string
		mutate   func(ls [][]byte) []byte
		opts     VerifyOptions
		wantLine int
		wantKind Kind
	}{
		{"edit in the middle", func(ls [][]byte) []byte {
			ls[5] = bytes.Replace(ls[5], []byte(`"allow"`), []byte(`"deny"`), 1)
			return joinLines(ls)
		}, VerifyOptions{}, 6, Edited},
		{"edit of the first line", func(ls [][]byte) []byte {
			ls[0] = bytes.Replace(ls[0], []byte(`"new"`), []byte(`"old"`), 1)
			return joinLines(ls)
		}, VerifyOptions{}, 1, Edited},
		{"removed line", func(ls [][]byte) []byte {
			return joinLines(append(ls[:4:4], ls[5:]...))
		}, VerifyOptions{}, 5, Removed},
		{"removed head", func(ls [][]byte) []byte { return joinLines(ls[2:]) }, VerifyOptions{}, 1, Removed},
		{"reordered pair", func(ls [][]byte) []byte {
			ls[3], ls[4] = ls[4], ls[3]
			return joinLines(ls)
		}, VerifyOptions{}, 4, Reordered},
		{"line moved to the end", func(ls [][]byte) []byte {
			moved := ls[2]
			rest := append(ls[:2:2], ls[3:]...)
			return joinLines(append(rest[:len(rest)-1:len(rest)-1], moved, rest[len(rest)-1]))
		}, VerifyOptions{}, 3, Reordered},
		{"duplicated line", func(ls [][]byte) []byte {
			return joinLines(append(ls[:6:6], append([][]byte{ls[5]}, ls[6:]...)...))
		}, VerifyOptions{}, 7, Inserted},
		{"changed seq", func(ls [][]byte) []byte {
			ls[4] = bytes.Replace(ls[4], []byte(`{"seq":5,`), []byte(`{"seq":9,`), 1)
			return joinLines(ls)
		}, VerifyOptions{}, 5, Edited},
		{"truncated tail (seal and last record)", func(ls [][]byte) []byte { return joinLines(ls[:10]) }, VerifyOptions{}, 11, Truncated},
		{"truncated tail (seal only)", func(ls [][]byte) []byte { return joinLines(ls[:11]) }, VerifyOptions{}, 12, Truncated},
		{"truncated mid-line", func(ls [][]byte) []byte {
			b := joinLines(ls)
			return b[:len(b)-len(ls[11])-len(ls[10])/2]
		}, VerifyOptions{}, 11, Truncated},
		{"empty", func([][]byte) []byte { return nil }, VerifyOptions{}, 1, Truncated},
		{"garbage line", func(ls [][]byte) []byte {
			ls[6] = []byte("not json\n")
			return joinLines(ls)
		}, VerifyOptions{}, 7, Malformed},
		{"record appended after the seal", func(ls [][]byte) []byte {
			return joinLines(rechain(append(ls, ls[5])))
		}, VerifyOptions{}, 13, Inserted},
		{"recover record without damage", func(ls [][]byte) []byte {
			ls[6] = bytes.Replace(ls[6], []byte(`"audit":"record"`), []byte(`"audit":"recover"`), 1)
			return joinLines(rechain(ls))
		}, VerifyOptions{}, 7, Inserted},
		{"rewrite caught by an anchor", func(ls [][]byte) []byte {
			ls[5] = bytes.Replace(ls[5], []byte(`"allow"`), []byte(`"deny"`), 1)
			return joinLines(rechain(ls))
		}, VerifyOptions{Anchors: []Anchor{{7, lineHash(clean[6])}}}, 7, Edited},
		{"live tail truncated below an anchor", func(ls [][]byte) []byte { return joinLines(ls[:8]) },
			VerifyOptions{Live: true, Anchors: []Anchor{{10, lineHash(clean[9])}}}, 9, Truncated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ls := make([][]byte, len(clean))
			for i := range clean {
				ls[i] = bytes.Clone(clean[i])
			}
			_, err := Verify(bytes.NewReader(tt.mutate(ls)), tt.opts)
			var te *TamperError
			if !errors.As(err, &te) {
				t.Fatalf("got %v, want a %s tamper error", err, tt.wantKind)
			}
			if !errors.Is(err, ErrTampered) {
				t.Errorf("error %v does not wrap ErrTampered", err)
			}
			if te.Line != tt.wantLine || te.Kind != tt.wantKind {
				t.Errorf("got line %d %s (%s), want line %d %s", te.Line, te.Kind, te.Detail, tt.wantLine, tt.wantKind)
			}
		})
	}
}

// TestVerifyLimits pins down what the file alone cannot show, so the doc
// stays honest: each case verifies although the log was changed.
func TestVerifyLimits(t *testing.T) {
	clean := splitLines(sealedLog(t, 10))
	tests := []struct {
		name string
		log  []byte
		opts VerifyOptions
	}{
		{"rewrite from a line on, without anchors", func() []byte {
			ls := splitLines(bytes.Clone(joinLines(clean)))
			ls[5] = bytes.Replace(ls[5], []byte(`"allow"`), []byte(`"deny"`), 1)
			return joinLines(rechain(ls))
		}(), VerifyOptions{}},
		{"live log truncated to a line boundary, without anchors", joinLines(clean[:8]), VerifyOptions{Live: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Verify(bytes.NewReader(tt.log), tt.opts); err != nil {
				t.Errorf("got %v; the documented limit says this verifies", err)
			}
		})
	}
	// negative control: the same changes are found with the anchor or the seal
	if _, err := Verify(bytes.NewReader(joinLines(clean[:8])), VerifyOptions{}); !errors.Is(err, ErrTampered) {
		t.Errorf("closed log truncated to a line boundary: got %v, want tampered", err)
	}
}

// TestHandler: decisions go to the audit log and on to next with their
// anchor; other records only to next; next's level does not filter audits.
func TestHandler(t *testing.T) {
	var file, stderr bytes.Buffer
	s, err := NewSink(&file)
	if err != nil {
		t.Fatal(err)
	}
	next := slog.NewJSONHandler(&stderr, &slog.HandlerOptions{Level: slog.LevelWarn})
	log := slog.New(s.Handler(next)).With("component", "proxy")
	log.Info(DecisionMsg, "decision", "allow", "host", "pypi.org")
	log.Warn(DecisionMsg, "decision", "deny", "host", "169.254.169.254")
	log.Warn("reload rejected")
	log.Info("serving")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ls := splitLines(file.Bytes())
	if len(ls) != 4 {
		t.Fatalf("got %d audit lines, want 4 (open, 2 decisions, seal):\n%s", len(ls), file.Bytes())
	}
	for i, want := range []string{`"host":"pypi.org"`, `"host":"169.254.169.254"`} {
		if !bytes.Contains(ls[i+1], []byte(want)) || !bytes.Contains(ls[i+1], []byte(`"component":"proxy"`)) {
			t.Errorf("audit line %d = %s, want %s and the logger's component", i+2, ls[i+1], want)
		}
	}
	out := splitLines(stderr.Bytes())
	if len(out) != 2 {
		t.Fatalf("got %d stderr lines, want 2 (the Warn decision and the Warn reload):\n%s", len(out), stderr.Bytes())
	}
	var m map[string]any
	if err := json.Unmarshal(out[0], &m); err != nil {
		t.Fatal(err)
	}
	if m["audit_seq"] != float64(3) || m["audit_hash"] != lineHash(ls[2]) {
		t.Errorf("stderr decision carries audit_seq %v audit_hash %v, want 3 %s", m["audit_seq"], m["audit_hash"], lineHash(ls[2]))
	}
	if bytes.Contains(out[1], []byte("audit_")) {
		t.Errorf("non-decision record got audit fields: %s", out[1])
	}
	// the stderr anchor verifies the file
	a, err := ParseAnchor(fmt.Sprintf("%v:%v", m["audit_seq"], m["audit_hash"]))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(bytes.NewReader(file.Bytes()), VerifyOptions{Anchors: []Anchor{a}}); err != nil {
		t.Errorf("verify with the stderr anchor: %v", err)
	}
	log.Info(DecisionMsg, "host", "late.example")
	if bytes.Contains(file.Bytes(), []byte("late.example")) {
		t.Error("a record after Close was written after the seal")
	}
}

func TestHandlerConcurrent(t *testing.T) {
	var file bytes.Buffer
	s, err := NewSink(&file)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(s.Handler(nil))
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			logDecisions(log.With("g", g), g*1000, 200)
		}()
	}
	wg.Wait()
	s.Close()
	rep, err := Verify(bytes.NewReader(file.Bytes()), VerifyOptions{})
	if err != nil || rep.Records != 1600 {
		t.Fatalf("got %d records, %v; want 1600, nil", rep.Records, err)
	}
}

// failWriter fails every write after the first n bytes, writing a part.
type failWriter struct {
	bytes.Buffer
	n int
}

func (w *failWriter) Write(p []byte) (int, error) {
	if room := w.n - w.Len(); room < len(p) {
		w.Buffer.Write(p[:max(room, 0)])
		return max(room, 0), errors.New("no space left on device")
	}
	return w.Buffer.Write(p)
}

func TestWriteErrorStopsChain(t *testing.T) {
	w := &failWriter{n: 600}
	s, err := NewSink(w)
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	log := slog.New(s.Handler(slog.NewJSONHandler(&stderr, nil)))
	logDecisions(log, 0, 10)
	if s.Err() == nil {
		t.Fatal("Err() = nil after a failed write")
	}
	if !bytes.Contains(stderr.Bytes(), []byte(`"audit_error":"write audit line seq`)) {
		t.Errorf("stderr does not report the audit failure:\n%s", stderr.Bytes())
	}
	written := w.Len()
	logDecisions(log, 10, 3)
	if w.Len() != written {
		t.Error("lines written after the chain stopped")
	}
	_, err = Verify(bytes.NewReader(w.Bytes()), VerifyOptions{})
	var te *TamperError
	if !errors.As(err, &te) || te.Kind != Truncated {
		t.Errorf("verify of the cut log: got %v, want truncated", err)
	}
}

func TestOversizeRecord(t *testing.T) {
	var file bytes.Buffer
	s, _ := NewSink(&file)
	slog.New(s.Handler(nil)).Info(DecisionMsg, "detail", strings.Repeat("x", MaxLineBytes))
	s.Close()
	rep, err := Verify(bytes.NewReader(file.Bytes()), VerifyOptions{})
	if err != nil || rep.Records != 1 || !bytes.Contains(file.Bytes(), []byte(`"audit_oversize":`)) {
		t.Errorf("oversize record: got %+v, %v; want one stub record that verifies", rep, err)
	}
}

func TestOpenResume(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	session := func(n int, closeIt bool) {
		t.Helper()
		s, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		logDecisions(slog.New(s.Handler(nil)), 0, n)
		if closeIt {
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		} else {
			s.f.Close() // killed: no seal; the lock goes with the descriptor
		}
	}
	verify := func(o VerifyOptions) (Report, error) {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		return Verify(f, o)
	}

	session(3, true)
	session(2, true)
	rep, err := verify(VerifyOptions{Strict: true})
	if err != nil || rep.Sessions != 2 || rep.Records != 5 || rep.Lines != 9 {
		t.Fatalf("two clean sessions: got %+v, %v; want 2 sessions, 5 records, 9 lines", rep, err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, want 0640", fi.Mode().Perm())
	}

	session(2, false) // lines 10..12, no seal
	if _, err := verify(VerifyOptions{}); !errors.Is(err, ErrTampered) {
		t.Errorf("killed session, closed-log check: got %v, want truncated", err)
	}
	if _, err := verify(VerifyOptions{Live: true}); err != nil {
		t.Errorf("killed session, live check: %v", err)
	}
	session(1, true) // the open record says the previous session was unsealed
	b, _ := os.ReadFile(path)
	if !bytes.Contains(splitLines(b)[12], []byte(`"audit":"open"`)) || !bytes.Contains(splitLines(b)[12], []byte(`"previous":"unsealed"`)) {
		t.Errorf("line 13 = %s, want an open record noting an unsealed predecessor", splitLines(b)[12])
	}
	rep, err = verify(VerifyOptions{})
	if err != nil || fmt.Sprint(rep.UnsealedEnds) != "[12]" {
		t.Errorf("got %+v, %v; want UnsealedEnds [12]", rep, err)
	}
	_, err = verify(VerifyOptions{Strict: true})
	var te *TamperError
	if !errors.As(err, &te) || te.Line != 12 || te.Kind != Truncated {
		t.Errorf("strict: got %v, want line 12 truncated", err)
	}

	// a crash mid-write: half a line at the end
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"seq":16,"prev":"00`)
	f.Close()
	if _, err := verify(VerifyOptions{}); !errors.As(err, &te) || te.Line != 16 || te.Kind != Truncated {
		t.Errorf("cut line before restart: got %v, want line 16 truncated", err)
	}
	session(1, true)
	rep, err = verify(VerifyOptions{})
	if err != nil || fmt.Sprint(rep.Recovered) != "[16]" || !rep.Sealed {
		t.Errorf("after restart: got %+v, %v; want line 16 recovered and a sealed log", rep, err)
	}
	// the damaged line is still covered: changing it is found
	b, _ = os.ReadFile(path)
	b = bytes.Replace(b, []byte(`{"seq":16,"prev":"00`+"\n"), []byte(`{"seq":16,"prev":"01`+"\n"), 1)
	if _, err := Verify(bytes.NewReader(b), VerifyOptions{}); !errors.As(err, &te) || te.Line != 16 || te.Kind != Malformed {
		t.Errorf("edited damaged line: got %v, want line 16 malformed", err)
	}
}

func TestOpenRefuses(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, content, want string
	}{
		{"not an audit log", "hello\nworld\n", "not an audit line"},
		{"foreign partial tail", `{"seq":1}` + "\nxyz", "not an audit line"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, strconv.Itoa(i))
			os.WriteFile(path, []byte(tt.content), 0o600)
			_, err := Open(path)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
			if b, _ := os.ReadFile(path); string(b) != tt.content {
				t.Errorf("refused file was changed: %q", b)
			}
		})
	}
	t.Run("second writer", func(t *testing.T) {
		path := filepath.Join(dir, "locked")
		s, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if _, err := Open(path); err == nil || !strings.Contains(err.Error(), "another egressd") {
			t.Errorf("second Open: got %v, want a lock error", err)
		}
	})
}

func TestParseAnchor(t *testing.T) {
	h := strings.Repeat("ab", 32)
	tests := []struct {
		name, in string
		want     Anchor
		ok       bool
	}{
		{"ok", "12:" + h, Anchor{12, h}, true},
		{"upper-case hash", "12:" + strings.ToUpper(h), Anchor{12, h}, true},
		{"seq 0", "0:" + h, Anchor{}, false},
		{"short hash", "12:abcd", Anchor{}, false},
		{"no colon", "12", Anchor{}, false},
		{"not hex", "12:" + strings.Repeat("zz", 32), Anchor{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseAnchor(tt.in)
			if (err == nil) != tt.ok || got != tt.want {
				t.Errorf("got %v, %v; want %v, ok=%v", got, err, tt.want, tt.ok)
			}
		})
	}
}

func FuzzVerify(f *testing.F) {
	clean := sealedLog(f, 3)
	f.Add(clean)
	f.Add(clean[:len(clean)-7])
	f.Add([]byte(`{"seq":1,"prev":"` + strings.Repeat("0", 64) + `","audit":"open"}` + "\n"))
	f.Add([]byte("\n\n{\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, o := range []VerifyOptions{{}, {Live: true}, {Strict: true}} {
			rep, err := Verify(bytes.NewReader(b), o)
			var te *TamperError
			switch {
			case err == nil:
				if rep.Lines < 1 || rep.Head.Seq < uint64(rep.Lines) {
					t.Fatalf("verified with %+v", rep)
				}
			case errors.As(err, &te):
				if te.Line < 1 || te.Line > bytes.Count(b, []byte{'\n'})+1 {
					t.Fatalf("line %d out of range: %v", te.Line, err)
				}
			default:
				t.Fatalf("non-tamper error on an in-memory reader: %v", err)
			}
		}
	})
}

// FuzzWriterVerify: whatever the records hold, the writer's log verifies,
// and changing any one byte before the last line is found.
func FuzzWriterVerify(f *testing.F) {
	f.Add("pypi.org", "/simple/\n\"x\"", uint8(3), uint16(100), byte(1))
	f.Add("\xff\xfe", "\u2028{}", uint8(0), uint16(0), byte('\n'))
	f.Fuzz(func(t *testing.T, host, path string, n uint8, pos uint16, x byte) {
		var buf bytes.Buffer
		s, err := NewSink(&buf)
		if err != nil {
			t.Fatal(err)
		}
		log := slog.New(s.Handler(nil)).WithGroup("g").With(host, path)
		for i := range int(n % 8) {
			log.Info(DecisionMsg, "host", host, "path", path, "i", i, slog.Group(path, host, time.Duration(i)))
		}
		s.Close()
		rep, err := Verify(bytes.NewReader(buf.Bytes()), VerifyOptions{Strict: true})
		if err != nil || rep.Records != int(n%8) {
			t.Fatalf("writer's log: got %+v, %v; want %d records\n%s", rep, err, n%8, buf.Bytes())
		}
		b := buf.Bytes()
		lastStart := bytes.LastIndexByte(b[:len(b)-1], '\n') + 1
		if x == 0 || lastStart == 0 {
			return
		}
		p := int(pos) % lastStart
		b[p] ^= x
		if _, err := Verify(bytes.NewReader(b), VerifyOptions{}); !errors.Is(err, ErrTampered) {
			t.Fatalf("byte %d changed: got %v, want tampered", p, err)
		}
	})
}

// BenchmarkHandler: one decision through the audit handler to a discarding
// writer (formatting, hashing, one Write), against the plain JSON handler.
func BenchmarkHandler(b *testing.B) {
	b.Run("json", func(b *testing.B) {
		log := slog.New(slog.NewJSONHandler(io.Discard, nil))
		b.ReportAllocs()
		for b.Loop() {
			logDecisions(log, 0, 1)
		}
	})
	b.Run("audit", func(b *testing.B) {
		s, _ := NewSink(io.Discard)
		log := slog.New(s.Handler(nil))
		b.ReportAllocs()
		for b.Loop() {
			logDecisions(log, 0, 1)
		}
	})
}
