// Package audit is egressd's tamper-evident decision log: an optional file
// sink in which every decision is one JSON line that carries a sequence
// number and the SHA-256 of the line before it, and a verifier that finds the
// first edited, removed, reordered, inserted or truncated line.
//
//	sink, err := audit.Open("/var/log/egressd/audit.jsonl") // resumes an existing chain
//	defer sink.Close()                                      // writes the seal
//	log := slog.New(sink.Handler(jsonToStderr))            // "decision" records go to both
//
//	rep, err := audit.Verify(f, audit.VerifyOptions{})     // *TamperError names line and kind
//
// A line looks like
//
//	{"seq":7,"prev":"<64 hex>","audit":"record","time":"…","level":"INFO","msg":"decision",…}
//
// where prev is the hex SHA-256 of line 6's bytes (without its newline); line 1
// is an "open" record whose prev is 64 zeros. Every session starts with an
// "open" record and a clean Close ends it with a "seal"; a writer that finds a
// line cut short by a crash terminates it and writes a "recover" record that
// hashes it, so the damage stays visible and the chain goes on.
//
// What the chain proves, and what it cannot:
//
//   - Any change to a line other than the last — an edit, a removed, duplicated,
//     inserted or reordered line, a removed head — breaks the chain at the first
//     such line, and Verify says which line and which kind.
//   - A tail cut to a line boundary is found only because the last line of a
//     closed log is a seal: Verify (without Live) reports a log that does not end
//     in one. A live log, or one whose writer was killed, has no seal, so for it
//     truncation to a line boundary is indistinguishable from "nothing more was
//     written" — unless an anchor is given (below).
//   - The hash is unkeyed: whoever can write the file can rewrite it from any
//     line on and recompute every later hash, seal included. The file alone
//     therefore proves integrity only against accidents and careless edits.
//     Against a deliberate rewrite it needs an anchor kept elsewhere: every
//     decision the Handler passes on (to stderr, shipped off the host by the
//     log stack) carries audit_seq and audit_hash, and Verify checks any such
//     anchor against the file; a rewrite or truncation at or below an anchored
//     line is then found. Lines after the newest anchor stay unprotected.
//   - The content of the final line (the seal's time) is not covered by any
//     later hash; only an anchor covers it.
//   - With a signing key (OpenWith, Options.Sign; sign.go), signed
//     checkpoint lines follow every open, seal and recover record and at
//     most every Records lines or Interval, and Verify with the public key
//     fails a consistent rewrite at the first line no valid signature
//     covers. Whoever holds the private key can still sign anything.
//
// Lines reach the kernel with one write(2) each, so a process crash loses
// nothing already logged; a power loss may lose what the page cache held, and
// Verify then reports a tail without a seal. One process writes a file at a
// time (Open takes an exclusive flock).
//
// A write that fails (a full disk) is taken back whole: the file is truncated
// to the end of the last complete line, so a failure never leaves a line
// that reads as tampering. The sink is then failing (OK reports it, OnChange
// hears each change of state once, WriteErrors counts) and every later
// record tries again; the first line written once space returns is a "lost"
// record counting the lines that could not be written, so the gap is in the
// chain. Open on a full disk starts failing rather than refusing: its open
// record waits for space like the rest. Only a short write to a writer that
// cannot be truncated (NewSink) stops the chain for good.
package audit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/egressd/egressd/event"
)

// DecisionMsg is the message of the records the Handler writes to the audit
// log: the proxy's canonical decision line (package event's schema).
const DecisionMsg = event.Msg

// MaxLineBytes bounds one audit line. A record that would be longer is
// written as a stub naming its size, and Verify refuses longer lines.
const MaxLineBytes = 1 << 20

// Record kinds, the value of the "audit" key of every line.
const (
	kindOpen    = "open"    // a session starts
	kindRecord  = "record"  // a decision
	kindSeal    = "seal"    // a session ended cleanly
	kindRecover = "recover" // acknowledges a line cut short by a crash
	kindLost    = "lost"    // lines that could not be written (full disk) before this one
)

// ErrClosed is returned (wrapped) for records logged after Close.
var ErrClosed = errors.New("audit log closed")

