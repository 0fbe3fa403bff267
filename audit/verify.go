package audit

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/egressd/egressd/event"
)

// Kind says how a log was tampered with.
type Kind string

// The kinds Verify reports.
const (
	Malformed Kind = "malformed" // not an audit line (and no writer acknowledged it as crash damage)
	Edited    Kind = "edited"    // a line's bytes changed, or a line does not match its anchor
	Removed   Kind = "removed"   // lines missing from the head or the middle
	Reordered Kind = "reordered" // lines out of sequence order
	Inserted  Kind = "inserted"  // a duplicated line, or a line the writer could not have written there
	Truncated Kind = "truncated" // the tail is missing: no seal, a cut line, or an anchor beyond the end
	Unsigned  Kind = "unsigned"  // with a key: no valid signature covers the line
	// Incomplete: the chain is intact, but a session was sealed with
	// tunnels whose close record was never written (records lost at a
	// stop that did not wait for them).
	Incomplete Kind = "incomplete"
)

// ErrTampered is wrapped by every *TamperError.
var ErrTampered = errors.New("audit log tampered")

// TamperError names the first bad line (1-based) and what is wrong with it.
type TamperError struct {
	Line   int
	Kind   Kind
	Detail string
}

func (e *TamperError) Error() string {
	return fmt.Sprintf("line %d: %s: %s", e.Line, e.Kind, e.Detail)
}

func (e *TamperError) Unwrap() error { return ErrTampered }

// Anchor is a line's seq and the hex SHA-256 of its bytes, recorded outside
// the file (audit_seq and audit_hash of a decision on stderr, or Sink.Head).
type Anchor struct {
	Seq  uint64
	Hash string
}

// String formats the anchor as "SEQ:HASH", as ParseAnchor reads it.
func (a Anchor) String() string { return strconv.FormatUint(a.Seq, 10) + ":" + a.Hash }

