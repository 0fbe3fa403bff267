package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/configs"
	"github.com/egressd/egressd/honeytoken"
	"github.com/egressd/egressd/nft"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/report"
	"github.com/egressd/egressd/selftest"
)

func init() { commands["report"] = cmdReport }

// showWalls reads the kernel walls with their counters; tests replace it.
var showWalls = func() (string, error) { return nft.Show(nft.CurrentNamespace, nft.DefaultTable) }

const reportUsage = `usage: egressd report [--config FILE] [--state-dir DIR] [--log FILE] [--json] [--sign [--key FILE] [--audit-log FILE [--audit-pub PUB]] --out FILE]
       egressd report verify --key PUB [--sig FILE] [--audit-log FILE [--audit-pub PUB]] PACK
`

func cmdReport(_ context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "verify" {
		return cmdReportVerify(args[1:], stdout, stderr)
	}
	fs := newFlagSet("report", stderr)
	cfg := configFlag(fs)
	stateDir := fs.String("state-dir", defaultStateDir(), "directory holding the self-test history and the honeytoken store")
	logFile := fs.String("log", "", "decision log `FILE`: the JSON lines egressd serve writes on stderr")
	asJSON := fs.Bool("json", false, "write the evidence pack as JSON instead of Markdown")
	sign := fs.Bool("sign", false, "sign the pack: write --out FILE and a detached signature FILE.sig")
	keyFile := fs.String("key", "", "with --sign: the Ed25519 private key (default: the config's audit.sign_key)")
	auditLog := fs.String("audit-log", "", "with --sign: the audit log whose last signed checkpoint the pack is cut at")
	auditPub := fs.String("audit-pub", "", "with --audit-log: the public key its checkpoints start with, when a rotation has changed it since (default: the signing key's)")
	out := fs.String("out", "", "write the pack to FILE instead of stdout (required with --sign)")
	if pos, err := parseFlags(fs, args); err != nil || len(pos) > 0 || (*sign && *out == "") {
		fmt.Fprint(stderr, reportUsage)
		return exitUsage
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "egressd report: %v\n", err)
		return exitUsage
	}
	p, err := reportPolicy(*cfg, *stateDir, stderr)
	if err != nil {
		printConfigError(stderr, err)
		return exitUsage
	}
	histPath := filepath.Join(*stateDir, selftest.HistoryFile)
	runs, skipped, err := selftest.ReadHistory(histPath)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fail(err)
	}
	var dl *report.DecisionLog
	if *logFile != "" {
		if dl, err = report.ReadDecisionLog(*logFile); err != nil {
			return fail(err)
		}
	}
	planted, err := honeytoken.Load(*stateDir)
	if err != nil {
		return fail(err)
	}
	walls, wallsErr := showWalls()
	in := report.Input{Now: time.Now().UTC(), Policy: p, Runs: runs, SkippedRuns: skipped, Log: dl, LogFile: *logFile, Walls: walls, WallsErr: wallsErr, Honeytokens: planted}
	var key ed25519.PrivateKey
	if *sign {
		if key, in.Seal, err = prepareSeal(p, *cfg, *keyFile, histPath, *auditLog, *auditPub, walls); err != nil {
			return fail(err)
		}
		in.Seal.Generated = in.Now
	}
	var buf bytes.Buffer
	if *asJSON {
		if err := report.WriteJSON(&buf, in); err != nil {
			return fail(err)
		}
	} else {
		report.Write(&buf, in)
	}
	if *out == "" {
		stdout.Write(buf.Bytes())
		return exitOK
	}
	if err := os.WriteFile(*out, buf.Bytes(), 0o644); err != nil {
		return fail(err)
	}
	if !*sign {
		return exitOK
	}
	if err := report.SignPack(buf.Bytes(), in.Seal, key); err != nil {
		return fail(err)
	}
	sealJSON, err := jsonIndent(in.Seal)
	if err != nil {
		return fail(err)
	}
	if err := os.WriteFile(*out+".sig", sealJSON, 0o644); err != nil {
		return fail(err)
	}
	fmt.Fprintf(stdout, "wrote %s and %s (key %s); check with: egressd report verify --key audit.pub %s\n", *out, *out+".sig", in.Seal.KeyID, *out)
	return exitOK
}