// Sink appends hash-chained lines to one writer. It is safe for concurrent
// use; lines are written in the order they are chained.
type Sink struct {
	mu     sync.Mutex
	w      io.Writer
	f      *os.File // set by Open: synced, unlocked and closed by Close
	seq    uint64   // seq of the last line written
	prev   [32]byte // SHA-256 of the last line written
	err    error    // sticky: a partial line that could not be taken back
	closed bool
	buf    bytes.Buffer // JSON of the record being written
	line   []byte
	now    func() time.Time

	off        int64         // file size after the last complete line (Open)
	failing    error         // the last write error while writes fail, else nil
	werrs      uint64        // failed writes, ever
	lost       int           // records not written since the last good write
	pending    []pendingMeta // open/recover records waiting for space
	onChange   func(ok bool, err error)
	reportedOK bool    // the state onChange last heard (or OnChange found)
	sign       *signer // signed checkpoints (sign.go); nil: none
	// tunnelsOpen is how many tunnel open records of this session have
	// no close record written yet: the seal states it, and Verify reports
	// a sealed session where it is not 0 as incomplete.
	tunnelsOpen int
}

// pendingMeta is a session record that could not be written yet.
type pendingMeta struct {
	kind string
	kv   []any
}

// NewSink starts a new chain on w (seq 1 is an "open" record, written now).
// Use it for writers that cannot be read back; Open resumes files. Close
// writes the seal but does not close w.
func NewSink(w io.Writer) (*Sink, error) { return NewSinkWith(w, Options{}) }

// NewSinkWith is NewSink with options (signed checkpoints).
func NewSinkWith(w io.Writer, o Options) (*Sink, error) {
	sg, err := newSigner(o.Sign)
	if err != nil {
		return nil, err
	}
	s := &Sink{w: w, now: time.Now, reportedOK: true, sign: sg}
	if err := s.session(kindOpen, "previous", "new"); err != nil {
		return nil, err
	}
	if sg != nil {
		s.startTicker()
	}
	return s, nil // failing (see OK) if the open record could not be written yet
}

// Open opens or creates the audit log at path (mode 0640) for appending and
// takes an exclusive lock on it. An existing log's chain is continued: the
// new session's "open" record hashes the file's last line and says whether
// the previous session ended with a seal. A last line cut short by a crash is
// terminated and acknowledged by a "recover" record. A file whose last line
// is not an audit line is refused, never appended to.
func Open(path string) (*Sink, error) { return OpenWith(path, Options{}) }

// OpenWith is Open with options: with o.Sign, a signed checkpoint follows
// every open, seal and recover record and at most every Records lines or
// Interval.
func OpenWith(path string, o Options) (*Sink, error) {
	sg, err := newSigner(o.Sign)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("open audit log: %w", err)
	}
	if err := lockFile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("open audit log %s: lock: %w (is another egressd writing it?)", path, err)
	}
	s := &Sink{w: f, f: f, now: time.Now, reportedOK: true, sign: sg}
	if err := s.resume(path); err != nil {
		f.Close()
		return nil, err
	}
	if sg != nil {
		s.startTicker()
	}
	return s, nil
}

