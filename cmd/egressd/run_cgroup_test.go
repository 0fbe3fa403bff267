//go:build linux

package main

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/egressd/egressd/runbox"
)

// cgroupOf is the cgroup v2 directory named by a "0::/path" line of
// /proc/PID/cgroup printed by CMD ("" for another line).
func cgroupOf(line string) string {
	p, ok := strings.CutPrefix(strings.TrimSpace(line), "0::")
	if !ok || runbox.Cgroup2Root() == "" {
		return ""
	}
	return filepath.Join(runbox.Cgroup2Root(), p)
}

// descendants lists every process below pid.
func descendants(pid int) []int {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parens.
		fs := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(fs) < 2 {
			continue
		}
		pp, _ := strconv.Atoi(fs[1])
		children[pp] = append(children[pp], p)
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	slices.Sort(out)
	return out
}

func cgroupProcs(t *testing.T, dir string) []int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		t.Fatalf("the run's cgroup: %v", err)
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		p, _ := strconv.Atoi(f)
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// requireCgroup2 skips where cgroup v2 is not mounted writable (the run
// then goes on without a cgroup), unless EGRESSD_REQUIRE_NETNS=1.
func requireCgroup2(t *testing.T) {
	t.Helper()
	root := runbox.Cgroup2Root()
	if root != "" && syscall.Access(root, 2) == nil {
		return
	}
	if os.Getenv("EGRESSD_REQUIRE_NETNS") == "1" {
		t.Fatal("cgroup v2 is not mounted writable")
	}
	t.Skip("cgroup v2 is not mounted writable")
}

// TestRunCgroup: while CMD runs, it and every other process of the
// sandbox (a background child included) are in the run's own cgroup,
// egressd itself is not, and the cgroup is gone after the run.
func TestRunCgroup(t *testing.T) {
	t.Parallel()
	requireCgroup2(t)
	l := newRunLab(t, runConfig)
	token := nonceSeconds()
	cmd := l.command(append(l.runArgs(), "--", "sh", "-c",
		"sleep "+token+" & cat /proc/self/cgroup; echo ready; read x; kill $!")...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	r := bufio.NewReader(stdout)
	var dir string
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("the run did not start: %v\n%s", err, errb.String())
		}
		if line == "ready\n" {
			break
		}
		if d := cgroupOf(line); d != "" {
			dir = d
		}
	}
	if !strings.HasPrefix(filepath.Base(dir), "egressd-run-") {
		t.Fatalf("CMD is not in a run's cgroup: %q\n%s", dir, errb.String())
	}
	procs := cgroupProcs(t, dir)
	sbx := descendants(cmd.Process.Pid)
	if len(sbx) < 3 || !slices.Equal(procs, sbx) {
		t.Errorf("the run's cgroup holds %v, the sandbox's processes are %v", procs, sbx)
	}
	if slices.Contains(procs, cmd.Process.Pid) {
		t.Errorf("egressd itself (pid %d) was moved into the run's cgroup", cmd.Process.Pid)
	}
	stdin.Write([]byte("\n"))
	io.Copy(io.Discard, r)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("egressd run: %v\n%s", err, errb.String())
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the run's cgroup %s is left after the run (%v)", dir, err)
	}
	l.assertNothingLeft(t)
}
