package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/testnet"
)

// TestReadmeQuickStart runs the README's quick start verbatim, in a fresh
// network namespace that has loopback and nothing else (no route out, as
// on a machine with no internet): it must reach ready and print what the
// README says it prints — its comment lines are the expected output, up to
// a trailing "…".
func TestReadmeQuickStart(t *testing.T) {
	t.Parallel()
	testnet.RequireRoot(t)
	for _, tool := range []string{"curl", "unshare", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed to run the quick start (.ci/run installs it): %v", tool, err)
		}
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	block := shellBlockAfter(t, string(readme), "## Quick start")
	work := t.TempDir()
	// The block runs from a copy's point of view: the repository root, but
	// its state and log go to the test's own directory.
	script := "set -eu\nip link set lo up\n" +
		strings.NewReplacer("/tmp/egressd-quickstart", filepath.Join(work, "state"), "2>egressd.log", "2>"+filepath.Join(work, "egressd.log"),
			"-o egressd ", "-o "+filepath.Join(work, "egressd")+" ", "./egressd ", filepath.Join(work, "egressd")+" ",
			"-o origin ", "-o "+filepath.Join(work, "origin")+" ", "./origin ", filepath.Join(work, "origin")+" ").Replace(block)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "--net", "bash", "-c", script)
	cmd.Dir = root
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A file, not a pipe: the origin and egressd the block leaves running
	// hold its output open, and Wait must return when the block does.
	outFile, err := os.Create(filepath.Join(work, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer outFile.Close()
	cmd.Stdout, cmd.Stderr = outFile, outFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	err = cmd.Wait()
	syscall.Kill(-pgid, syscall.SIGKILL) // the origin and egressd the block started, all in its group
	outBytes, _ := os.ReadFile(outFile.Name())
	out := bytes.NewBuffer(outBytes)
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(work, "egressd.log"))
		t.Fatalf("the quick start failed: %v\n%s\negressd.log:\n%s", err, out.String(), log)
	}
	for _, want := range expectedOutput(block) {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the quick start printed\n%s\nwithout the README's %q", out.String(), want)
		}
	}
}

// shellBlockAfter returns the first ```sh block after heading in md.
func shellBlockAfter(t *testing.T, md, heading string) string {
	t.Helper()
	_, rest, ok := strings.Cut(md, "\n"+heading+"\n")
	if !ok {
		t.Fatalf("README has no %q section", heading)
	}
	_, rest, ok = strings.Cut(rest, "```sh\n")
	if !ok {
		t.Fatalf("README's %q section has no sh block", heading)
	}
	block, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatalf("README's %q sh block is not closed", heading)
	}
	return block
}

// expectedOutput returns the block's comment lines ("# text"), each cut at
// a trailing "…": what the commands before them print.
func expectedOutput(block string) []string {
	var want []string
	for l := range strings.SplitSeq(block, "\n") {
		if text, ok := strings.CutPrefix(strings.TrimSpace(l), "# "); ok {
			text, _, _ = strings.Cut(text, "…")
			want = append(want, strings.TrimSpace(text))
		}
	}
	return want
}