// resume reads the end of the file and writes the session's first lines.
func (s *Sink) resume(path string) error {
	fi, err := s.f.Stat()
	if err != nil {
		return fmt.Errorf("open audit log: %w", err)
	}
	s.off = fi.Size()
	if fi.Size() == 0 {
		return s.session(kindOpen, "previous", "new")
	}
	// The last complete line and a partial one after it each fit in
	// MaxLineBytes+1 bytes.
	n := min(fi.Size(), 2*(MaxLineBytes+1))
	tail := make([]byte, n)
	if _, err := s.f.ReadAt(tail, fi.Size()-n); err != nil {
		return fmt.Errorf("open audit log %s: read tail: %w", path, err)
	}
	cut := bytes.LastIndexByte(tail, '\n')
	partial := tail[cut+1:]
	complete := tail[:cut+1]
	previous := "unsealed"
	if len(complete) > 0 {
		complete = complete[:len(complete)-1]
		last := complete[bytes.LastIndexByte(complete, '\n')+1:]
		if n < fi.Size() && len(last) == len(complete) {
			return fmt.Errorf("open audit log %s: last line longer than %d bytes: not an egressd audit log; move it aside", path, MaxLineBytes)
		}
		h, err := parseHeader(last)
		if err != nil {
			return fmt.Errorf("open audit log %s: last line is not an audit line (%v): move the file aside rather than append to it", path, err)
		}
		s.seq, s.prev = h.seq, sha256.Sum256(last)
		if h.kind == kindSeal {
			previous = "sealed"
		} else if c, err := ParseCheckpoint(last); err == nil && c.At == AtSeal {
			previous = "sealed"
		}
		s.rotation(complete)
	} else if n < fi.Size() {
		return fmt.Errorf("open audit log %s: no line break in the last %d bytes: not an egressd audit log; move it aside", path, n)
	}
	if len(partial) > 0 {
		if !bytes.HasPrefix(partial, headerStart) && !bytes.HasPrefix(headerStart, partial) {
			return fmt.Errorf("open audit log %s: it ends in %d bytes that are not an audit line: move the file aside rather than append to it", path, len(partial))
		}
		// The partial line took the next seq; terminate it and chain over it.
		if _, err := s.f.Write([]byte{'\n'}); err != nil {
			return fmt.Errorf("open audit log %s: terminate partial line: %w", path, err)
		}
		s.off++
		s.seq, s.prev = s.seq+1, sha256.Sum256(partial)
		if err := s.session(kindRecover, "partial_bytes", len(partial)); err != nil {
			return err
		}
	}
	return s.session(kindOpen, "previous", previous)
}

// session writes an open or recover record, or queues it while writes
// fail: a full disk must not keep egressd from starting.
func (s *Sink) session(kind string, kv ...any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.flushLocked(); err != nil {
		s.pending = append(s.pending, pendingMeta{kind, kv})
		return s.err // nil unless the chain stopped for good
	}
	if err := s.metaLocked(kind, kv...); err != nil {
		s.pending = append(s.pending, pendingMeta{kind, kv})
		return s.err
	}
	return nil
}

// flushLocked writes what failing writes left behind — queued session
// records, then a "lost" record — before the next line.
func (s *Sink) flushLocked() error {
	if err := s.owedLocked(); err != nil {
		return err
	}
	for len(s.pending) > 0 {
		m := s.pending[0]
		if err := s.metaLocked(m.kind, m.kv...); err != nil {
			return err
		}
		s.pending = s.pending[1:]
		if err := s.owedLocked(); err != nil {
			return err
		}
	}
	if s.lost > 0 {
		if err := s.metaLocked(kindLost, "lines", s.lost); err != nil {
			return err
		}
		s.lost = 0
	}
	return nil
}

// OnChange sets f to be called, outside the sink's lock, each time writes
// start failing (ok false, with the error) or work again (ok true).
//
// The state it hears is the state after a whole write: a small record that
// fits where the line before did not does not make a failing log look
// healthy for a moment.
func (s *Sink) OnChange(f func(ok bool, err error)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onChange = f
	s.reportedOK = s.failing == nil && s.err == nil
}

// OK reports whether the last write succeeded; if not, its error.
func (s *Sink) OK() (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return false, s.err
	}
	return s.failing == nil, s.failing
}

// WriteErrors counts failed writes since the sink was made.
func (s *Sink) WriteErrors() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.werrs
}

// Retry writes what failing writes left behind (nothing if writes work):
// call it periodically while OK is false, so that a log with no traffic
// (refused while failing) still finds out that space returned.
//
// While the file system has less than retryFreeBytes free, Retry writes
// nothing: a few bytes of slack may take a small record but not the next
// decision, and the log would look healthy for one request.
func (s *Sink) Retry() error {
	s.mu.Lock()
	defer s.unlock()
	if err := s.usable(); err != nil {
		return err
	}
	if s.failing != nil && s.f != nil {
		if free, ok := freeBytes(s.f); ok && free < retryFreeBytes {
			return s.failing
		}
	}
	return s.flushLocked()
}

// retryFreeBytes is the free space Retry wants before it writes.
const retryFreeBytes = 64 << 10

// unlock releases mu and tells onChange if the state differs from what
// it last heard.
func (s *Sink) unlock() {
	f := s.onChange
	ok, err := s.failing == nil && s.err == nil, s.failing
	if s.err != nil {
		err = s.err
	}
	changed := ok != s.reportedOK
	s.reportedOK = ok
	s.mu.Unlock()
	if changed && f != nil {
		f(ok, err)
	}
}

