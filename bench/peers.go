//go:build linux

package main

import (
	"bufio"
	"context"
	"crypto/x509"
	"debug/buildinfo"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proxyProc is one proxy under test, started pinned to the proxy core.
type proxyProc struct {
	name    string
	version string
	addr    string // 127.0.0.1:port, the proxy listener
	admin   string // egressd's admin listener (metrics); "" for peers
	pprof   string // the profiled egressd's pprof listener; "" otherwise
	roots   *x509.CertPool
	cmd     *exec.Cmd
	log     string
	started time.Time
	ready   time.Duration // from exec to the first request through it
	exited  chan struct{} // closed when the process has exited
}

func (p *proxyProc) pid() int {
	if p == nil || p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// stop ends the proxy and whatever it started (its own process group,
// created for it), politely first.
func (p *proxyProc) stop() {
	if p == nil || p.cmd == nil || p.cmd.Process == nil {
		return
	}
	pid := p.cmd.Process.Pid
	syscall.Kill(-pid, syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		syscall.Kill(-pid, syscall.SIGKILL)
		<-p.exited
	}
	syscall.Kill(-pid, syscall.SIGKILL) // anything it left in its group
}

// startPinned runs bin pinned to cpu with taskset, in its own process
// group, logging to dir/name.log, and waits until a GET through it works.
func startPinned(o *origin, dir, name string, cpu int, addr string, env []string, bin string, args ...string) (*proxyProc, error) {
	logPath := filepath.Join(dir, name+".log")
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("create log: %w", err)
	}
	defer lf.Close()
	cmd := exec.Command("taskset", append([]string{"-c", strconv.Itoa(cpu), bin}, args...)...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p := &proxyProc{name: name, addr: addr, cmd: cmd, log: logPath, started: time.Now(), exited: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { cmd.Wait(); close(p.exited) }()
	if err := p.waitReady(o, 90*time.Second); err != nil {
		p.stop()
		return nil, fmt.Errorf("%s: %w\n%s", name, err, tail(logPath, 20))
	}
	p.ready = time.Since(p.started)
	return p, nil
}

// waitReady polls with a real proxied GET until it succeeds.
func (p *proxyProc) waitReady(o *origin, limit time.Duration) error {
	c := &client{proxy: p.addr, origin: o, dialTO: time.Second}
	op := c.keepAliveOp("")
	deadline := time.Now().Add(limit)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-p.exited:
			return errors.New("exited during start")
		default:
		}
		var w worker
		last = op(&w)
		w.reset()
		if last == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("not ready after %s: %w", limit, last)
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// ports lists the origin ports every proxy must allow.
func (o *origin) ports() (plain, tls, sink int) {
	return int(o.plain.Port()), int(o.tls.Port()), int(o.sink.Port())
}

// startSquid: one process (-N), no cache, no access log, only the origin
// reachable, CONNECT only to the TLS port.
func startSquid(o *origin, dir string, cpu int, bin string) (*proxyProc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	sd := filepath.Join(dir, "squid")
	if err := os.MkdirAll(sd, 0o777); err != nil {
		return nil, err
	}
	os.Chmod(sd, 0o777) // squid drops to its own user when started as root
	plain, tlsPort, _ := o.ports()
	conf := fmt.Sprintf(`http_port 127.0.0.1:%d
acl origin_dst dst 127.0.0.1/32
acl origin_ports port %d %d
acl tls_port port %d
acl CONNECT method CONNECT
http_access deny !origin_dst
http_access deny !origin_ports
http_access deny CONNECT !tls_port
http_access allow localhost
http_access deny all
cache deny all
cache_mem 0 MB
access_log none
cache_store_log none
cache_log %s/cache.log
logfile_rotate 0
pid_filename %s/squid.pid
coredump_dir %s
visible_hostname egressd-bench
dns_nameservers 127.0.0.1
max_filedescriptors 65536
shutdown_lifetime 0 seconds
`, port, plain, tlsPort, tlsPort, sd, sd, sd)
	cf := filepath.Join(sd, "squid.conf")
	if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	p, err := startPinned(o, dir, "squid", cpu, fmt.Sprintf("127.0.0.1:%d", port), nil, bin, "-N", "-f", cf)
	if err != nil {
		return nil, err
	}
	p.version = firstLine(bin, "-v")
	return p, nil
}

// startTinyproxy: threads, only 127.0.0.1 clients, a default-deny filter
// naming the origin, CONNECT only to the TLS port.
func startTinyproxy(o *origin, dir string, cpu int, bin string) (*proxyProc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	td := filepath.Join(dir, "tinyproxy")
	if err := os.MkdirAll(td, 0o755); err != nil {
		return nil, err
	}
	_, tlsPort, _ := o.ports()
	filter := filepath.Join(td, "filter")
	if err := os.WriteFile(filter, []byte("^127\\.0\\.0\\.1$\n"), 0o644); err != nil {
		return nil, err
	}
	conf := fmt.Sprintf(`User nobody
Group nogroup
Port %d
Listen 127.0.0.1
Timeout 600
MaxClients 1024
Allow 127.0.0.1
ConnectPort %d
Filter "%s"
FilterType ere
FilterURLs Off
FilterDefaultDeny Yes
LogLevel Critical
`, port, tlsPort, filter)
	cf := filepath.Join(td, "tinyproxy.conf")
	if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	p, err := startPinned(o, dir, "tinyproxy", cpu, fmt.Sprintf("127.0.0.1:%d", port), nil, bin, "-d", "-c", cf)
	if err != nil {
		return nil, err
	}
	p.version = firstLine(bin, "-v")
	return p, nil
}

// startSmokescreen: no client certificates, so the default ACL applies
// (allow_missing_role); it allows only the origin; 127.0.0.1 is unlocked
// with allow_ranges (smokescreen denies loopback by default); the upstream
// pool is sized like egressd's (Go's default keeps 2 idle per host).
func startSmokescreen(o *origin, dir string, cpu int, bin string) (*proxyProc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	sd := filepath.Join(dir, "smokescreen")
	if err := os.MkdirAll(sd, 0o755); err != nil {
		return nil, err
	}
	acl := `version: v1
services: []
default:
  name: bench
  project: bench
  action: enforce
  allowed_domains:
    - 127.0.0.1
`
	aclFile := filepath.Join(sd, "acl.yaml")
	if err := os.WriteFile(aclFile, []byte(acl), 0o644); err != nil {
		return nil, err
	}
	conf := fmt.Sprintf(`ip: 127.0.0.1
port: %d
allow_missing_role: true
acl_file: %s
allow_ranges: ["127.0.0.1/32"]
resolver_addresses: ["127.0.0.1:%d"]
exit_timeout: 1s
transport_max_idle_conns: 1024
transport_max_idle_conns_per_host: 64
`, port, aclFile, o.dns.Port())
	cf := filepath.Join(sd, "smokescreen.yaml")
	if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	p, err := startPinned(o, dir, "smokescreen", cpu, fmt.Sprintf("127.0.0.1:%d", port), nil, bin, "--config-file", cf)
	if err != nil {
		return nil, err
	}
	p.version = firstLine(bin, "--version")
	return p, nil
}

// egressdMode selects the rule the egressd row runs with.
type egressdMode int

const (
	egressdSpliced   egressdMode = iota // host-only rule: spliced tunnels, SNI checked
	egressdInspected                    // page rule: TLS terminated and re-encrypted
)

// egressdOpts shapes an egressd config beyond the mode.
type egressdOpts struct {
	mode  egressdMode
	hosts []string // names the rule allows besides 127.0.0.0/8 (scale runs)
	conns int      // limits.conns_per_identity; 0: the default
	pprof bool     // run the in-process, profiled serve (bench serve-egressd)
	env   []string // extra environment
}

// startEgressd runs `egressd serve --no-selftest` (or this binary's
// profiled equivalent) with a config allowing only the origin.
func startEgressd(o *origin, dir, name string, cpu int, bin string, opt egressdOpts) (*proxyProc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	adminPort, err := freePort()
	if err != nil {
		return nil, err
	}
	ed := filepath.Join(dir, name)
	if err := os.MkdirAll(ed, 0o700); err != nil {
		return nil, err
	}
	cf := filepath.Join(ed, "egressd.yaml")
	if err := writeEgressdConfig(cf, o, port, adminPort, opt); err != nil {
		return nil, err
	}
	state := filepath.Join(ed, "state")
	args := []string{"serve", "--config", cf, "--state-dir", state, "--no-selftest", "--allow-unverified"}
	var pprofAddr string
	if opt.pprof {
		pp, err := freePort()
		if err != nil {
			return nil, err
		}
		pprofAddr = fmt.Sprintf("127.0.0.1:%d", pp)
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		bin = self
		args = []string{"serve-egressd", "-config", cf, "-state-dir", state, "-pprof", pprofAddr}
	}
	p, err := startPinned(o, dir, name, cpu, fmt.Sprintf("127.0.0.1:%d", port), opt.env, bin, args...)
	if err != nil {
		return nil, err
	}
	p.admin = fmt.Sprintf("127.0.0.1:%d", adminPort)
	p.pprof = pprofAddr
	p.version = egressdVersion(bin)
	if opt.mode == egressdInspected {
		pem, err := os.ReadFile(filepath.Join(state, "ca", "ca.pem"))
		if err != nil {
			p.stop()
			return nil, fmt.Errorf("egressd CA: %w", err)
		}
		p.roots = x509.NewCertPool()
		p.roots.AppendCertsFromPEM(pem)
	}
	return p, nil
}

func writeEgressdConfig(path string, o *origin, port, adminPort int, opt egressdOpts) error {
	plain, tlsPort, sink := o.ports()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	fmt.Fprintf(w, "version: 1\nlisten:\n  proxy: 127.0.0.1:%d\n  admin: 127.0.0.1:%d\n", port, adminPort)
	fmt.Fprintf(w, "resolver:\n  upstreams: [\"%s\"]\n", o.dns)
	fmt.Fprintf(w, "upstream_ca: %s\n", o.caFile)
	if opt.conns > 0 {
		fmt.Fprintf(w, "limits:\n  conns_per_identity: %d\n", opt.conns)
	}
	w.WriteString("allow:\n")
	switch opt.mode {
	case egressdSpliced:
		w.WriteString("  - name: origin\n    pages: [\"*\"]\n")
	case egressdInspected:
		w.WriteString("  - name: origin-inspected\n    pages: [read, download]\n")
	}
	fmt.Fprintf(w, "    cidrs: [127.0.0.0/8]\n    ports: [%d, %d, %d]\n", plain, tlsPort, sink)
	if len(opt.hosts) > 0 {
		w.WriteString("    hosts:\n")
		for _, h := range opt.hosts {
			fmt.Fprintf(w, "      - %s\n", h)
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// egressdVersion names the commit the binary was built from.
func egressdVersion(bin string) string {
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		return "egressd (unknown build)"
	}
	rev, dirty := "", ""
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev == "" {
		rev = "devel"
	}
	return fmt.Sprintf("egressd %s%s (%s)", rev, dirty, bi.GoVersion)
}

func firstLine(bin string, args ...string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(line)
}

// dialProxy is a plain TCP connection to the proxy.
func dialProxy(addr string) (net.Conn, error) {
	return net.DialTimeout("tcp", addr, 5*time.Second)
}

// startGoFloor runs the bench's Go floor proxy (bench/gofloor): what a
// forward proxy on Go's standard runtime costs with no policy at all.
func startGoFloor(o *origin, dir string, cpu int, bin string) (*proxyProc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	p, err := startPinned(o, dir, "go-floor", cpu, addr, nil, bin, "-listen", addr)
	if err != nil {
		return nil, err
	}
	p.version = firstLine(bin, "-v")
	return p, nil
}