// ParseAnchor reads "SEQ:HASH" (HASH: 64 hex digits).
func ParseAnchor(s string) (Anchor, error) {
	seqStr, h, ok := strings.Cut(s, ":")
	seq, err := strconv.ParseUint(seqStr, 10, 64)
	h = strings.ToLower(h)
	if !ok || err != nil || seq == 0 || len(h) != 64 || !isHex(h) {
		return Anchor{}, fmt.Errorf("parse anchor %q: want SEQ:HASH, HASH 64 hex digits (audit_seq and audit_hash of a logged decision)", s)
	}
	return Anchor{Seq: seq, Hash: h}, nil
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// VerifyOptions relax or tighten Verify. The zero value checks a closed log:
// it must end with a seal.
type VerifyOptions struct {
	// Live accepts a log that is still being written: no seal at the end, and
	// an incomplete last line (ignored). Truncation to a line boundary is
	// then detectable only with Anchors.
	Live bool
	// Strict fails a log in which a session ended without a seal before a
	// later session opened (a crash, a kill, or a truncated tail that was
	// appended to). Without it such ends are listed in Report.UnsealedEnds.
	Strict bool
	// Anchors are heads recorded elsewhere; each must name a line of the log
	// with exactly that hash.
	Anchors []Anchor
	// Key, when set, requires every line to be covered by a checkpoint
	// signed by Key or by a key announced (rotation) in a checkpoint that
	// Key, or a key it announced, signed. With Live, lines after the last
	// checkpoint are reported (Report.UnsignedFrom) rather than refused.
	Key ed25519.PublicKey
	// FinalKey is the key the log must end signed with (the current
	// audit.pub after a rotation, Key the first one): without it, whoever
	// holds a retired key can cut the log back to before the rotation and
	// sign a continuation. Alone, it is Key too (no rotation expected).
	FinalKey ed25519.PublicKey
}

// Report describes a log that verified.
type Report struct {
	Lines        int    // complete lines read
	Records      int    // decision records (tunnel open and close records are counted in Tunnels)
	Sessions     int    // open records (one per writer start)
	Sealed       bool   // the last line is a seal
	Head         Anchor // the last line
	Recovered    []int  // lines cut short by a crash and acknowledged by the writer
	UnsealedEnds []int  // last lines of sessions that ended without a seal
	PartialTail  bool   // Live only: an incomplete last line was ignored
	Lost         int    // "lost" records: places where failed writes (a full disk) left lines out
	Tunnels      int    // tunnel open records
	OpenTunnels  int    // Live: tunnels of the last session with no close record yet

	Checkpoints    int         // checkpoint lines
	LastCheckpoint *Checkpoint // the last one, nil if none
	SignedLines    int         // with Key: lines 1..SignedLines are covered by a valid signature
	UnsignedFrom   int         // with Key and Live: the first line of the unsigned tail (0: none)
	KeyIDs         []string    // with Key: the keys that signed, in order (more than one after a rotation)
}

type header struct {
	seq  uint64
	prev [32]byte
	kind string
}

// parseHeader checks a line's fixed chain header and that the whole line is
// one JSON object. The header is read at fixed positions, so a record field
// that repeats a header key cannot change what Verify sees.
func parseHeader(line []byte) (header, error) {
	var h header
	rest, ok := bytes.CutPrefix(line, headerStart)
	if !ok {
		return h, errors.New(`does not start with the {"seq": header`)
	}
	n := 0
	for n < len(rest) && n < 21 && '0' <= rest[n] && rest[n] <= '9' {
		n++
	}
	seq, err := strconv.ParseUint(string(rest[:n]), 10, 64)
	if err != nil || seq == 0 || rest[0] == '0' {
		return h, fmt.Errorf("seq %.24q is not a positive integer", rest[:n])
	}
	h.seq, rest = seq, rest[n:]
	if rest, ok = bytes.CutPrefix(rest, []byte(`,"prev":"`)); !ok || len(rest) < 64 || !isHex(string(rest[:64])) {
		return h, errors.New("no prev hash (64 lower-case hex digits) after seq")
	}
	hex.Decode(h.prev[:], rest[:64])
	if rest, ok = bytes.CutPrefix(rest[64:], []byte(`","audit":"`)); !ok {
		return h, errors.New(`no "audit" kind after prev`)
	}
	kind, rest, ok := bytes.Cut(rest, []byte{'"'})
	switch k := string(kind); k {
	case kindOpen, kindRecord, kindSeal, kindRecover, kindLost, kindCheckpoint:
		h.kind = k
	default:
		return h, fmt.Errorf("unknown audit kind %.20q", kind)
	}
	if !ok || len(rest) == 0 || (rest[0] != ',' && rest[0] != '}') || !json.Valid(line) {
		return h, errors.New("not one JSON object")
	}
	return h, nil
}

// lineReader yields lines of at most MaxLineBytes without their newline.
type lineReader struct {
	br   *bufio.Reader
	buf  []byte
	line int // lines returned so far
}

// next returns the next line; complete is false for a last line without a
// newline; tooLong reports a line over MaxLineBytes (its bytes are dropped).
func (lr *lineReader) next() (line []byte, complete, tooLong bool, err error) {
	lr.buf = lr.buf[:0]
	for {
		chunk, err := lr.br.ReadSlice('\n')
		if !tooLong {
			if len(lr.buf)+len(chunk) > MaxLineBytes+1 {
				tooLong, lr.buf = true, lr.buf[:0]
			} else {
				lr.buf = append(lr.buf, chunk...)
			}
		}
		switch {
		case err == nil:
			lr.line++
			return lr.buf[:max(len(lr.buf)-1, 0)], true, tooLong, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == io.EOF:
			if len(lr.buf) == 0 && !tooLong {
				return nil, false, false, io.EOF
			}
			lr.line++
			return lr.buf, false, tooLong, nil
		default:
			return nil, false, false, fmt.Errorf("read audit log: %w", err)
		}
	}
}

// Verify reads an audit log and returns its Report, or a *TamperError for
// the first bad line (errors.Is(err, ErrTampered)), or a read error.
func Verify(r io.Reader, o VerifyOptions) (Report, error) {
	var rep Report
	anchors := map[uint64]string{}
	for _, a := range o.Anchors {
		anchors[a.Seq] = strings.ToLower(a.Hash)
	}
	lr := &lineReader{br: bufio.NewReaderSize(r, 64<<10)}
	var (
		prevSeq  uint64
		prevHash [32]byte
		prevKind string
		bad      *badLine                        // a malformed line awaiting its recover record
		sealed   bool                            // the last line other than a checkpoint is a seal
		kr       = newKeyring(o.Key, o.FinalKey) // nil without a key
		open     int                             // the session's tunnels without a close record yet
	)
	fail := func(line int, k Kind, format string, args ...any) (Report, error) {
		return rep, &TamperError{Line: line, Kind: k, Detail: fmt.Sprintf(format, args...)}
	}
	for {
		line, complete, tooLong, err := lr.next()
		if err == io.EOF {
			break
		} else if err != nil {
			return rep, err
		}
		n := lr.line
		if !complete {
			if bad != nil {
				return bad.fail(rep)
			}
			if o.Live {
				rep.PartialTail = true
				break
			}
			return fail(n, Truncated, "the last line has no newline: the log was cut mid-line, or its writer died mid-write (a restart acknowledges that)")
		}
		sum := sha256.Sum256(line)
		h, perr := header{}, errors.New("longer than MaxLineBytes")
		if !tooLong {
			h, perr = parseHeader(line)
		}
		if perr != nil {
			if bad != nil {
				return bad.fail(rep)
			}
			bad = &badLine{line: n, hash: sum, err: perr}
			continue
		}
		if bad != nil {
			// Only the writer's recover record, chained over the damaged
			// line, excuses it.
			if h.kind != kindRecover || h.prev != bad.hash || h.seq != prevSeq+2 {
				return bad.fail(rep)
			}
			rep.Recovered = append(rep.Recovered, bad.line)
			bad = nil
		} else if te := lineError(lr, n, h, sum, prevSeq, prevHash, prevKind, sealed, o.Strict, &rep); te != nil {
			return rep, te
		}
		if sealed, err = afterLine(line, n, h.kind, prevKind, sealed, kr, &rep); err != nil {
			return rep, err
		}
		if te := rep.countTunnels(n, h.kind, line, &open); te != nil {
			return rep, te
		}
		rep.count(h.kind, line)
		if te := anchorError(anchors, n, h.seq, sum); te != nil {
			return rep, te
		}
		prevSeq, prevHash, prevKind = h.seq, sum, h.kind
		rep.Lines = n
	}
	if bad != nil {
		return bad.fail(rep)
	}
	rep.Head = Anchor{Seq: prevSeq, Hash: hex.EncodeToString(prevHash[:])}
	rep.Sealed = sealed
	rep.OpenTunnels = open
	if rep.Lines == 0 {
		return fail(1, Truncated, "no complete line: an audit log starts with an open record")
	}
	if te := anchorsLeftError(anchors, rep.Lines, prevSeq); te != nil {
		return rep, te
	}
	if !rep.Sealed && !o.Live {
		return fail(rep.Lines+1, Truncated, "the log ends after line %d (seq %d) without a seal: its tail was removed, or egressd is still writing it (verify with --live) or stopped without closing it", rep.Lines, prevSeq)
	}
	if te := kr.finish(&rep, o.Live); te != nil {
		return rep, te
	}
	return rep, nil
}

// lineError checks line n (not excused as crash damage): no stray
// recover record, the chain, and the session's record kinds.
func lineError(lr *lineReader, n int, h header, sum [32]byte, prevSeq uint64, prevHash [32]byte, prevKind string, sealed, strict bool, rep *Report) *TamperError {
	if h.kind == kindRecover {
		return tamper(n, Inserted, "a recover record with no damaged line before it")
	}
	if te := chainError(lr, n, h, sum, prevSeq, prevHash); te != nil {
		return te
	}
	return sessionError(n, h.kind, prevKind, sealed, strict, rep)
}

// tamper makes the error for line n.
func tamper(line int, k Kind, format string, args ...any) *TamperError {
	return &TamperError{Line: line, Kind: k, Detail: fmt.Sprintf(format, args...)}
}

// chainError checks that line n (header h, hash sum) follows the line
// before (prevSeq, prevHash): the next seq, chained to its hash.
func chainError(lr *lineReader, n int, h header, sum [32]byte, prevSeq uint64, prevHash [32]byte) *TamperError {
	want := prevSeq + 1
	switch {
	case h.prev == prevHash && h.seq != want:
		return tamper(n, Edited, "seq %d where %d was due, yet it chains to the line before: its seq was changed", h.seq, want)
	case h.prev == prevHash:
		// in order and chained
	case h.seq == want && n == 1:
		return tamper(n, Edited, "seq 1 but prev is not the genesis hash (64 zeros)")
	case h.seq == want:
		return tamper(n-1, Edited, "its hash is not line %d's prev: line %d was changed (or line %d's prev was)", n, n-1, n)
	case h.seq > want:
		if at, ok := lookahead(lr, want, h.seq); ok {
			return tamper(n, Reordered, "seq %d where %d was due; seq %d is at line %d", h.seq, want, want, at)
		}
		if n == 1 {
			return tamper(n, Removed, "the log starts at seq %d: its first %d line(s) were removed", h.seq, h.seq-1)
		}
		return tamper(n, Removed, "seq %d follows seq %d: %d line(s) removed before this line", h.seq, prevSeq, h.seq-want)
	case sum == prevHash:
		return tamper(n, Inserted, "repeats line %d", n-1)
	default:
		return tamper(n, Reordered, "seq %d comes after seq %d", h.seq, prevSeq)
	}
	return nil
}

// sessionError checks the record kinds around line n: a log opens, a seal
// ends a session, and a new session after an unsealed one is noted in rep
// (an error when strict).
func sessionError(n int, kind, prevKind string, sealed, strict bool, rep *Report) *TamperError {
	switch {
	case n == 1 && kind != kindOpen:
		return tamper(n, Edited, "the first line is a %q record, not an open record", kind)
	case sealed && kind != kindOpen && (kind != kindCheckpoint || prevKind != kindSeal):
		return tamper(n, Inserted, "a %q record after a seal: a closed session was appended to", kind)
	case kind == kindOpen && n > 1 && !sealed:
		if strict {
			return tamper(n-1, Truncated, "the session ends here without a seal, and line %d opens another: a crash, a kill, or a truncated tail", n)
		}
		rep.UnsealedEnds = append(rep.UnsealedEnds, n-1)
	}
	return nil
}

// Tunnel records, as the JSON handler writes the keys of package event:
// a string value's quotes are escaped, so these bytes are only ever the
// record's own key and value.
var (
	tunnelOpenKV  = []byte(`"` + event.KeyTunnel + `":"` + event.TunnelOpen + `"`)
	tunnelCloseKV = []byte(`"` + event.KeyTunnel + `":"` + event.TunnelClose + `"`)
)

// countTunnels follows the session's open tunnels (open) over line n of
// kind: an open record adds one, a close record takes one; a seal must
// state the same count, and a sealed session with a tunnel that has no
// close record is incomplete (its end was never recorded).
func (rep *Report) countTunnels(n int, kind string, line []byte, open *int) *TamperError {
	switch kind {
	case kindOpen:
		*open = 0 // a crash ended the last session: its tunnels ended with it
	case kindRecord:
		switch {
		case bytes.Contains(line, tunnelOpenKV):
			*open++
			rep.Tunnels++
		case bytes.Contains(line, tunnelCloseKV):
			*open--
		}
	case kindSeal:
		var seal struct {
			Open *int `json:"tunnels_open"`
		}
		json.Unmarshal(line, &seal) //nolint:errcheck // parseHeader checked it is one JSON object
		if seal.Open != nil && *seal.Open != *open {
			return tamper(n, Incomplete, "the seal states %d open tunnel(s), the session's records leave %d", *seal.Open, *open)
		}
		if *open > 0 {
			return tamper(n, Incomplete, "sealed with %d tunnel(s) whose close record was never written: their end is not in the log", *open)
		}
	}
	return nil
}

// count counts a line of kind in the report's totals.
func (rep *Report) count(kind string, line []byte) {
	switch kind {
	case kindOpen:
		rep.Sessions++
	case kindRecord:
		if !bytes.Contains(line, tunnelOpenKV) && !bytes.Contains(line, tunnelCloseKV) {
			rep.Records++ // a decision
		}
	case kindLost:
		rep.Lost++
	}
}

// anchorError checks line n (seq, hash sum) against an anchor for its seq,
// and removes the anchor it matched.
func anchorError(anchors map[uint64]string, n int, seq uint64, sum [32]byte) *TamperError {
	want, ok := anchors[seq]
	if !ok {
		return nil
	}
	if got := hex.EncodeToString(sum[:]); got != want {
		return tamper(n, Edited, "seq %d hashes to %s, not to the anchor %s: the log was rewritten at or before this line", seq, got, want)
	}
	delete(anchors, seq)
	return nil
}

// anchorsLeftError explains anchors that no line of the log (lines
// lines, last seq lastSeq) matched; nil when none is left.
func anchorsLeftError(anchors map[uint64]string, lines int, lastSeq uint64) *TamperError {
	if len(anchors) == 0 {
		return nil
	}
	left := make([]uint64, 0, len(anchors))
	for seq := range anchors {
		left = append(left, seq)
	}
	slices.Sort(left)
	if left[len(left)-1] > lastSeq {
		return tamper(lines+1, Truncated, "the log ends at seq %d, but the anchor %d:%s lies beyond it: its tail was removed", lastSeq, left[len(left)-1], anchors[left[len(left)-1]])
	}
	return tamper(lines, Edited, "no line has the anchored seq %d", left[0])
}

type badLine struct {
	line int
	hash [32]byte
	err  error
}

func (b *badLine) fail(rep Report) (Report, error) {
	return rep, &TamperError{Line: b.line, Kind: Malformed, Detail: b.err.Error()}
}

// lookahead reads on (the log is already known to be bad) for a line whose
// seq lies in [lo, hi), to tell reordered lines from removed ones.
func lookahead(lr *lineReader, lo, hi uint64) (int, bool) {
	for {
		line, complete, tooLong, err := lr.next()
		if err != nil || !complete {
			return 0, false
		}
		if tooLong {
			continue
		}
		if h, err := parseHeader(line); err == nil && lo <= h.seq && h.seq < hi {
			return lr.line, true
		}
	}
}

// keyring follows the signing key through rotations: the key trusted now,
// and the ones rotated away from, whose signatures no longer count.
type keyring struct {
	cur     ed25519.PublicKey
	curID   string
	ids     []string
	retired map[string]bool
	finalID string // the key the log must end with; "" any
}

// newKeyring starts at pub (final when pub is nil: no rotation expected);
// nil without either.
func newKeyring(pub, final ed25519.PublicKey) *keyring {
	if pub == nil {
		pub = final
	}
	if pub == nil {
		return nil
	}
	kr := &keyring{cur: pub, curID: KeyID(pub), ids: []string{KeyID(pub)}, retired: map[string]bool{}}
	if final != nil {
		kr.finalID = KeyID(final)
	}
	return kr
}

// afterLine checks a checkpoint line (kind) and returns whether the log
// is sealed after line n: a seal, or the checkpoint after one.
func afterLine(line []byte, n int, kind, prevKind string, sealed bool, kr *keyring, rep *Report) (bool, error) {
	if kind != kindCheckpoint {
		return kind == kindSeal, nil
	}
	if te := checkCheckpoint(line, n, prevKind, kr, rep); te != nil {
		return sealed, te
	}
	return sealed, nil
}

// checkCheckpoint checks the checkpoint at line n (after a line of kind
// prevKind): its form, that it follows what its "at" says, and with a
// keyring its signature, which then covers every line up to n.
func checkCheckpoint(line []byte, n int, prevKind string, kr *keyring, rep *Report) *TamperError {
	c, err := ParseCheckpoint(line)
	if err != nil {
		return tamper(n, Malformed, "%v", err)
	}
	switch {
	case c.At == AtInterval && (prevKind == kindSeal || prevKind == kindCheckpoint):
		return tamper(n, Inserted, "an interval checkpoint after a %s line", prevKind)
	case c.At != AtInterval && c.At != prevKind:
		return tamper(n, Inserted, "a checkpoint at %s after a %s line", c.At, prevKind)
	}
	rep.Checkpoints++
	rep.LastCheckpoint = c
	if kr == nil {
		return nil
	}
	uncovered := func(why string, args ...any) *TamperError {
		return tamper(rep.SignedLines+1, Unsigned, "no valid signature covers lines %d-%d: the checkpoint at line %d (seq %d) %s",
			rep.SignedLines+1, n, n, c.Seq, fmt.Sprintf(why, args...))
	}
	switch {
	case c.KeyID != kr.curID && kr.retired[c.KeyID]:
		return uncovered("is signed by key %s, which an earlier checkpoint rotated away from", c.KeyID)
	case c.KeyID != kr.curID:
		return uncovered("is signed by key %s, not by %s (the key given, or the last key it announced)", c.KeyID, kr.curID)
	case !c.Verify(kr.cur):
		return uncovered("does not verify with key %s: lines it covers, or the checkpoint itself, were changed", c.KeyID)
	}
	rep.SignedLines = n
	if c.NextKey != "" {
		pub, _ := base64.StdEncoding.DecodeString(c.NextKey) // ParseCheckpoint checked it
		kr.retired[kr.curID] = true
		kr.cur, kr.curID = pub, KeyID(pub)
		kr.ids = append(kr.ids, kr.curID)
	}
	return nil
}

// finish checks, with a key (kr not nil), that the log ends with the
// final key, if one was given, and that signatures cover the whole log: a
// closed log must end covered; a live one's unsigned tail is reported.
func (kr *keyring) finish(rep *Report, live bool) *TamperError {
	if kr == nil {
		return nil
	}
	rep.KeyIDs = kr.ids
	if kr.finalID != "" && kr.curID != kr.finalID {
		return tamper(max(1, rep.SignedLines), Unsigned, "the log ends signed by key %s, not by the final key %s: it was cut back to before a rotation and continued with a retired key, or the final key given is not the current one", kr.curID, kr.finalID)
	}
	if rep.SignedLines >= rep.Lines {
		return nil
	}
	if !live {
		return tamper(rep.SignedLines+1, Unsigned, "no signature covers lines %d-%d: the log ends without a checkpoint after them (one was removed, or lines were appended by someone without the key)", rep.SignedLines+1, rep.Lines)
	}
	rep.UnsignedFrom = rep.SignedLines + 1
	return nil
}
