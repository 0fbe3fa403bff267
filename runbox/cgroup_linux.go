package runbox

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// cgroupPrefix names the cgroup v2 child of each run; nothing else is ever
// killed in, or removed from, the cgroup tree.
const cgroupPrefix = "egressd-run-"

// cgroupUnavailable is said once per process: a run without its cgroup is
// still held by its PID namespace.
var cgroupUnavailable sync.Once

// runCgroup is one run's cgroup v2 child: the sandbox's init is cloned
// into it (CLONE_INTO_CGROUP), so every process of the sandbox is in it
// from its first instruction, and teardown kills the whole cgroup.
type runCgroup struct {
	path string
	fd   int // the directory, for SysProcAttr.CgroupFD
}

// Cgroup2Root is where cgroup v2 is mounted ("" when it is not).
func Cgroup2Root() string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPER
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok || !strings.HasPrefix(post, "cgroup2 ") {
			continue
		}
		if fs := strings.Fields(pre); len(fs) >= 5 && fs[3] == "/" {
			return fs[4]
		}
	}
	return ""
}

// ownCgroup is the cgroup v2 path of this process ("0::/path").
func ownCgroup() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			return p, nil
		}
	}
	return "", errors.New("no cgroup v2 entry in /proc/self/cgroup")
}

// newRunCgroup makes this run's cgroup under egressd's own. It returns
// nil (and says so once, at info level) when cgroup v2 is not mounted or
// the kernel or delegation refuses.
func newRunCgroup(log interface{ Info(string, ...any) }) *runCgroup {
	cg, err := makeRunCgroup()
	if err != nil {
		cgroupUnavailable.Do(func() {
			log.Info("no cgroup for the sandbox (its PID namespace still holds every process)", "err", err)
		})
		return nil
	}
	return cg
}

func makeRunCgroup() (*runCgroup, error) {
	root := Cgroup2Root()
	if root == "" {
		return nil, errors.New("cgroup v2 is not mounted")
	}
	own, err := ownCgroup()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(root, filepath.Clean("/"+own), cgroupPrefix+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(path, 0o755); err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	fd, err := unix.Open(path, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Rmdir(path)
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	return &runCgroup{path: path, fd: fd}, nil
}

// closeFD releases the directory once the init has been cloned into it.
func (c *runCgroup) closeFD() {
	if c.fd >= 0 {
		unix.Close(c.fd)
		c.fd = -1
	}
}

// destroy kills every process in the cgroup and removes it.
func (c *runCgroup) destroy() error {
	c.closeFD()
	return killCgroup(c.path)
}

// killCgroup kills every process in the cgroup at path (cgroup.kill, or
// SIGKILL to each pid in cgroup.procs before Linux 5.14), waits until it
// is empty and removes it. Only a directory named cgroupPrefix* is
// touched.
func killCgroup(path string) error {
	root := Cgroup2Root()
	if root == "" || !strings.HasPrefix(path, root+"/") || filepath.Clean(path) != path ||
		!strings.HasPrefix(filepath.Base(path), cgroupPrefix) {
		return fmt.Errorf("cgroup %s: not a run's cgroup", path)
	}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	in, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return fmt.Errorf("cgroup %s: %w", path, err)
	}
	defer unix.Close(in)
	// cgroup.events is modified when "populated" changes: the wake-up
	// for the wait below.
	if _, err := unix.InotifyAddWatch(in, filepath.Join(path, "cgroup.events"), unix.IN_MODIFY); err != nil {
		return fmt.Errorf("cgroup %s: %w", path, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := os.WriteFile(filepath.Join(path, "cgroup.kill"), []byte("1"), 0); err != nil {
			killProcs(path) // before 5.14
		}
		populated, err := cgroupPopulated(path)
		if err != nil {
			return err
		}
		if !populated {
			break
		}
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("cgroup %s: processes still in it after SIGKILL", path)
		}
		wait := min(left, time.Second) // re-kill a process that was forking
		unix.Poll([]unix.PollFd{{Fd: int32(in), Events: unix.POLLIN}}, int(wait/time.Millisecond))
		var buf [4096]byte
		unix.Read(in, buf[:])
	}
	if err := unix.Rmdir(path); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("cgroup %s: %w", path, err)
	}
	return nil
}

func killProcs(path string) {
	b, _ := os.ReadFile(filepath.Join(path, "cgroup.procs"))
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			unix.Kill(pid, unix.SIGKILL)
		}
	}
}

func cgroupPopulated(path string) (bool, error) {
	b, err := os.ReadFile(filepath.Join(path, "cgroup.events"))
	if err != nil {
		return false, fmt.Errorf("cgroup %s: %w", path, err)
	}
	return bytes.Contains(b, []byte("populated 1")), nil
}
