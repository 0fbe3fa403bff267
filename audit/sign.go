package audit

// Signed checkpoints. The hash chain alone proves nothing against whoever
// can write the file: a consistent rewrite recomputes every prev. A
// checkpoint is a line whose Ed25519 signature covers its own seq, its
// prev (the hash of the line before it, and through the chain every line
// before that), its time and the id of the key that signed it. Verify
// with the public key then fails a rewrite at the first line that no valid
// signature covers. The private key lives on the egressd host, out of the
// sandbox's reach; whoever holds it (a compromised egressd host) can sign
// anything, so a signature proves the log is the one that key signed, not
// that the host was honest.

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

const kindCheckpoint = "checkpoint" // a signature over the chain so far

// Why a checkpoint was written: the value of its "at" key. open, seal and
// recover follow the line of that kind; interval follows any line.
const (
	AtOpen     = "open"
	AtSeal     = "seal"
	AtRecover  = "recover"
	AtInterval = "interval"
)

// Defaults for SignOptions.
const (
	DefaultCheckpointRecords  = 1000
	DefaultCheckpointInterval = time.Minute
)

// Key file names written by GenerateKey.
const (
	PrivateKeyFile = "audit.key"
	PublicKeyFile  = "audit.pub"
)

// checkpointDomain separates checkpoint signatures from any other use of
// the key.
const checkpointDomain = "egressd audit checkpoint v1\n"

// SignOptions turns on signed checkpoints.
type SignOptions struct {
	// Key signs every checkpoint.
	Key ed25519.PrivateKey
	// Previous, when set, is the key being rotated away from: the first
	// checkpoint of a log last signed by Previous (or not signed yet) is
	// signed by Previous and announces Key; later ones are signed by Key.
	Previous ed25519.PrivateKey
	// Records and Interval: a checkpoint follows at most Records lines
	// and at most Interval after the first unsigned line (defaults above).
	Records  int
	Interval time.Duration
}

// Options configure a Sink.
type Options struct {
	Sign *SignOptions // nil: no checkpoints
}

// signer is a Sink's checkpoint state, guarded by the Sink's mu.
type signer struct {
	key, prev     ed25519.PrivateKey
	keyID, prevID string
	announce      bool   // the next checkpoint is signed by prev and announces key
	owed          string // the at of a checkpoint due but not yet written
	unsigned      int    // lines since the last checkpoint
	since         time.Time
	records       int
	interval      time.Duration
	stop, done    chan struct{}
}

func newSigner(o *SignOptions) (*signer, error) {
	if o == nil {
		return nil, nil
	}
	if len(o.Key) != ed25519.PrivateKeySize {
		return nil, errors.New("audit signing: no Ed25519 private key")
	}
	sg := &signer{key: o.Key, keyID: KeyID(o.Key.Public().(ed25519.PublicKey)), records: o.Records, interval: o.Interval}
	if sg.records <= 0 {
		sg.records = DefaultCheckpointRecords
	}
	if sg.interval <= 0 {
		sg.interval = DefaultCheckpointInterval
	}
	if o.Previous != nil {
		if len(o.Previous) != ed25519.PrivateKeySize {
			return nil, errors.New("audit signing: the previous key is not an Ed25519 private key")
		}
		sg.prev, sg.prevID = o.Previous, KeyID(o.Previous.Public().(ed25519.PublicKey))
		sg.announce = sg.prevID != sg.keyID
	}
	return sg, nil
}

// KeyID names a public key: the first 8 bytes of its SHA-256, in hex.
func KeyID(pub ed25519.PublicKey) string {
	s := sha256.Sum256(pub)
	return hex.EncodeToString(s[:8])
}

// Checkpoint is a checkpoint line's content.
type Checkpoint struct {
	Seq     uint64 `json:"seq"`
	Prev    string `json:"prev"` // hex SHA-256 of the line before: what the signature covers
	Time    string `json:"time"`
	At      string `json:"at"`
	KeyID   string `json:"key_id"`
	NextKey string `json:"next_key,omitempty"` // base64 Ed25519 public key announced (rotation)
	Sig     string `json:"sig"`                // base64 Ed25519 signature of Message
}

// Message is the text the signature covers.
func (c *Checkpoint) Message() []byte {
	return fmt.Appendf(nil, "%sseq %d\nprev %s\ntime %s\nat %s\nkey %s\nnext %s\n", checkpointDomain, c.Seq, c.Prev, c.Time, c.At, c.KeyID, c.NextKey)
}

// appendBody renders the line after the chain header's kind.
func (c *Checkpoint) appendBody(b []byte) []byte {
	b = append(b, `"time":`...)
	b = strconv.AppendQuote(b, c.Time)
	b = append(b, `,"at":`...)
	b = strconv.AppendQuote(b, c.At)
	b = append(b, `,"key_id":`...)
	b = strconv.AppendQuote(b, c.KeyID)
	if c.NextKey != "" {
		b = append(b, `,"next_key":`...)
		b = strconv.AppendQuote(b, c.NextKey)
	}
	b = append(b, `,"sig":`...)
	b = strconv.AppendQuote(b, c.Sig)
	return append(b, '}')
}