// prepareSeal reads the signing key and what the signature covers besides
// the pack: the config's and the history's hashes, the walls' hash and
// the audit log's last signed checkpoint, which must verify with the key.
func prepareSeal(p *policy.Policy, cfg, keyFile, histPath, auditLog, auditPub, walls string) (ed25519.PrivateKey, *report.Seal, error) {
	if keyFile == "" {
		keyFile = p.Audit.SignKey
	}
	if keyFile == "" {
		return nil, nil, errors.New("--sign: no key: set audit.sign_key in the config or pass --key (egressd audit keygen makes one)")
	}
	key, err := audit.ReadPrivateKey(keyFile)
	if err != nil {
		return nil, nil, err
	}
	cfgBytes := configs.Default
	if cfg != "" {
		if cfgBytes, err = os.ReadFile(cfg); err != nil {
			return nil, nil, err
		}
	}
	s := &report.Seal{Config: p.Source, PolicySHA256: report.SHA256Hex(cfgBytes), WallsSHA256: report.SHA256Hex([]byte(walls)),
		KeyID: audit.KeyID(key.Public().(ed25519.PublicKey))}
	if hist, err := os.ReadFile(histPath); err == nil {
		s.HistorySHA256 = report.SHA256Hex(hist)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, nil, err
	}
	if auditLog != "" {
		f, err := os.Open(auditLog)
		if err != nil {
			return nil, nil, err
		}
		defer f.Close()
		first := key.Public().(ed25519.PublicKey)
		if auditPub != "" {
			if first, err = audit.ReadPublicKey(auditPub); err != nil {
				return nil, nil, err
			}
		}
		rep, err := audit.Verify(f, audit.VerifyOptions{Live: true, Key: first})
		if err != nil {
			return nil, nil, fmt.Errorf("--audit-log %s does not verify with the signing key, so no pack is signed over it: %w", auditLog, err)
		}
		if rep.LastCheckpoint == nil {
			return nil, nil, fmt.Errorf("--audit-log %s has no signed checkpoint (audit.sign_key)", auditLog)
		}
		s.AuditLog, s.AuditCheckpoint = auditLog, rep.LastCheckpoint
	}
	return key, s, nil
}

func cmdReportVerify(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("report verify", stderr)
	keyFile := fs.String("key", "", "the Ed25519 public key (audit.pub)")
	sigFile := fs.String("sig", "", "the detached signature (default: PACK.sig)")
	auditLog := fs.String("audit-log", "", "also check that this audit log verifies with the key and still holds the checkpoint the pack was cut at")
	auditPub := fs.String("audit-pub", "", "with --audit-log: the public key its checkpoints start with, after a rotation (default: --key)")
	pos, err := parseFlags(fs, args)
	if err != nil || len(pos) != 1 || *keyFile == "" {
		fmt.Fprint(stderr, reportUsage)
		return exitUsage
	}
	pack := pos[0]
	if *sigFile == "" {
		*sigFile = pack + ".sig"
	}
	pub, err := audit.ReadPublicKey(*keyFile)
	if err != nil {
		fmt.Fprintf(stderr, "egressd report verify: %v\n", err)
		return exitUsage
	}
	pb, err := os.ReadFile(pack)
	if err != nil {
		fmt.Fprintf(stderr, "egressd report verify: %v\n", err)
		return exitUsage
	}
	sb, err := os.ReadFile(*sigFile)
	if err != nil {
		fmt.Fprintf(stderr, "egressd report verify: %v\n", err)
		return exitUsage
	}
	s, err := report.VerifyPack(pb, sb, pub)
	switch {
	case errors.Is(err, report.ErrPackTampered):
		fmt.Fprintf(stdout, "%s: NOT VERIFIED: %v\n", pack, err)
		return exitDeny
	case err != nil:
		fmt.Fprintf(stderr, "egressd report verify: %s: %v\n", *sigFile, err)
		return exitUsage
	}
	fmt.Fprintf(stdout, "%s: verified: signed by key %s at %s; policy %s sha256 %s; history sha256 %s; walls sha256 %s\n",
		pack, s.KeyID, s.Generated.Format(time.RFC3339), s.Config, s.PolicySHA256, orNone(s.HistorySHA256), s.WallsSHA256)
	c := s.AuditCheckpoint
	if c != nil {
		fmt.Fprintf(stdout, "%s: cut at audit checkpoint seq %d of %s (%s, key %s)\n", pack, c.Seq, s.AuditLog, c.Time, c.KeyID)
	}
	if *auditLog == "" {
		return exitOK
	}
	if c == nil {
		fmt.Fprintf(stdout, "%s: NOT VERIFIED: the pack names no audit checkpoint to find in %s\n", pack, *auditLog)
		return exitDeny
	}
	first := pub
	if *auditPub != "" {
		if first, err = audit.ReadPublicKey(*auditPub); err != nil {
			fmt.Fprintf(stderr, "egressd report verify: %v\n", err)
			return exitUsage
		}
	}
	if why := checkpointInLog(*auditLog, first, c); why != "" {
		fmt.Fprintf(stdout, "%s: NOT VERIFIED: %s\n", *auditLog, why)
		return exitDeny
	}
	fmt.Fprintf(stdout, "%s: verifies with the key and holds checkpoint seq %d\n", *auditLog, c.Seq)
	return exitOK
}

// checkpointInLog says why the audit log at path does not verify with pub
// or does not hold checkpoint c ("" when it does both).
func checkpointInLog(path string, pub ed25519.PublicKey, c *audit.Checkpoint) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if _, err := audit.Verify(f, audit.VerifyOptions{Live: true, Key: pub}); err != nil {
		return "the audit log does not verify: " + err.Error()
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err.Error()
	}
	got, err := audit.FindCheckpoint(f, c.Seq)
	if err != nil {
		return fmt.Sprintf("checkpoint seq %d: %v", c.Seq, err)
	}
	if *got != *c {
		return fmt.Sprintf("the line at seq %d is not the checkpoint the pack was cut at", c.Seq)
	}
	return ""
}

// jsonIndent is v as indented JSON with a final newline.
func jsonIndent(v any) ([]byte, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	return append(b, '\n'), err
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
