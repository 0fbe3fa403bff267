package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/egressd/egressd/honeytoken"
)

func init() { commands["honeytokens"] = cmdHoneytokens }

const honeytokensUsage = `usage: egressd honeytokens issue --identity ID [--state-dir DIR] [--home DIR]

Issues a fresh set of canary credentials for a container or pod whose
egress goes through egressd (identity ID, as egressd names its source),
adds them to DIR's store (the egressd serving with --state-dir DIR refuses
and alerts on any of them within seconds) and prints them as KEY=VALUE
lines for the sandbox's environment (docker run --env-file, a Kubernetes
Secret). --home also writes .aws/credentials and .git-credentials under
DIR (the sandbox user's home in the image or volume); existing files are
never overwritten.
`

func cmdHoneytokens(_ context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "issue" {
		fmt.Fprint(stderr, honeytokensUsage)
		return exitUsage
	}
	fs := newFlagSet("honeytokens issue", stderr)
	identity := fs.String("identity", "", "the identity egressd gives the sandbox (its source, or identities[].name)")
	stateDir := fs.String("state-dir", defaultStateDir(), "egressd's state directory: the store serve watches")
	home := fs.String("home", "", "also write the well-known credential files under this home directory")
	if pos, err := parseFlags(fs, args[1:]); err != nil || len(pos) > 0 || *identity == "" {
		fmt.Fprint(stderr, honeytokensUsage)
		return exitUsage
	}
	ts, err := honeytoken.Issue(*identity)
	if err != nil {
		fmt.Fprintf(stderr, "egressd honeytokens: %v\n", err)
		return exitUsage
	}
	if *home != "" {
		if err := writeHoneyFiles(*home, ts); err != nil {
			fmt.Fprintf(stderr, "egressd honeytokens: %v\n", err)
			return exitUsage
		}
	}
	if err := honeytoken.Append(*stateDir, ts); err != nil {
		fmt.Fprintf(stderr, "egressd honeytokens: %v\n", err)
		return exitUsage
	}
	for _, l := range honeytoken.EnvLines(ts) {
		fmt.Fprintln(stdout, l)
	}
	return exitOK
}

// writeHoneyFiles writes the credential files of ts under home, never
// over an existing file.
func writeHoneyFiles(home string, ts []honeytoken.Token) error {
	files := honeytoken.Files(ts)
	for _, rel := range slices.Sorted(maps.Keys(files)) {
		p := filepath.Join(home, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return fmt.Errorf("--home: %w", err)
		}
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return fmt.Errorf("--home: %w", err)
		}
		_, err = io.WriteString(f, files[rel])
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("--home: %w", err)
		}
	}
	return nil
}
