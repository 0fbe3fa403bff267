package runbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/egressd/egressd/ca"
	"github.com/egressd/egressd/daemon"
	"github.com/egressd/egressd/event"
	"github.com/egressd/egressd/honeytoken"
	"github.com/egressd/egressd/nft"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/sandbox"
)

// box is one run's resources, torn down in the order that keeps the
// sandbox sealed: its processes, then its link, then its namespace, then
// the gateway, and only then its wall table.
type box struct {
	log   *slog.Logger
	gw    *sandbox.NS
	name  string
	sbx   *sandbox.NS
	link  *sandbox.Link
	table string
	tmp   string
	cg    *runCgroup // nil where cgroup v2 is not available
	// canaries are the run's honeytokens (--honeytokens), nil: none
	canaries []honeytoken.Token
	record   string // path of the run record
	cmd      *exec.Cmd
	waitc    chan error
	stop     func() // stops the gateway and waits for it
	walled   bool
	done     func() // last: the exit summary
}

func (b *box) teardown() {
	defer b.gw.Close()
	if b.done != nil {
		defer b.done()
	}
	if b.cmd != nil && b.waitc != nil {
		// The PID namespace's init: killing it kills every process of the
		// sandbox; Wait returns once they are all gone. The cgroup's kill
		// goes first: it takes every process at once.
		if b.cg != nil {
			os.WriteFile(filepath.Join(b.cg.path, "cgroup.kill"), []byte("1"), 0)
		}
		b.cmd.Process.Kill()
		<-b.waitc
	}
	if b.cg != nil {
		if err := b.cg.destroy(); err != nil {
			b.log.Error("removing the sandbox cgroup", "err", err)
		}
	}
	linkGone := b.link == nil
	if b.link != nil {
		if err := b.link.Delete(); err != nil {
			b.log.Error("removing the sandbox link", "link", b.link.GatewayName, "err", err)
		} else {
			linkGone = true
		}
	}
	if b.sbx != nil {
		b.sbx.Close()
		if err := sandbox.Delete(b.name); err != nil {
			b.log.Error("removing the sandbox namespace", "name", b.name, "err", err)
		}
	}
	if b.stop != nil {
		b.stop()
	}
	if b.walled {
		if !linkGone {
			// Never a link without its wall: leave both for the next
			// run's sweep (or `egressd nft down --all`).
			b.log.Error("the sandbox link could not be removed: its wall stays", "table", b.table)
			return
		}
		if err := nft.Down(nft.CurrentNamespace, b.table); err != nil && !errors.Is(err, nft.ErrNoTable) {
			b.log.Error("removing this run's wall", "table", b.table, "err", err)
			return
		}
	}
	if b.tmp != "" {
		os.RemoveAll(b.tmp)
	}
	if b.record != "" {
		os.Remove(b.record)
	}
}

