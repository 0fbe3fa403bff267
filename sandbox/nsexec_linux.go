//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// NSExecCommand returns the command that runs argv inside the network
// namespace at nsPath, with resolvConf ("" for none) bind-mounted over
// /etc/resolv.conf in a private mount namespace: self (normally
// "/proc/self/exe") re-executed as `self __nsexec NSPATH RESOLVCONF --
// ARGV...`, whose main must hand os.Args[2:] to [NSExecMain]. The caller
// sets Env, Stdin, Stdout and Stderr. argv[0] is looked up in PATH inside
// the child.
//
// The command keeps the caller's credentials. A root command can setns(2)
// back into the host's namespaces through /proc; a command that must stay
// sealed has to run unprivileged: use [NSExecCommandAs].
func NSExecCommand(self, nsPath, resolvConf string, argv []string) *exec.Cmd {
	return NSExecCommandAs(self, nsPath, resolvConf, nil, argv)
}

// NSExecCommandAs is [NSExecCommand] that also switches to cred (uid, gid,
// supplementary groups) after entering the namespace and sets
// no_new_privs, so set-uid binaries cannot regain the privileges needed to
// leave it. A nil cred keeps the caller's credentials.
func NSExecCommandAs(self, nsPath, resolvConf string, cred *syscall.Credential, argv []string) *exec.Cmd {
	return NSExecCommandHiding(self, nsPath, resolvConf, cred, nil, argv)
}

// NSExecCommandHiding is [NSExecCommandAs] whose command's mount namespace
// also hides the absolute paths in hide (egressd's secrets and state): an
// empty read-only tmpfs over a directory, /dev/null read-only over a file
// (a symlink hides what it resolves to). A path that does not exist is
// skipped.
func NSExecCommandHiding(self, nsPath, resolvConf string, cred *syscall.Credential, hide []string, argv []string) *exec.Cmd {
	args := []string{NSExecArg}
	for _, h := range hide {
		args = append(args, "--hide="+h)
	}
	if cred != nil {
		gs := make([]string, len(cred.Groups))
		for i, g := range cred.Groups {
			gs[i] = strconv.FormatUint(uint64(g), 10)
		}
		args = append(args,
			"--uid="+strconv.FormatUint(uint64(cred.Uid), 10),
			"--gid="+strconv.FormatUint(uint64(cred.Gid), 10),
			"--groups="+strings.Join(gs, ","))
	}
	args = append(args, nsPath, resolvConf, "--")
	return exec.Command(self, append(args, argv...)...)
}

// NSExecMain is the child half of [NSExecCommand]; args are the arguments
// after NSExecArg (os.Args[2:]). It unshares the mount namespace, makes /
// private (recursively) so nothing propagates back to the host, masks the
// host's unix sockets (see maskHostSockets), bind-mounts the resolv.conf read-only over /etc/resolv.conf, enters the
// network namespace, drops credentials if asked, and execs the command. It
// returns only on error; it refuses to exec in the namespace it was started
// in or in the root network namespace.
func NSExecMain(args []string) error {
	hide, args := hideFlags(args)
	cred, rest, err := parseNSExecFlags(args)
	if err != nil {
		return fmt.Errorf("sandbox: nsexec: %w", err)
	}
	if len(rest) < 4 || rest[2] != "--" || rest[0] == "" {
		return fmt.Errorf("sandbox: nsexec: usage: %s [--hide=PATH]... [--uid=N --gid=N --groups=G,...] NSPATH RESOLVCONF -- CMD [ARGS...]", NSExecArg)
	}
	nsPath, resolvConf, argv := rest[0], rest[1], rest[3:]

	// Namespaces belong to the thread; exec keeps the calling thread's. The
	// lock is never released: this thread execs or the process exits.
	runtime.LockOSThread()
	if err := privateMounts(resolvConf); err != nil {
		return err
	}
	if err := hidePaths(hide); err != nil {
		return fmt.Errorf("sandbox: nsexec: %w", err)
	}
	if err := enterNetNS(nsPath); err != nil {
		return err
	}
	init := os.Getpid() == 1
	if init {
		// A fresh PID namespace (see [NewPIDNamespace]): its own /proc,
		// so the command sees only its own processes.
		if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("sandbox: nsexec: mount /proc for the PID namespace: %w", err)
		}
	}
	if init {
		// The init keeps its credentials: changing them would clear the
		// parent-death signal that ends the sandbox with egressd. The
		// command drops them in the child, with no_new_privs inherited.
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("sandbox: nsexec: set no_new_privs: %w", err)
		}
		if err := sealNonIP(); err != nil {
			return fmt.Errorf("sandbox: nsexec: %w", err)
		}
		path, err := exec.LookPath(argv[0])
		if err != nil {
			return fmt.Errorf("sandbox: nsexec: %w", err)
		}
		return initMain(path, argv, cred)
	}
	if cred != nil {
		if err := dropCredentials(cred); err != nil {
			return fmt.Errorf("sandbox: nsexec: %w", err)
		}
		if err := sealNonIP(); err != nil {
			return fmt.Errorf("sandbox: nsexec: %w", err)
		}
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return fmt.Errorf("sandbox: nsexec: %w", err)
	}
	if err := syscall.Exec(path, argv, os.Environ()); err != nil {
		return fmt.Errorf("sandbox: nsexec: exec %s: %w", path, err)
	}
	return nil // not reached
}