// Close ends the session with a seal record and, for a file from Open, syncs,
// unlocks and closes it. Records logged after Close are not written.
func (s *Sink) Close() error {
	s.stopTicker()
	s.mu.Lock()
	defer s.unlock()
	if s.closed {
		return nil
	}
	// seal and close under one lock: no record may follow the seal
	err := s.flushLocked()
	if err == nil {
		err = s.metaLocked(kindSeal, sealTunnelsOpen, s.tunnelsOpen)
	}
	if err == nil {
		err = s.owedLocked() // the seal's checkpoint
	}
	if err != nil {
		err = fmt.Errorf("audit log not sealed: %w", err)
	}
	s.closed = true
	if s.f != nil {
		if serr := s.f.Sync(); serr != nil && err == nil {
			err = fmt.Errorf("sync audit log: %w", serr)
		}
		if cerr := s.f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close audit log: %w", cerr)
		}
	}
	return err
}

// Err returns the error of a short write that could not be taken back
// and stopped the chain, or nil (a write that failed whole does not stop
// it: see OK). A restart (Open) acknowledges the partial line and goes on.
func (s *Sink) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Head returns the seq and hash of the last line written: an anchor to keep
// elsewhere and give to Verify.
func (s *Sink) Head() Anchor {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Anchor{Seq: s.seq, Hash: hex.EncodeToString(s.prev[:])}
}

var headerStart = []byte(`{"seq":`)

// metaLocked writes an open, seal or recover line: its time and the
// key/value pairs given (string or int values). The caller holds s.mu.
func (s *Sink) metaLocked(kind string, kv ...any) error {
	if err := s.usable(); err != nil {
		return err
	}
	b := s.buf.AvailableBuffer()
	b = append(b, `"time":`...)
	b = strconv.AppendQuote(b, s.now().UTC().Format(time.RFC3339Nano))
	for i := 0; i+1 < len(kv); i += 2 {
		b = append(b, ',')
		b = strconv.AppendQuote(b, kv[i].(string))
		b = append(b, ':')
		switch v := kv[i+1].(type) {
		case string:
			b = strconv.AppendQuote(b, v)
		case int:
			b = strconv.AppendInt(b, int64(v), 10)
		}
	}
	b = append(b, '}')
	if _, err := s.emit(kind, b); err != nil {
		return err
	}
	s.signedLine(kind)
	if kind != kindSeal {
		s.owedLocked() //nolint:errcheck // a checkpoint that fails stays owed: the next line written
	}
	return nil
}

func (s *Sink) usable() error {
	if s.closed {
		return ErrClosed
	}
	return s.err
}

// emit writes one line: the chain header, then rest, the body of a JSON
// object after its '{'. The caller holds s.mu.
func (s *Sink) emit(kind string, rest []byte) (Anchor, error) {
	line := s.header(s.line[:0], kind)
	if len(rest) > 0 && rest[0] != '}' {
		line = append(line, ',')
	}
	line = append(line, rest...)
	if len(line) > MaxLineBytes {
		// Unreachable for the proxy's bounded fields; never drop a
		// decision silently.
		size := len(line)
		line = s.header(line[:0], kind)
		line = append(line, `,"time":`...)
		line = strconv.AppendQuote(line, s.now().UTC().Format(time.RFC3339Nano))
		line = append(line, `,"audit_oversize":`...)
		line = strconv.AppendInt(line, int64(size), 10)
		line = append(line, '}')
	}
	line = append(line, '\n')
	s.line = line
	if n, err := s.w.Write(line); err != nil || n != len(line) {
		if err == nil {
			err = io.ErrShortWrite
		}
		err = fmt.Errorf("write audit line seq %d: %w", s.seq+1, err)
		s.werrs++
		if n > 0 && !s.takeBack() {
			s.err = fmt.Errorf("%w; the partial line could not be taken back: the chain stops here until a restart", err)
			err = s.err
		}
		s.failing = err
		return Anchor{}, err
	}
	s.off += int64(len(line))
	s.failing = nil
	s.seq++
	s.prev = sha256.Sum256(line[:len(line)-1])
	return Anchor{Seq: s.seq, Hash: hex.EncodeToString(s.prev[:])}, nil
}

