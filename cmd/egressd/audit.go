package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/egressd/egressd/audit"
)

func init() { commands["audit"] = cmdAudit }

const auditUsage = `usage: egressd audit verify [--live] [--strict] [--anchor SEQ:HASH]... [--key PUB] [--final-key PUB] FILE
       egressd audit keygen --out DIR

Checks a hash-chained audit log (serve --audit-log). Exit 0 intact, 1 tampered
(the first bad line and why), 2 usage or read error.
  --live     the log is still being written: accept a tail without a seal
  --strict   also fail when a session ended without a seal before a restart
  --anchor   audit_seq:audit_hash of a decision line kept elsewhere (stderr,
             the cluster's log store); repeatable. Without anchors, whoever can
             write the file can rewrite it consistently from any line on.
  --key      the Ed25519 public key (audit.pub) of audit.sign_key: every line
             must be covered by a valid signed checkpoint (with --live, the
             unsigned tail is reported).
  --final-key  the public key the log must end signed with: after a rotation
             the current audit.pub (--key the first). Without it, whoever
             holds a retired key can cut the log back to before the rotation
             and sign a continuation. Alone, it is --key too.
keygen writes DIR/audit.key (mode 0600: audit.sign_key) and DIR/audit.pub
(give it to whoever verifies; keep a copy off the egressd host).
`

// anchorsFlag collects repeated --anchor values.
type anchorsFlag []audit.Anchor

func (a *anchorsFlag) String() string { return fmt.Sprint(*a) }

func (a *anchorsFlag) Set(s string) error {
	v, err := audit.ParseAnchor(s)
	if err != nil {
		return err
	}
	*a = append(*a, v)
	return nil
}

func cmdAudit(_ context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "keygen" {
		return cmdAuditKeygen(args[1:], stdout, stderr)
	}
	if len(args) == 0 || args[0] != "verify" {
		fmt.Fprint(stderr, auditUsage)
		return exitUsage
	}
	fs := newFlagSet("audit verify", stderr)
	live := fs.Bool("live", false, "the log is still being written: accept a tail without a seal")
	strict := fs.Bool("strict", false, "fail when a session ended without a seal before a restart")
	var anchors anchorsFlag
	fs.Var(&anchors, "anchor", "SEQ:HASH of a line recorded elsewhere (repeatable)")
	keyFile := fs.String("key", "", "Ed25519 public key (audit.pub): require every line to be covered by a valid signature")
	finalFile := fs.String("final-key", "", "Ed25519 public key the log must end signed with (the current audit.pub after a rotation)")
	pos, err := parseFlags(fs, args[1:])
	if err != nil || len(pos) != 1 {
		fmt.Fprint(stderr, auditUsage)
		return exitUsage
	}
	name := pos[0]
	var key, final ed25519.PublicKey
	for _, k := range []struct {
		file string
		to   *ed25519.PublicKey
	}{{*keyFile, &key}, {*finalFile, &final}} {
		if k.file == "" {
			continue
		}
		if *k.to, err = audit.ReadPublicKey(k.file); err != nil {
			fmt.Fprintf(stderr, "egressd audit verify: %v\n", err)
			return exitUsage
		}
	}
	f, err := os.Open(name)
	if err != nil {
		fmt.Fprintf(stderr, "egressd audit verify: %v\n", err)
		return exitUsage
	}
	defer f.Close()
	rep, err := audit.Verify(f, audit.VerifyOptions{Live: *live, Strict: *strict, Anchors: anchors, Key: key, FinalKey: final})
	var te *audit.TamperError
	switch {
	case errors.As(err, &te) && te.Kind == audit.Incomplete:
		// the chain is intact, but records are missing: not "intact"
		fmt.Fprintf(stdout, "%s:%d: incomplete: %s\n", name, te.Line, te.Detail)
		return exitDeny
	case errors.As(err, &te):
		fmt.Fprintf(stdout, "%s:%d: tampered: %s: %s\n", name, te.Line, te.Kind, te.Detail)
		return exitDeny
	case err != nil:
		fmt.Fprintf(stderr, "egressd audit verify: %s: %v\n", name, err)
		return exitUsage
	}
	end := "sealed"
	if !rep.Sealed {
		end = "not sealed (--live)"
	}
	fmt.Fprintf(stdout, "%s: intact: %d lines, %d decisions, %d tunnel(s), %d session(s), %s; head %s\n",
		name, rep.Lines, rep.Records, rep.Tunnels, rep.Sessions, end, rep.Head)
	if rep.OpenTunnels > 0 {
		fmt.Fprintf(stdout, "%s: note: %d tunnel(s) still open at the end (--live)\n", name, rep.OpenTunnels)
	}
	for _, l := range rep.UnsealedEnds {
		fmt.Fprintf(stdout, "%s:%d: warning: the session ends here without a seal (crash, kill, or a truncated tail), and a new one opens\n", name, l)
	}
	for _, l := range rep.Recovered {
		fmt.Fprintf(stdout, "%s:%d: warning: line cut short by a crash mid-write, acknowledged by the writer at restart\n", name, l)
	}
	if key != nil || final != nil {
		fmt.Fprintf(stdout, "%s: signed: lines 1-%d covered by %d checkpoint(s), key(s) %s\n", name, rep.SignedLines, rep.Checkpoints, strings.Join(rep.KeyIDs, " -> "))
		if rep.UnsignedFrom > 0 {
			fmt.Fprintf(stdout, "%s:%d: note: lines %d-%d are not signed yet (--live: the next checkpoint covers them)\n", name, rep.UnsignedFrom, rep.UnsignedFrom, rep.Lines)
		}
	} else if rep.Checkpoints > 0 {
		fmt.Fprintf(stdout, "%s: note: %d signed checkpoint(s) not checked: pass --key audit.pub (without it a consistent rewrite passes)\n", name, rep.Checkpoints)
	}
	if rep.PartialTail {
		fmt.Fprintf(stdout, "%s:%d: note: incomplete last line ignored (--live)\n", name, rep.Lines+1)
	}
	if len(anchors) > 0 {
		s := make([]string, len(anchors))
		for i, a := range anchors {
			s[i] = fmt.Sprint(a.Seq)
		}
		fmt.Fprintf(stdout, "%s: anchors matched at seq %s\n", name, strings.Join(s, ", "))
	}
	return exitOK
}

func cmdAuditKeygen(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("audit keygen", stderr)
	out := fs.String("out", "", "directory for audit.key and audit.pub (created 0700)")
	if pos, err := parseFlags(fs, args); err != nil || len(pos) > 0 || *out == "" {
		fmt.Fprint(stderr, auditUsage)
		return exitUsage
	}
	pub, err := audit.GenerateKey(*out)
	if err != nil {
		fmt.Fprintf(stderr, "egressd audit keygen: %v\n", err)
		return exitUsage
	}
	fmt.Fprintf(stdout, "wrote %s (audit.sign_key: file:%s) and %s; key id %s\n",
		filepath.Join(*out, audit.PrivateKeyFile), filepath.Join(*out, audit.PrivateKeyFile), filepath.Join(*out, audit.PublicKeyFile), audit.KeyID(pub))
	return exitOK
}
