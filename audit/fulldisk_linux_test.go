package audit

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestFullDisk runs the audit log on a real full file system: a 64 KiB
// tmpfs mounted in a private mount namespace of a child process (this test
// binary re-executed), so nothing is mounted where anything else can see
// it. Root only; with EGRESSD_REQUIRE_NETNS=1 a non-root run fails.
//
// On the full disk: every failed write is taken back whole (no partial
// line that would read as tampering), the sink reports the failure once
// per state change and counts each write error, Close reports the seal it
// could not write, a restart on the full disk starts (failing) instead of
// refusing, and once space returns the chain goes on, records the lost
// lines, and verifies.
func TestFullDisk(t *testing.T) {
	if os.Getenv("EGRESSD_FULLDISK_CHILD") != "" {
		fullDiskChild(t)
		return
	}
	if os.Geteuid() != 0 {
		if os.Getenv("EGRESSD_REQUIRE_NETNS") == "1" {
			t.Fatal("TestFullDisk needs root (a private mount namespace and a tmpfs)")
		}
		t.Skip("needs root: a private mount namespace and a tmpfs")
	}
	mine, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestFullDisk$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "EGRESSD_FULLDISK_CHILD="+mine)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS: TestFullDisk")) {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func fullDiskChild(t *testing.T) {
	ns, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil || ns == os.Getenv("EGRESSD_FULLDISK_CHILD") {
		t.Fatalf("not in a private mount namespace (%s, %v): refusing to mount", ns, err)
	}
	// no mount made here may propagate back to the parent's namespace
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		t.Fatalf("make / private: %v", err)
	}
	dir := t.TempDir()
	if err := syscall.Mount("egressd-fulldisk", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "size=256k"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	defer syscall.Unmount(dir, syscall.MNT_DETACH)
	path := filepath.Join(dir, "audit.jsonl")
	filler := filepath.Join(dir, "filler")

	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var changes []string
	s.OnChange(func(ok bool, err error) { changes = append(changes, stateName(ok, err)) })
	log := slog.New(s.Handler(nil))
	logDecisions(log, 0, 5)
	fill(t, filler)
	fit := 0 // the file's last page may still hold a few lines
	for ; ; fit++ {
		logDecisions(log, 5+fit, 1)
		if ok, _ := s.OK(); !ok {
			break
		}
	}
	logDecisions(log, 6+fit, 40) // the disk is full: every one fails
	if ok, err := s.OK(); ok || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("OK() on a full disk: %v, %v; want false, ENOSPC", ok, err)
	}
	if n := s.WriteErrors(); n != 41 {
		t.Errorf("WriteErrors() = %d, want 41", n)
	}
	if strings.Join(changes, ",") != "failing" {
		t.Errorf("state changes %v, want one: failing", changes)
	}
	noPartialLine(t, path)
	if err := s.Close(); err == nil || !strings.Contains(err.Error(), "seal") {
		t.Fatalf("Close on a full disk: %v, want the unwritten seal reported", err)
	}
	noPartialLine(t, path)

	// restart on the full disk: egressd must start (failing), not refuse
	s, err = Open(path)
	if err != nil {
		t.Fatalf("Open on a full disk: %v", err)
	}
	changes = nil
	s.OnChange(func(ok bool, err error) { changes = append(changes, stateName(ok, err)) })
	if ok, _ := s.OK(); ok {
		t.Fatal("OK() after opening on a full disk")
	}
	log = slog.New(s.Handler(nil))
	logDecisions(log, 45, 3)
	noPartialLine(t, path)

	os.Remove(filler) // space again: the chain goes on
	if err := s.Retry(); err != nil {
		t.Fatalf("Retry with space: %v", err)
	}
	logDecisions(log, 48, 5)
	if ok, err := s.OK(); !ok {
		t.Fatalf("OK() after space returned: %v", err)
	}
	if strings.Join(changes, ",") != "ok" {
		t.Errorf("state changes %v, want one: ok", changes)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(path)
	defer f.Close()
	rep, err := Verify(f, VerifyOptions{})
	if err != nil || !rep.Sealed || rep.Records != 10+fit || rep.Lost != 1 || len(rep.UnsealedEnds) != 1 {
		t.Fatalf("verify after the full disk: %+v, %v; want a sealed log with %d records , one lost record (the restart's) and one unsealed session end (the first's)", rep, err, 10+fit)
	}
}

func stateName(ok bool, err error) string {
	if ok {
		return "ok"
	}
	return "failing"
}

// fill writes to path until the file system is full.
func fill(t *testing.T, path string) {
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1024)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	f.Write(buf[:1]) // the last partial block too
}

// noPartialLine: the file ends at a line boundary and verifies as a live log.
func noPartialLine(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		t.Fatalf("the log ends in a partial line: %q", b[max(0, len(b)-60):])
	}
	if _, err := Verify(bytes.NewReader(b), VerifyOptions{Live: true}); err != nil {
		t.Fatalf("verify (live) on the full disk: %v", err)
	}
}