// Run builds the sandbox, proves it from inside, runs c.Argv in it, tears
// everything down and returns the command's exit code. The error is for a
// sandbox that could not be built, or ([*NotSealedError]) one the probe
// found open.
func Run(ctx context.Context, c Config) (int, error) {
	runDir := c.RunDir
	if runDir == "" {
		runDir = DefaultRunDir
	}
	term := c.Logger
	files := readableSecrets(c.Policy, c.Cred)
	if c.Honeytokens {
		if f := readableStore(c.StateDir, c.Cred); f != "" {
			files = append(files, f)
		}
	}
	if len(files) > 0 {
		return 0, &SecretsError{Files: files}
	}
	if c.Identity != "" {
		if _, err := WithIdentity(c.Policy, c.Identity, nil); err != nil {
			return 0, err
		}
	}
	gw, err := sandbox.Current()
	if err != nil {
		return 0, err
	}
	if sw, err := Sweep(gw, runDir, c.Policy.Sandbox.InterfacePrefix, false); err != nil {
		term.Warn("removing the leftovers of dead runs", "err", err)
	} else if len(sw.Removed) > 0 {
		term.Info("removed the leftovers of dead runs", "removed", sw.Removed)
	}
	b := &box{log: term, gw: gw}
	defer b.teardown()
	if err := b.build(c.Policy, runDir); err != nil {
		return 0, err
	}
	logFile, lf, err := openRunLog(c)
	if err != nil {
		return 0, err
	}
	defer lf.Close()
	sum := &summary{}
	log := slog.New(&logHandler{file: slog.NewJSONHandler(lf, &slog.HandlerOptions{Level: slog.LevelInfo, ReplaceAttr: event.ReadableDurations}), term: term.Handler(), sum: sum})

	if c.Honeytokens || c.Policy.Honeytokens {
		// before the gateway starts: it loads the store at start
		if b.canaries, err = issueHoneytokens(c.StateDir, b.name); err != nil {
			return 0, err
		}
		log.Info("honeytokens placed", "identity", b.name, "names", honeytokenNames(b.canaries))
	}
	gw4 := b.link.Gateway4.Addr()
	rp := Policy(c.Policy, gw4, !c.NoTransparent)
	if c.Identity != "" {
		if rp, err = WithIdentity(rp, c.Identity, []netip.Addr{b.link.Sandbox4.Addr(), b.link.Sandbox6.Addr()}); err != nil {
			return 0, err
		}
	}
	proxyAP := netip.MustParseAddrPort(rp.Listen.Proxy)
	v, err := b.startGateway(ctx, c, rp, log, sum, logFile)
	if err != nil || ctx.Err() != nil {
		if err == nil { // Ctrl-C during the proof: CMD never starts
			return 128 + int(syscall.SIGINT), nil
		}
		return 0, err
	}
	switch {
	case v.Leaked() || v.Err != nil:
		return ExitNotSealed, &NotSealedError{Reason: verdictReason(v)}
	case !v.Sealed && len(v.ControlsFailed) > 0:
		// An outage, not a leak (docs/PROOF.md): every probe of the walls
		// and the policy passed, only an allowed target did not answer.
		// CMD runs; it may find that target unreachable too.
		fmt.Fprintf(c.Stderr, "egressd run: WARNING: a positive control could not reach its target (an outage, not a leak: no probe got past the walls or the policy); starting the command: %s\n", strings.Join(v.ControlsFailed, "; "))
	case !v.Sealed:
		return ExitNotSealed, &NotSealedError{Reason: verdictReason(v)}
	}
	env, resolvConf, err := b.commandEnv(c, gw4, proxyAP)
	if err != nil {
		return 0, err
	}
	if err := b.startCommand(c, env, resolvConf); err != nil {
		return 0, fmt.Errorf("start %s: %w", c.Argv[0], err)
	}
	werr := waitCommand(ctx, b.cmd, b.waitc)
	b.waitc = nil // every process of the sandbox is gone
	return exitCode(werr)
}

// build makes the run's namespace, temp dir, cgroup and link, and writes
// the run record (before any wall exists, so a crash is always swept).
func (b *box) build(p *policy.Policy, runDir string) error {
	var err error
	b.name = sandbox.PIDName(NSPrefix, "run")
	if b.sbx, err = sandbox.Create(b.name); err != nil {
		return err
	}
	if b.tmp, err = os.MkdirTemp("", "egressd-run-"); err != nil {
		return err
	}
	os.Chmod(b.tmp, 0o755)
	b.cg = newRunCgroup(b.log)
	link, index, err := wireLink(p, b.sbx, b.gw)
	if err != nil {
		return err
	}
	b.link = link
	b.table = fmt.Sprintf("%s%d", TablePrefix, index)
	rec := record{PID: os.Getpid(), Cookie: b.gw.Cookie(), NS: b.name, Table: b.table, Link: link.GatewayName, Tmp: b.tmp}
	if b.cg != nil {
		rec.Cgroup = b.cg.path
	}
	if err := writeRecord(runDir, rec); err != nil {
		return err
	}
	b.record = rec.path(runDir)
	return nil
}

