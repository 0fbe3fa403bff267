//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"strconv"
	"strings"
	"syscall"

	"github.com/egressd/egressd/runbox"
	"github.com/egressd/egressd/selftest/probens"
)

func init() { commands["run"] = cmdRun }

func cmdRun(ctx context.Context, args []string, _, stderr io.Writer) int {
	fs := newFlagSet("run", stderr)
	cfg := configFlag(fs)
	userFlag := fs.String("user", "", "run CMD as this user (default: $SUDO_USER, else nobody); \"root\" lets CMD leave the sandbox and is refused")
	stateDir := fs.String("state-dir", defaultStateDir(), "directory for egressd's CA (shared with serve)")
	level := fs.String("log-level", "warn", "egressd's own log level on the terminal (debug, info, warn, error); decisions go to --log only")
	logFile := fs.String("log", "", "write every log line, decisions included, to FILE (default: <state-dir>/run.log)")
	cleanEnv := fs.Bool("clean-env", false, "start CMD from a minimal environment (PATH, HOME, TERM, locale, USER, SHELL, TZ) instead of the host's")
	var keep stringList
	fs.Var(&keep, "env", "pass variable KEY from the host environment (repeatable; with --clean-env, or to silence the credential warning)")
	noProbe := fs.Bool("no-probe", false, "start CMD without proving the sandbox sealed first (loudly)")
	noTransparent := fs.Bool("no-transparent", false, "do not redirect the sandbox's TCP 443 and 80 to the checkpoint")
	honeytokens := fs.Bool("honeytokens", false, "place canary credentials in CMD's environment (as honeytokens: true): any of them on the way out is refused and alerted")
	identity := fs.String("identity", "", "log and decide the sandbox's traffic as identity NAME (rules naming it apply), so trial runs of one agent add up for egressd suggest --identity NAME")
	argv, err := parseRunArgs(fs, args)
	if err != nil || len(argv) == 0 {
		fmt.Fprintln(stderr, "usage: egressd run [--config FILE] [--user U] [--state-dir D] [--log FILE] [--log-level L] [--clean-env] [--env KEY]... [--no-probe] [--no-transparent] [--identity NAME] -- CMD [ARGS...]")
		return exitUsage
	}
	log, err := newLogger(stderr, *level)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(stderr, "egressd run: needs root to create the sandbox namespace and its walls (sudo egressd run -- CMD)")
		return exitUsage
	}
	cred, err := runCredential(*userFlag)
	if err != nil {
		fmt.Fprintf(stderr, "egressd run: %v\n", err)
		return exitUsage
	}
	p, err := loadPolicy(*cfg)
	if err != nil {
		printConfigError(stderr, err)
		return exitUsage
	}
	for _, w := range p.Warnings() {
		fmt.Fprintf(stderr, "egressd run: warning: %s: %s\n", p.Source, w)
	}
	code, err := runbox.Run(ctx, runbox.Config{
		Policy: p, Logger: log, LogFile: *logFile, StateDir: *stateDir, Cred: cred, Argv: argv,
		Env: os.Environ(), CleanEnv: *cleanEnv, KeepEnv: keep, NoTransparent: *noTransparent, Honeytokens: *honeytokens, Identity: *identity,
		Probe: runProbe(*stateDir, stderr), NoProbe: *noProbe, ReadyExempt: probens.Conns.Has,
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: stderr,
	})
	var ns *runbox.NotSealedError
	if errors.As(err, &ns) {
		fmt.Fprintf(stderr, "egressd run: %v\n", err)
		return runbox.ExitNotSealed
	}
	if err != nil {
		fmt.Fprintf(stderr, "egressd run: %v\n", err)
		return exitUsage
	}
	return code
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// parseRunArgs splits flags from the command after "--".
func parseRunArgs(fs interface{ Parse([]string) error }, args []string) ([]string, error) {
	for i, a := range args {
		if a == "--" {
			return args[i+1:], fs.Parse(args[:i])
		}
	}
	if err := fs.Parse(args); err != nil { // --help, or a bad flag
		return nil, err
	}
	return nil, errors.New("missing -- before the command")
}

// runCredential picks the unprivileged user CMD runs as: a root process in
// the sandbox could setns(2) back into the host's namespaces.
func runCredential(name string) (*syscall.Credential, error) {
	if name == "" {
		name = os.Getenv("SUDO_USER")
	}
	if name == "" {
		name = "nobody"
	}
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("--user %s: %w", name, err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	if uid == 0 {
		return nil, errors.New("--user root: a root command can leave the sandbox's namespace; name an unprivileged user")
	}
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	if gids, err := u.GroupIds(); err == nil {
		for _, g := range gids {
			if n, err := strconv.ParseUint(g, 10, 32); err == nil && n != 0 {
				cred.Groups = append(cred.Groups, uint32(n))
			}
		}
	}
	return cred, nil
}