// Verify checks the signature with pub.
func (c *Checkpoint) Verify(pub ed25519.PublicKey) bool {
	sig, err := base64.StdEncoding.DecodeString(c.Sig)
	return err == nil && ed25519.Verify(pub, c.Message(), sig)
}

// ParseCheckpoint reads a checkpoint line (without its newline). The line
// must be exactly as the writer renders it, so nothing in it escapes the
// signature.
func ParseCheckpoint(line []byte) (*Checkpoint, error) {
	h, err := parseHeader(line)
	if err != nil {
		return nil, err
	}
	if h.kind != kindCheckpoint {
		return nil, fmt.Errorf("a %q record, not a checkpoint", h.kind)
	}
	var raw struct {
		Checkpoint
		Audit string `json:"audit"`
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	c := &raw.Checkpoint
	switch {
	case c.At != AtOpen && c.At != AtSeal && c.At != AtRecover && c.At != AtInterval:
		return nil, fmt.Errorf("checkpoint: unknown at %.20q", c.At)
	case len(c.KeyID) != 16 || !isHex(c.KeyID):
		return nil, fmt.Errorf("checkpoint: key_id %.20q is not 16 hex digits", c.KeyID)
	case !validB64(c.Sig, ed25519.SignatureSize):
		return nil, errors.New("checkpoint: sig is not a base64 Ed25519 signature")
	case c.NextKey != "" && !validB64(c.NextKey, ed25519.PublicKeySize):
		return nil, errors.New("checkpoint: next_key is not a base64 Ed25519 public key")
	}
	if _, err := time.Parse(time.RFC3339Nano, c.Time); err != nil {
		return nil, fmt.Errorf("checkpoint: time: %w", err)
	}
	if want := renderCheckpoint(c); !bytes.Equal(want, line) {
		return nil, errors.New("checkpoint: not in the writer's canonical form")
	}
	return c, nil
}

func validB64(s string, n int) bool {
	b, err := base64.StdEncoding.DecodeString(s)
	return err == nil && len(b) == n
}

// renderCheckpoint is the whole line for c (without its newline).
func renderCheckpoint(c *Checkpoint) []byte {
	b := append([]byte(nil), headerStart...)
	b = strconv.AppendUint(b, c.Seq, 10)
	b = append(b, `,"prev":"`...)
	b = append(b, c.Prev...)
	b = append(b, `","audit":"checkpoint",`...)
	return c.appendBody(b)
}

// checkpointLocked writes a checkpoint over the chain so far. The caller
// holds s.mu; nil without signing.
func (s *Sink) checkpointLocked(at string) error {
	sg := s.sign
	if sg == nil {
		return nil
	}
	now := s.now()
	c := Checkpoint{Seq: s.seq + 1, Prev: hex.EncodeToString(s.prev[:]), Time: now.UTC().Format(time.RFC3339Nano), At: at, KeyID: sg.keyID}
	key := sg.key
	if sg.announce {
		key, c.KeyID = sg.prev, sg.prevID
		c.NextKey = base64.StdEncoding.EncodeToString(sg.key.Public().(ed25519.PublicKey))
	}
	c.Sig = base64.StdEncoding.EncodeToString(ed25519.Sign(key, c.Message()))
	if _, err := s.emit(kindCheckpoint, c.appendBody(nil)); err != nil {
		return err
	}
	sg.announce, sg.unsigned = false, 0
	return nil
}

// signedLine counts a line just written and notes the checkpoint it makes
// due (after a session record: always). The caller holds s.mu.
func (s *Sink) signedLine(kind string) {
	sg := s.sign
	if sg == nil {
		return
	}
	if sg.unsigned == 0 {
		sg.since = s.now()
	}
	sg.unsigned++
	switch {
	case kind == kindOpen || kind == kindSeal || kind == kindRecover:
		sg.owed = kind
	case sg.owed == "" && (sg.unsigned >= sg.records || s.now().Sub(sg.since) >= sg.interval):
		sg.owed = AtInterval
	}
}

// owedLocked writes the checkpoint that is due, if any. A failed write
// leaves it owed: it is the next line written. The caller holds s.mu.
func (s *Sink) owedLocked() error {
	sg := s.sign
	if sg == nil || sg.owed == "" {
		return nil
	}
	if err := s.checkpointLocked(sg.owed); err != nil {
		return err
	}
	sg.owed = ""
	return nil
}

// tick writes a checkpoint when unsigned lines have waited Interval.
func (s *Sink) tick() {
	s.mu.Lock()
	defer s.unlock()
	sg := s.sign
	if s.usable() != nil || s.failing != nil {
		return // Retry writes what is owed once writes work
	}
	if sg.owed == "" && (sg.unsigned == 0 || s.now().Sub(sg.since) < sg.interval) {
		return
	}
	if sg.owed == "" {
		sg.owed = AtInterval
	}
	s.owedLocked() //nolint:errcheck // a failed write marks the sink failing and stays owed
}

// startTicker signs a quiet log's last lines within about Interval.
func (s *Sink) startTicker() {
	sg := s.sign
	sg.stop, sg.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sg.done)
		t := time.NewTicker(max(sg.interval/4, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-sg.stop:
				return
			case <-t.C:
				s.tick()
			}
		}
	}()
}

