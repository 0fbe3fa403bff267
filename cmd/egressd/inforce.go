package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/egressd/egressd/configs"
	"github.com/egressd/egressd/daemon"
	"github.com/egressd/egressd/policy"
)

// The policy in force: serve copies the config it verified into its state
// directory, so `egressd report` shows what is enforced after a reload was
// rolled back (when the config file holds a policy that never passed).
const (
	inForceConfig = "policy-in-force.yaml" // the verified config's bytes
	inForceRecord = "policy-in-force.json" // an inForce
)

// inForce says which config the copy is and when it was verified.
type inForce struct {
	Source     string    `json:"source"`
	SHA256     string    `json:"sha256"`
	VerifiedAt time.Time `json:"verified_at"`
}

// configDigest is the SHA-256 of the config at path ("" is the embedded
// default).
func configDigest(path string) (string, error) {
	h := sha256.New()
	if path == "" {
		h.Write(configs.Default)
	} else {
		f, err := os.Open(path)
		if err != nil {
			return "", err
		}
		defer f.Close()
		if _, err := io.Copy(h, f); err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// inForceTracker remembers the digest of the bytes each loaded policy came
// from, and records a policy's config when its self-test seals it.
type inForceTracker struct {
	cfg, stateDir string
	mu            sync.Mutex
	digests       map[*policy.Policy]string // the last few loads only
	order         []*policy.Policy
	written       string
}

// trackInForce wraps g's Load and Verify: a policy whose self-test seals
// it (at boot or a reload; a failed reload's is rolled back, so its config
// is never recorded) has its config copied to the state directory.
func trackInForce(g *daemon.Gateway, cfg, stateDir string) {
	if g.Load == nil || g.Verify == nil {
		return // --no-selftest: nothing is verified, nothing recorded
	}
	t := &inForceTracker{cfg: cfg, stateDir: stateDir, digests: map[*policy.Policy]string{}}
	load, verify := g.Load, g.Verify
	g.Load = func() (*policy.Policy, error) {
		// The digest before and after the load agree only if the load
		// read those bytes; otherwise the policy is not recorded.
		before, err1 := configDigest(cfg)
		p, err := load()
		if err != nil {
			return p, err
		}
		if after, err2 := configDigest(cfg); err1 == nil && err2 == nil && before == after {
			t.remember(p, before)
		}
		return p, nil
	}
	g.Verify = func(ctx context.Context, p *policy.Policy) daemon.Verdict {
		v := verify(ctx, p)
		if v.Sealed && v.Err == nil {
			if err := t.verified(p); err != nil && g.Logger != nil {
				g.Logger.Error("record the policy in force", "err", err)
			}
		}
		return v
	}
}

func (t *inForceTracker) remember(p *policy.Policy, digest string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.digests[p] = digest
	if t.order = append(t.order, p); len(t.order) > 4 {
		delete(t.digests, t.order[0])
		t.order = t.order[1:]
	}
}

// verified records p's config as the policy in force, once per config.
func (t *inForceTracker) verified(p *policy.Policy) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	digest, ok := t.digests[p]
	if !ok || digest == t.written {
		return nil
	}
	b := configs.Default
	if t.cfg != "" {
		var err error
		if b, err = os.ReadFile(t.cfg); err != nil {
			return fmt.Errorf("read %s: %w", t.cfg, err)
		}
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != digest {
		return fmt.Errorf("%s changed since it was loaded: the next reload records it", t.cfg)
	}
	rec, err := json.Marshal(inForce{Source: p.Source, SHA256: digest, VerifiedAt: time.Now().UTC()})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(t.stateDir, 0o700); err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(t.stateDir, inForceConfig), b); err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(t.stateDir, inForceRecord), append(rec, '\n')); err != nil {
		return err
	}
	t.written = digest
	return nil
}

// writeFileAtomic replaces path with b (a temp file renamed over it).
func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename %s: %w", tmp, err)
	}
	return nil
}

// reportPolicy is the policy `egressd report` shows: cfg's, or the one in
// force (policyInForce).
func reportPolicy(cfg, stateDir string, stderr io.Writer) (*policy.Policy, error) {
	p, err := loadPolicy(cfg)
	if err != nil {
		return nil, err
	}
	return policyInForce(p, cfg, stateDir, stderr), nil
}

// policyInForce is the policy report should show: the one serve verified
// last (from stateDir), when p, loaded from cfg, is not it: cfg names the
// same file but it has changed (a reload rolled back or not yet applied),
// or no --config was given. Otherwise p. What it did goes to stderr.
func policyInForce(p *policy.Policy, cfg, stateDir string, stderr io.Writer) *policy.Policy {
	b, err := os.ReadFile(filepath.Join(stateDir, inForceRecord))
	if errors.Is(err, os.ErrNotExist) {
		return p
	}
	var rec inForce
	if err == nil {
		err = json.Unmarshal(b, &rec)
	}
	if err != nil {
		fmt.Fprintf(stderr, "egressd report: the record of the policy in force: %v; reporting %s\n", err, p.Source)
		return p
	}
	if cfg != "" && !samePath(cfg, rec.Source) {
		return p // another config, asked for by name
	}
	if d, err := configDigest(cfg); err == nil && d == rec.SHA256 {
		return p
	}
	text, err := os.ReadFile(filepath.Join(stateDir, inForceConfig))
	if sum := sha256.Sum256(text); err != nil || hex.EncodeToString(sum[:]) != rec.SHA256 {
		fmt.Fprintf(stderr, "egressd report: the copy of the policy in force in %s is missing or altered; reporting %s\n", stateDir, p.Source)
		return p
	}
	// parsed under its own name, so its relative hosts_files resolve as
	// serve's did
	in, err := policy.Parse(bytes.NewReader(text), rec.Source)
	if err != nil {
		fmt.Fprintf(stderr, "egressd report: the policy in force: %v; reporting %s\n", err, p.Source)
		return p
	}
	verified := rec.VerifiedAt.Format(time.RFC3339)
	fmt.Fprintf(stderr, "egressd report: %s differs from the policy in force (verified %s; a reload since was rolled back or not yet applied): reporting the policy in force\n", orDefault(cfg), verified)
	in.Source = rec.Source + " (the policy in force, verified " + verified + ")"
	return in
}

func orDefault(cfg string) string {
	if cfg == "" {
		return "the default config"
	}
	return cfg
}

func samePath(a, b string) bool {
	a, errA := filepath.Abs(a)
	b, errB := filepath.Abs(b)
	return errA == nil && errB == nil && a == b
}
