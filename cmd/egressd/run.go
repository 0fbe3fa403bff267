//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/egressd/egressd/ca"
	"github.com/egressd/egressd/dnsfilter"
	"github.com/egressd/egressd/nft"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy"
	"github.com/egressd/egressd/sandbox"
	"github.com/egressd/egressd/selftest/probens"
)

func init() { commands["run"] = cmdRun }

// runNSPrefix names the namespaces `egressd run` creates; CleanupStale
// removes those whose egressd died.
const runNSPrefix = "egr"

// firstRunIndex..lastRunIndex are the link indexes run picks from: four
// digits, so no link name is a prefix of another and each run's wall
// matches its own link only.
const (
	firstRunIndex = 1000
	lastRunIndex  = 9999
)

func cmdRun(ctx context.Context, args []string, _, stderr io.Writer) int {
	fs := newFlagSet("run", stderr)
	cfg := configFlag(fs)
	userFlag := fs.String("user", "", "run CMD as this user (default: $SUDO_USER, else nobody); \"root\" lets CMD leave the sandbox and is refused")
	level := fs.String("log-level", "warn", "egressd's own log level (debug, info, warn, error); logs go to stderr")
	argv, err := parseRunArgs(fs, args)
	if err != nil || len(argv) == 0 {
		fmt.Fprintln(stderr, "usage: egressd run [--config FILE] [--user U] [--log-level L] -- CMD [ARGS...]")
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
	code, err := runSandboxed(ctx, p, log, cred, argv)
	if err != nil {
		fmt.Fprintf(stderr, "egressd run: %v\n", err)
		return exitUsage
	}
	return code
}

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

// runSandboxed builds the sandbox (namespace, link, walls, proxy, DNS),
// runs argv inside as cred, tears everything down and returns argv's exit
// code.
func runSandboxed(ctx context.Context, p *policy.Policy, log *slog.Logger, cred *syscall.Credential, argv []string) (int, error) {
	if stale, err := sandbox.CleanupStale(runNSPrefix); err != nil {
		log.Warn("cleaning up stale sandboxes", "err", err)
	} else if len(stale) > 0 {
		log.Info("removed stale sandboxes", "names", stale)
	}
	gw, err := sandbox.Current()
	if err != nil {
		return 0, err
	}
	defer gw.Close()
	name := sandbox.PIDName(runNSPrefix, "run")
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
	link, index, err := wireRunLink(p, sbx, gw)
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

	// proxy and DNS on the link's gateway address
	proxyPort := uint16(3128)
	if _, port, err := probens.ListenAddr(p.Listen.Proxy); err == nil {
		proxyPort = port
	}
	authority, err := ca.New()
	if err != nil {
		return 0, err
	}
	px := proxy.New(p, proxy.Config{Logger: log.With("component", "proxy"), CA: authority})
	pl, err := proxy.Listen(netip.AddrPortFrom(gw4, proxyPort).String())
	if err != nil {
		return 0, fmt.Errorf("listen proxy: %w", err)
	}
	go px.Serve(pl)
	defer px.Shutdown(context.Background())
	dnsAddr := netip.AddrPortFrom(gw4, 53).String()
	udp, err := net.ListenPacket("udp", dnsAddr)
	if err != nil {
		return 0, fmt.Errorf("listen dns: %w", err)
	}
	tcp, err := net.Listen("tcp", dnsAddr)
	if err != nil {
		udp.Close()
		return 0, fmt.Errorf("listen dns: %w", err)
	}
	dnsSrv, err := dnsfilter.New(dnsfilter.Config{Policy: px.Policy, Logger: log.With("component", "dns")})
	if err != nil {
		return 0, err
	}
	go dnsSrv.Serve(udp, tcp)
	defer dnsSrv.Shutdown(context.Background())

	// the wall: this run's link may reach only its proxy and DNS
	spec := nft.Spec{
		Table:      fmt.Sprintf("egressd-run-%d", index),
		IfPrefixes: []string{link.GatewayName},
		Gateways:   []netip.Addr{gw4},
		ProxyPort:  proxyPort,
		DNSPort:    53,
		HighRisk:   p.HighRiskPrefixes(),
	}
	if link.Gateway6.IsValid() {
		spec.Gateways = append(spec.Gateways, link.Gateway6.Addr())
	}
	if err := nft.Apply(nft.CurrentNamespace, spec); err != nil {
		return 0, fmt.Errorf("walls: %w", err)
	}
	// The sandbox namespace dies first (deferred above runs last), so when
	// this table goes no sandbox traffic can exist any more; after a crash
	// the table stays (fail-closed) until `egressd nft down`.
	defer func() {
		if err := nft.Down(nft.CurrentNamespace, spec.TableName()); err != nil {
			log.Error("removing this run's wall", "table", spec.TableName(), "err", err)
		}
	}()

	resolvConf, err := sandbox.WriteResolvConf(tmp, gw4)
	if err != nil {
		return 0, err
	}
	bundle, err := writeCABundle(filepath.Join(tmp, "ca-bundle.pem"), authority.CertPEM())
	if err != nil {
		return 0, err
	}
	cmd := sandbox.NSExecCommandAs("/proc/self/exe", sbx.Path(), resolvConf, cred, argv)
	cmd.Env = sandboxEnv(os.Environ(), "http://"+netip.AddrPortFrom(gw4, proxyPort).String(), bundle)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s: %w", argv[0], err)
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
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return ee.ExitCode(), nil
	}
	if err != nil {
		return 0, err
	}
	return 0, nil
}