// openRunLog opens --log (default StateDir/run.log) for appending.
func openRunLog(c Config) (string, *os.File, error) {
	logFile := c.LogFile
	if logFile == "" {
		logFile = filepath.Join(c.StateDir, "run.log")
	}
	if err := os.MkdirAll(filepath.Dir(logFile), 0o700); err != nil {
		return "", nil, fmt.Errorf("--log: %w", err)
	}
	lf, err := os.OpenFile(logFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return "", nil, fmt.Errorf("--log: %w", err)
	}
	return logFile, lf, nil
}

// startGateway starts the run's gateway (proxy, DNS, walls) and waits for
// its boot verdict: the probe from inside the sandbox, unless --no-probe.
// It returns with a nil error and ctx done when interrupted during the
// proof.
func (b *box) startGateway(ctx context.Context, c Config, rp *policy.Policy, log *slog.Logger, sum *summary, logFile string) (daemon.Verdict, error) {
	booted := make(chan daemon.Verdict, 1)
	spec := Gateway(c, rp, b.table, b.link, log)
	spec.Booted = func(v daemon.Verdict) { booted <- v }
	if !c.NoProbe && c.Probe != nil {
		target := ProbeTarget{Name: b.name, NS: b.sbx, Policy: rp,
			Proxy: netip.MustParseAddrPort(rp.Listen.Proxy), DNS: netip.MustParseAddrPort(rp.Listen.DNS)}
		spec.Verify = func(ctx context.Context, _ *policy.Policy) (v daemon.Verdict) {
			sum.hold(func() { v = c.Probe(ctx, target) })
			return v
		}
	} else {
		// --no-probe is an explicit choice to run unverified.
		spec.NoSelftest, spec.AllowUnverified = true, true
		fmt.Fprintln(c.Stderr, "egressd run: WARNING: --no-probe: the sandbox is not proven sealed before the command starts")
	}
	g, err := daemon.NewGateway(spec)
	if err != nil {
		return daemon.Verdict{}, err
	}
	b.walled = true // from here on the table may exist
	dctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- g.Run(dctx, nil) }()
	b.stop = func() {
		cancel()
		<-runErr
		g.Close()
	}
	b.done = func() { sum.write(c.Stderr, logFile) }
	select {
	case v := <-booted:
		return v, nil
	case err := <-runErr:
		runErr <- err
		return daemon.Verdict{}, err
	case <-ctx.Done():
		return daemon.Verdict{}, nil
	}
}

// commandEnv writes the sandbox's resolv.conf, CA bundle and Java trust
// store, and returns CMD's environment; it warns about variables that
// look like credentials.
func (b *box) commandEnv(c Config, gw4 netip.Addr, proxyAP netip.AddrPort) ([]string, string, error) {
	resolvConf, err := sandbox.WriteResolvConf(b.tmp, gw4)
	if err != nil {
		return nil, "", err
	}
	authority, err := ca.LoadOrCreate(filepath.Join(c.StateDir, "ca"))
	if err != nil {
		return nil, "", err
	}
	bundle, err := writeCABundle(filepath.Join(b.tmp, "ca-bundle.pem"), authority.CertPEM())
	if err != nil {
		return nil, "", err
	}
	if _, err := writeCertDir(bundle); err != nil {
		return nil, "", err
	}
	javaStore, err := writeJavaTrustStore(filepath.Join(b.tmp, "java-truststore.jks"), bundle)
	if err != nil {
		return nil, "", err
	}
	if !JavaOptionSafe(javaStore) {
		b.log.Warn("Java gets no trust store: its path has whitespace or quotes, which JAVA_TOOL_OPTIONS cannot carry (set TMPDIR)", "path", javaStore)
	}
	env, suspicious := Env(c.Env, c.CleanEnv, c.KeepEnv, proxyAP, bundle, javaStore)
	if len(b.canaries) > 0 {
		if env, err = b.placeHoneytokens(env, c); err != nil {
			return nil, "", err
		}
	}
	if len(suspicious) > 0 {
		fmt.Fprintf(c.Stderr, "egressd run: WARNING: passing %d variable(s) that look like credentials into the sandbox: %s (--clean-env drops them; --env KEY keeps one and silences this)\n",
			len(suspicious), strings.Join(suspicious, ", "))
	}
	return env, resolvConf, nil
}

