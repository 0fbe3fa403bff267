package report

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/egressd/egressd/audit"
)

// SealVersion is the version of the detached signature format.
const SealVersion = 1

// sealDomain separates evidence-pack signatures from audit checkpoints
// made with the same key.
const sealDomain = "egressd evidence pack v1\n"

// Seal is an evidence pack's detached signature (PACK.sig, JSON). The
// signature covers every field but Sig: the pack's bytes by hash (the
// walls with counters, the policy, the self-test and probe history, the
// decisions and honeytokens as the pack shows them), the inputs by hash
// (a verifier compares them with its own copies), and the audit
// checkpoint the pack was cut at.
type Seal struct {
	Version         int               `json:"version"`
	Generated       time.Time         `json:"generated"`
	PackSHA256      string            `json:"pack_sha256"`
	Config          string            `json:"config"`
	PolicySHA256    string            `json:"policy_sha256"`              // the config file's bytes: the policy in force
	HistorySHA256   string            `json:"history_sha256"`             // the self-test and probe history file ("" none)
	WallsSHA256     string            `json:"walls_sha256"`               // the walls with their counters, as in the pack
	AuditLog        string            `json:"audit_log,omitempty"`        // the audit log the checkpoint is in
	AuditCheckpoint *audit.Checkpoint `json:"audit_checkpoint,omitempty"` // its last signed checkpoint when the pack was cut
	KeyID           string            `json:"key_id"`
	Sig             string            `json:"sig,omitempty"` // base64 Ed25519 over the rest
}

// SHA256Hex is the hex SHA-256 of b ("" for nil: no such input).
func SHA256Hex(b []byte) string {
	if b == nil {
		return ""
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// message is what the signature covers: every field but Sig, as JSON.
func (s *Seal) message() ([]byte, error) {
	c := *s
	c.Sig = ""
	b, err := json.Marshal(&c)
	if err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	return append([]byte(sealDomain), b...), nil
}

// SignPack completes s for pack (its hash, the key id) and signs it.
func SignPack(pack []byte, s *Seal, key ed25519.PrivateKey) error {
	s.Version = SealVersion
	s.PackSHA256 = SHA256Hex(pack)
	s.KeyID = audit.KeyID(key.Public().(ed25519.PublicKey))
	msg, err := s.message()
	if err != nil {
		return err
	}
	s.Sig = base64.StdEncoding.EncodeToString(ed25519.Sign(key, msg))
	return nil
}

// ErrPackTampered is wrapped by every VerifyPack failure that is not a
// malformed signature file.
var ErrPackTampered = errors.New("evidence pack does not verify")

// VerifyPack checks a pack against its detached signature with pub.
func VerifyPack(pack, sealJSON []byte, pub ed25519.PublicKey) (*Seal, error) {
	var s Seal
	dec := json.NewDecoder(bytes.NewReader(sealJSON))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("signature file: %w", err)
	}
	if s.Version != SealVersion {
		return nil, fmt.Errorf("signature file: version %d, want %d", s.Version, SealVersion)
	}
	sig, err := base64.StdEncoding.DecodeString(s.Sig)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return nil, errors.New("signature file: sig is not a base64 Ed25519 signature")
	}
	if id := audit.KeyID(pub); s.KeyID != id {
		return &s, fmt.Errorf("%w: signed by key %s, not by %s (the key given)", ErrPackTampered, s.KeyID, id)
	}
	msg, err := s.message()
	if err != nil {
		return nil, err
	}
	if !ed25519.Verify(pub, msg, sig) {
		return &s, fmt.Errorf("%w: the signature does not cover this signature file (it was edited)", ErrPackTampered)
	}
	if got := SHA256Hex(pack); got != s.PackSHA256 {
		return &s, fmt.Errorf("%w: the pack hashes to %s, the signature covers %s (the pack was edited)", ErrPackTampered, got, s.PackSHA256)
	}
	return &s, nil
}