// wireRunLink wires the sandbox to the gateway on the first free link index.
func wireRunLink(p *policy.Policy, sbx, gw *sandbox.NS) (*sandbox.Link, int, error) {
	start := firstRunIndex + os.Getpid()%(lastRunIndex-firstRunIndex)
	var last error
	for i := 0; i < 32; i++ {
		idx := firstRunIndex + (start-firstRunIndex+i)%(lastRunIndex-firstRunIndex)
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

// sandboxEnv points every common client at the proxy and at a CA bundle
// that adds egressd's CA to the system roots.
func sandboxEnv(env []string, proxyURL, bundle string) []string {
	set := map[string]string{
		"HTTP_PROXY": proxyURL, "HTTPS_PROXY": proxyURL, "ALL_PROXY": proxyURL, "NO_PROXY": "",
		"http_proxy": proxyURL, "https_proxy": proxyURL, "all_proxy": proxyURL, "no_proxy": "",
		"SSL_CERT_FILE": bundle, "REQUESTS_CA_BUNDLE": bundle, "PIP_CERT": bundle,
		"NODE_EXTRA_CA_CERTS": bundle, "CURL_CA_BUNDLE": bundle, "GIT_SSL_CAINFO": bundle,
	}
	out := make([]string, 0, len(env)+len(set))
	for _, kv := range env {
		k, _, _ := cutEnv(kv)
		if _, ok := set[k]; !ok {
			out = append(out, kv)
		}
	}
	for k, v := range set {
		out = append(out, k+"="+v)
	}
	return out
}

func cutEnv(kv string) (string, string, bool) {
	for i := 0; i < len(kv); i++ {
		if kv[i] == '=' {
			return kv[:i], kv[i+1:], true
		}
	}
	return kv, "", false
}

// systemBundles are where Debian, Fedora and Alpine keep the system roots.
var systemBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/cert.pem",
}

func writeCABundle(path string, egressdCA []byte) (string, error) {
	var roots []byte
	for _, f := range systemBundles {
		if b, err := os.ReadFile(f); err == nil {
			roots = b
			break
		}
	}
	data := append(append(roots, '\n'), egressdCA...)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return "", fmt.Errorf("write CA bundle: %w", err)
	}
	return path, nil
}