// stopTicker ends the ticker goroutine; the caller does not hold s.mu.
func (s *Sink) stopTicker() {
	if sg := s.sign; sg != nil && sg.stop != nil {
		select {
		case <-sg.stop:
		default:
			close(sg.stop)
		}
		<-sg.done
	}
}

// lastKeyID returns the id of the key a log's tail says is current: that
// of its last checkpoint, or the key that checkpoint announced; "" if the
// tail holds none.
func lastKeyID(complete []byte) string {
	for len(complete) > 0 {
		i := bytes.LastIndexByte(complete, '\n')
		line := complete[i+1:]
		complete = complete[:max(i, 0)]
		if c, err := ParseCheckpoint(line); err == nil {
			if c.NextKey != "" {
				pub, _ := base64.StdEncoding.DecodeString(c.NextKey)
				return KeyID(pub)
			}
			return c.KeyID
		}
		if i < 0 {
			break
		}
	}
	return ""
}

// GenerateKey writes a new Ed25519 key pair to dir: PrivateKeyFile (mode
// 0600, PKCS #8 PEM) and PublicKeyFile (PKIX PEM). Existing files are
// never overwritten.
func GenerateKey(dir string) (ed25519.PublicKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate audit key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, fmt.Errorf("encode audit key: %w", err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("encode audit public key: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("audit key directory: %w", err)
	}
	for _, f := range []struct {
		name, typ string
		der       []byte
		mode      os.FileMode
	}{{PrivateKeyFile, "PRIVATE KEY", der, 0o600}, {PublicKeyFile, "PUBLIC KEY", pubDER, 0o644}} {
		path := filepath.Join(dir, f.name)
		out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, f.mode)
		if err != nil {
			return nil, fmt.Errorf("write audit key: %w", err)
		}
		err = pem.Encode(out, &pem.Block{Type: f.typ, Bytes: f.der})
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("write %s: %w", path, err)
		}
	}
	return pub, nil
}

// ReadPrivateKey reads an Ed25519 private key (PKCS #8 PEM). A key file
// that group or others may read is refused: the signature is worth what
// the key's secrecy is.
func ReadPrivateKey(path string) (ed25519.PrivateKey, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("audit signing key: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("audit signing key %s: mode %v lets others read it: chmod 600 it (only egressd may read the key)", path, st.Mode().Perm())
	}
	der, err := readPEM(path, "PRIVATE KEY")
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("audit signing key %s: %w", path, err)
	}
	ek, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("audit signing key %s: a %T, not an Ed25519 key", path, k)
	}
	return ek, nil
}

// ReadPublicKey reads an Ed25519 public key (PKIX PEM, as GenerateKey
// writes it).
func ReadPublicKey(path string) (ed25519.PublicKey, error) {
	der, err := readPEM(path, "PUBLIC KEY")
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, fmt.Errorf("audit public key %s: %w", path, err)
	}
	ek, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("audit public key %s: a %T, not an Ed25519 key", path, k)
	}
	return ek, nil
}

func readPEM(path, typ string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read key: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != typ {
		return nil, fmt.Errorf("key %s: no PEM %q block", path, typ)
	}
	return blk.Bytes, nil
}

// rotation decides, from the complete lines of a log's tail, whether this
// session's first checkpoint announces a new key: only when the log was
// last signed by the previous key, or not signed at all.
func (s *Sink) rotation(complete []byte) {
	sg := s.sign
	if sg == nil || sg.prev == nil {
		return
	}
	switch lastKeyID(complete) {
	case sg.keyID:
		sg.announce = false // rotated already (an earlier session)
	case sg.prevID, "":
		sg.announce = sg.prevID != sg.keyID
	default:
		sg.announce = false // signed by neither: no key here can vouch for the change
	}
}

// FindCheckpoint returns the checkpoint line with sequence number seq in
// the log r, or an error when there is none.
func FindCheckpoint(r io.Reader, seq uint64) (*Checkpoint, error) {
	lr := &lineReader{br: bufio.NewReaderSize(r, 64<<10)}
	prefix := strconv.AppendUint(append([]byte(nil), headerStart...), seq, 10)
	prefix = append(prefix, ',')
	for {
		line, complete, tooLong, err := lr.next()
		if err == io.EOF {
			return nil, fmt.Errorf("no line with seq %d", seq)
		} else if err != nil {
			return nil, err
		}
		if !complete || tooLong || !bytes.HasPrefix(line, prefix) {
			continue
		}
		return ParseCheckpoint(line)
	}
}
