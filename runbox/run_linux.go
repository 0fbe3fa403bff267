package runbox

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/egressd/egressd/ca"
	"github.com/egressd/egressd/daemon"
	"github.com/egressd/egressd/nft"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/sandbox"
)

// Run builds the sandbox, runs c.Argv inside, tears everything down and
// returns the command's exit code. The error is for a sandbox that could
// not be built.
func Run(ctx context.Context, c Config) (int, error) {
	log := c.Logger
	if stale, err := sandbox.CleanupStale(NSPrefix); err != nil {
		log.Warn("cleaning up stale sandboxes", "err", err)
	} else if len(stale) > 0 {
		log.Info("removed stale sandboxes", "names", stale)
	}
	gw, err := sandbox.Current()
	if err != nil {
		return 0, err
	}
	defer gw.Close()
	name := sandbox.PIDName(NSPrefix, "run")
	sbx, err := sandbox.Create(name)
	if err != nil {
		return 0, err
	}
	defer func() {
		sbx.Close()
		if err := sandbox.Delete(name); err != nil {
			log.Error("removing the sandbox namespace", "name", name, "err", err)
		}
	}()
	link, index, err := wireLink(c.Policy, sbx, gw)
	if err != nil {
		return 0, err
	}
	gw4 := link.Gateway4.Addr()
	tmp, err := os.MkdirTemp("", "egressd-run-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(tmp)
	os.Chmod(tmp, 0o755)

	rp := Policy(c.Policy, gw4)
	table := fmt.Sprintf("%s%d", TablePrefix, index)
	booted := make(chan daemon.Verdict, 1)
	g, err := daemon.NewGateway(daemon.Gateway{
		Load:     func() (*policy.Policy, error) { return rp, nil },
		Logger:   log,
		StateDir: c.StateDir,
		Walls: func(p *policy.Policy) (nft.Spec, error) {
			return Spec(p, table, link)
		},
		WallsNS:    nft.CurrentNamespace,
		NoSelftest: true,
		Booted:     func(v daemon.Verdict) { booted <- v },
	})
	if err != nil {
		return 0, err
	}
	defer g.Close()
	dctx, stop := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- g.Run(dctx, nil) }()
	defer func() {
		stop()
		<-runErr
		// The sandbox namespace dies first (deferred above runs last), so
		// when this table goes no sandbox traffic can exist any more.
		if err := nft.Down(nft.CurrentNamespace, table); err != nil {
			log.Error("removing this run's wall", "table", table, "err", err)
		}
	}()
	select {
	case <-booted:
	case err := <-runErr:
		runErr <- err
		return 0, err
	}

	resolvConf, err := sandbox.WriteResolvConf(tmp, gw4)
	if err != nil {
		return 0, err
	}
	authority, err := ca.LoadOrCreate(filepath.Join(c.StateDir, "ca"))
	if err != nil {
		return 0, err
	}
	bundle, err := writeCABundle(filepath.Join(tmp, "ca-bundle.pem"), authority.CertPEM())
	if err != nil {
		return 0, err
	}
	proxyAP, _ := netip.ParseAddrPort(rp.Listen.Proxy)
	self := c.Self
	if self == "" {
		self = "/proc/self/exe"
	}
	cmd := sandbox.NSExecCommandAs(self, sbx.Path(), resolvConf, c.Cred, c.Argv)
	cmd.Env = Env(c.Env, "http://"+proxyAP.String(), bundle)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.Stdin, c.Stdout, c.Stderr
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s: %w", c.Argv[0], err)
	}
	done := make(chan struct{})
	go func() { // Ctrl-C and SIGTERM go to the command; egressd waits for it
		select {
		case <-ctx.Done():
			cmd.Process.Signal(os.Interrupt)
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
			}
		case <-done:
		}
	}()
	err = cmd.Wait()
	close(done)
	return exitCode(err)
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