// takeBack truncates the file to its last complete line after a short
// write; false if there is no file or the truncate failed.
func (s *Sink) takeBack() bool {
	return s.f != nil && s.f.Truncate(s.off) == nil
}

func (s *Sink) header(b []byte, kind string) []byte {
	b = append(b, headerStart...)
	b = strconv.AppendUint(b, s.seq+1, 10)
	b = append(b, `,"prev":"`...)
	b = hex.AppendEncode(b, s.prev[:])
	b = append(b, `","audit":"`...)
	b = append(b, kind...)
	return append(b, '"')
}

// Handler returns an slog.Handler that writes every record whose message is
// DecisionMsg to the audit log and passes every record on to next (nil: none).
// Decisions passed on carry audit_seq and audit_hash — the anchor of their
// audit line — or audit_error when the line could not be written. Decisions
// are audited at Info and above whatever level next enables.
func (s *Sink) Handler(next slog.Handler) slog.Handler {
	// The inner JSON handler formats into s.buf, which only Handle touches,
	// under s.mu.
	inner := slog.NewJSONHandler(&s.buf, &slog.HandlerOptions{Level: slog.LevelDebug})
	return &handler{s: s, inner: inner, next: next}
}

type handler struct {
	s     *Sink
	inner slog.Handler
	next  slog.Handler
}

var _ slog.Handler = (*handler)(nil)

func (h *handler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || (h.next != nil && h.next.Enabled(ctx, l))
}

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	nextOn := h.next != nil && h.next.Enabled(ctx, r.Level)
	if r.Message != DecisionMsg {
		if nextOn {
			return h.next.Handle(ctx, r)
		}
		return nil
	}
	a, err := h.write(ctx, r)
	if !nextOn {
		return err
	}
	r = r.Clone()
	if err != nil {
		r.AddAttrs(slog.String("audit_error", err.Error()))
	} else {
		r.AddAttrs(slog.Uint64("audit_seq", a.Seq), slog.String("audit_hash", a.Hash))
	}
	return errors.Join(err, h.next.Handle(ctx, r))
}

func (h *handler) write(ctx context.Context, r slog.Record) (Anchor, error) {
	s := h.s
	s.mu.Lock()
	defer s.unlock()
	if err := s.usable(); err != nil {
		return Anchor{}, err
	}
	if err := s.flushLocked(); err != nil {
		s.lost++
		return Anchor{}, err
	}
	s.buf.Reset()
	if err := h.inner.Handle(ctx, r); err != nil {
		return Anchor{}, fmt.Errorf("format audit record: %w", err)
	}
	body := bytes.TrimSuffix(s.buf.Bytes(), []byte{'\n'})
	if len(body) < 2 || body[0] != '{' {
		return Anchor{}, fmt.Errorf("format audit record: unexpected JSON %.40q", body)
	}
	a, err := s.emit(kindRecord, body[1:])
	if err != nil && s.err == nil {
		s.lost++
	}
	if err == nil {
		s.tunnelsOpen += tunnelDelta(r)
		s.signedLine(kindRecord)
		s.owedLocked() //nolint:errcheck // stays owed; the record itself was written
	}
	return a, err
}

// sealTunnelsOpen is the seal's count of tunnels whose close record was
// never written.
const sealTunnelsOpen = "tunnels_open"

// tunnelDelta is +1 for a tunnel's open record, -1 for its close record,
// 0 for any other.
func tunnelDelta(r slog.Record) int {
	d := 0
	r.Attrs(func(a slog.Attr) bool {
		if a.Key != event.KeyTunnel {
			return true
		}
		switch a.Value.String() {
		case event.TunnelOpen:
			d = 1
		case event.TunnelClose:
			d = -1
		}
		return false
	})
	return d
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.inner = h.inner.WithAttrs(as)
	if h.next != nil {
		c.next = h.next.WithAttrs(as)
	}
	return &c
}

func (h *handler) WithGroup(name string) slog.Handler {
	c := *h
	c.inner = h.inner.WithGroup(name)
	if h.next != nil {
		c.next = h.next.WithGroup(name)
	}
	return &c
}