func parseNSExecFlags(args []string) (*syscall.Credential, []string, error) {
	var cred *syscall.Credential
	var uid, gid bool
	for len(args) > 0 && strings.HasPrefix(args[0], "--") && args[0] != "--" {
		k, v, _ := strings.Cut(strings.TrimPrefix(args[0], "--"), "=")
		if cred == nil {
			cred = &syscall.Credential{Groups: []uint32{}}
		}
		switch k {
		case "uid", "gid":
			n, err := strconv.ParseUint(v, 10, 32)
			if err != nil {
				return nil, nil, fmt.Errorf("flag %s: %w", args[0], err)
			}
			if k == "uid" {
				cred.Uid, uid = uint32(n), true
			} else {
				cred.Gid, gid = uint32(n), true
			}
		case "groups":
			for _, g := range strings.Split(v, ",") {
				if g == "" {
					continue
				}
				n, err := strconv.ParseUint(g, 10, 32)
				if err != nil {
					return nil, nil, fmt.Errorf("flag %s: %w", args[0], err)
				}
				cred.Groups = append(cred.Groups, uint32(n))
			}
		default:
			return nil, nil, fmt.Errorf("unknown flag %s", args[0])
		}
		args = args[1:]
	}
	if cred != nil && (!uid || !gid) {
		return nil, nil, errors.New("--uid and --gid go together")
	}
	return cred, args, nil
}

// dropCredentials switches every thread to cred (the syscall package's
// setters apply process-wide) and sets no_new_privs.
func dropCredentials(cred *syscall.Credential) error {
	gs := make([]int, len(cred.Groups))
	for i, g := range cred.Groups {
		gs[i] = int(g)
	}
	if err := syscall.Setgroups(gs); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setgid(int(cred.Gid)); err != nil {
		return fmt.Errorf("setgid %d: %w", cred.Gid, err)
	}
	if err := syscall.Setuid(int(cred.Uid)); err != nil {
		return fmt.Errorf("setuid %d: %w", cred.Uid, err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	return nil
}

// NewPIDNamespace makes cmd (from [NSExecCommand]) start in a new PID
// namespace whose init is the nsexec helper, and be killed if the thread
// that starts it dies (start it from a goroutine locked to its thread, as
// PR_SET_PDEATHSIG follows the thread, not the process). The helper runs
// the command as its child, forwards signals to it, reaps orphans and
// exits with the command's status; when it exits the kernel kills every
// other process of the namespace — backgrounded, nohup'ed, setsid'ed —
// and cmd.Wait returns only once they are all gone.
func NewPIDNamespace(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Cloneflags |= unix.CLONE_NEWPID
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}

// initMain is PID 1 of the sandbox's PID namespace: it runs the command,
// forwards signals, reaps every orphan, and exits with the command's
// status (128+n for a signal), which ends the namespace.
func initMain(path string, argv []string, cred *syscall.Credential) error {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH, syscall.SIGCONT, syscall.SIGTSTP)
	// The thread is locked and in the sandbox's namespaces; the child is
	// forked from it and inherits them, and no_new_privs.
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, 1, 2},
		Sys:   &syscall.SysProcAttr{Credential: cred},
	})
	if err != nil {
		return fmt.Errorf("sandbox: nsexec: start %s: %w", path, err)
	}
	go func() {
		for s := range sigs {
			syscall.Kill(pid, s.(syscall.Signal))
		}
	}()
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("sandbox: nsexec: wait: %w", err)
		}
		if got != pid {
			continue // an orphan, reaped
		}
		switch {
		case ws.Exited():
			os.Exit(ws.ExitStatus())
		case ws.Signaled():
			os.Exit(128 + int(ws.Signal()))
		}
	}
}

// privateMounts gives the command its own mount namespace: / private (so
// nothing propagates back to the host), the host's unix sockets masked and
// resolvConf, if set, bind-mounted read-only over /etc/resolv.conf.
func privateMounts(resolvConf string) error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("sandbox: nsexec: unshare mount namespace: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("sandbox: nsexec: make / private: %w", err)
	}
	// Before the sandbox's network namespace is entered: the host's
	// daemons' sockets are listed in this one.
	if _, err := maskHostSockets(); err != nil {
		return fmt.Errorf("sandbox: nsexec: %w", err)
	}
	if resolvConf != "" {
		if err := unix.Mount(resolvConf, "/etc/resolv.conf", "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("sandbox: nsexec: bind-mount %s over /etc/resolv.conf: %w", resolvConf, err)
		}
		if err := unix.Mount("", "/etc/resolv.conf", "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("sandbox: nsexec: make /etc/resolv.conf read-only: %w", err)
		}
	}
	return nil
}

// enterNetNS moves the thread into the network namespace at nsPath, and
// refuses if that is the caller's namespace or the machine's own.
func enterNetNS(nsPath string) error {
	// Never run the command unsandboxed: not in the namespace egressd runs
	// in, nor in the machine's own.
	refuse := map[uint64]string{}
	if root, err := RootCookie(); err == nil {
		refuse[root] = "the root network namespace"
	}
	started, err := threadCookie()
	if err != nil {
		return fmt.Errorf("sandbox: nsexec: %w", err)
	}
	refuse[started] = "the caller's network namespace"
	fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sandbox: nsexec: open %s: %w", nsPath, err)
	}
	err = unix.Setns(fd, unix.CLONE_NEWNET)
	unix.Close(fd)
	if err != nil {
		return fmt.Errorf("sandbox: nsexec: enter %s: %w", nsPath, err)
	}
	got, err := threadCookie()
	if err != nil {
		return fmt.Errorf("sandbox: nsexec: %w", err)
	}
	if what, ok := refuse[got]; ok {
		return fmt.Errorf("sandbox: nsexec: %s is %s: refusing", nsPath, what)
	}
	return nil
}