// startCommand starts CMD under the sandbox's init, in its own PID
// namespace and (where available) cloned straight into the run's cgroup;
// b.cmd and b.waitc are set once it runs.
func (b *box) startCommand(c Config, env []string, resolvConf string) error {
	self := c.Self
	if self == "" {
		self = "/proc/self/exe"
	}
	newCmd := func(cg *runCgroup) *exec.Cmd {
		cmd := sandbox.NSExecCommandHiding(self, b.sbx.Path(), resolvConf, c.Cred, hiddenPaths(c), c.Argv)
		sandbox.NewPIDNamespace(cmd)
		if cg != nil {
			// Cloned straight into the run's cgroup: no instant outside it.
			cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, cg.fd
		}
		cmd.Env = env
		cmd.Stdin, cmd.Stdout, cmd.Stderr = c.Stdin, c.Stdout, c.Stderr
		return cmd
	}
	cmd := newCmd(b.cg)
	startc := make(chan error, 1)
	waitc := make(chan error, 1)
	go func() {
		// PR_SET_PDEATHSIG follows the thread that started the child:
		// this one lives until the child is gone.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := cmd.Start()
		if err != nil && b.cg != nil {
			// The kernel refused the cgroup (clone3 or delegation): the
			// PID namespace still holds every process.
			b.log.Info("no cgroup for the sandbox: cloning into it failed (its PID namespace still holds every process)", "err", err)
			if derr := b.cg.destroy(); derr != nil {
				b.log.Error("removing the sandbox cgroup", "err", derr)
			}
			b.cg = nil
			cmd = newCmd(nil)
			err = cmd.Start()
		}
		if err != nil {
			startc <- err
			return
		}
		if b.cg != nil {
			b.cg.closeFD()
		}
		startc <- nil
		waitc <- cmd.Wait()
	}()
	if err := <-startc; err != nil {
		return err
	}
	b.cmd, b.waitc = cmd, waitc
	return nil
}

// waitCommand waits for CMD; Ctrl-C and SIGTERM go to the command, which
// gets 10 s to end before it is killed.
func waitCommand(ctx context.Context, cmd *exec.Cmd, waitc chan error) error {
	select {
	case werr := <-waitc:
		return werr
	case <-ctx.Done():
		cmd.Process.Signal(os.Interrupt)
		select {
		case werr := <-waitc:
			return werr
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			return <-waitc
		}
	}
}

// Gateway is the gateway of one run, for [daemon.NewGateway]: the run's
// policy, its wall on its own link only, egressd's CA from the state dir.
func Gateway(c Config, rp *policy.Policy, table string, link *sandbox.Link, log *slog.Logger) daemon.Gateway {
	g := daemon.Gateway{
		Options:  daemon.Options{Load: func() (*policy.Policy, error) { return rp, nil }, Logger: log},
		StateDir: c.StateDir,
		WallsSpec: func(p *policy.Policy) (nft.Spec, error) {
			return Spec(p, table, link)
		},
		WallsNS: nft.CurrentNamespace,
	}
	g.ProxyConfig.ReadyExempt = c.ReadyExempt
	return g
}

func exitCode(err error) (int, error) {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return ee.ExitCode(), nil
	}
	return 0, err
}

// wireLink wires the sandbox to the gateway on the first free link index.
func wireLink(p *policy.Policy, sbx, gw *sandbox.NS) (*sandbox.Link, int, error) {
	start := firstIndex + os.Getpid()%(lastIndex-firstIndex)
	var last error
	for i := 0; i < 32; i++ {
		idx := firstIndex + (start-firstIndex+i)%(lastIndex-firstIndex)
		link, err := sandbox.Wire(sandbox.Veth{
			Prefix: p.Sandbox.InterfacePrefix, Index: idx,
			SandboxNS: sbx, GatewayNS: gw,
			Pool4: p.Sandbox.Pool4, Pool6: p.Sandbox.Pool6,
		})
		if err == nil {
			return link, idx, nil
		}
		last = err
	}
	return nil, 0, fmt.Errorf("wire sandbox link: %w", last)
}
