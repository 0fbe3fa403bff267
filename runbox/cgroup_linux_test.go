package runbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestRunCgroupDestroy: a process cloned into a run's cgroup (and its
// child) is killed by destroy, which then removes the cgroup.
func TestRunCgroupDestroy(t *testing.T) {
	t.Parallel()
	root := Cgroup2Root()
	if os.Geteuid() != 0 || root == "" {
		if os.Getenv("EGRESSD_REQUIRE_NETNS") == "1" {
			t.Fatal("needs root and cgroup v2")
		}
		t.Skip("needs root and cgroup v2")
	}
	cg, err := makeRunCgroup()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cg.destroy() })
	cmd := exec.Command("sh", "-c", "sleep 300 & echo started; wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: cg.fd}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() }) // ours; destroy kills its child
	buf := make([]byte, 8)
	if n, _ := out.Read(buf); !strings.HasPrefix(string(buf[:n]), "started") {
		t.Fatalf("the command did not start: %q", buf[:n])
	}
	procs, _ := os.ReadFile(filepath.Join(cg.path, "cgroup.procs"))
	if len(strings.Fields(string(procs))) != 2 {
		t.Fatalf("cgroup.procs: %q, want sh and sleep", procs)
	}
	if err := cg.destroy(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err == nil {
		t.Error("the command was not killed")
	}
	if _, err := os.Stat(cg.path); !os.IsNotExist(err) {
		t.Errorf("cgroup %s left (%v)", cg.path, err)
	}
}

// TestKillCgroupRefusesOthers: killCgroup touches only run cgroups under
// the cgroup v2 mount, never another cgroup a record might name. The
// paths do not exist, so a broken guard is seen (nil) without harm.
func TestKillCgroupRefusesOthers(t *testing.T) {
	t.Parallel()
	root := Cgroup2Root()
	for _, p := range []string{root + "/egressd-test-not-ours", "/tmp/egressd-run-0", root + "/x/../egressd-run-0/..", "egressd-run-0"} {
		if err := killCgroup(p); err == nil {
			t.Errorf("killCgroup(%q) was not refused", p)
		}
	}
}
