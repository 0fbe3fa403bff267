package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/egressd/egressd/selftest"
	"github.com/egressd/egressd/selftest/probe"
)

func init() { commands["probe"] = cmdProbe }

// exitUnsealed is the entrypoint guard's refusal: `egressd probe -- CMD`
// does not start CMD in a sandbox that is not proven sealed.
const exitUnsealed = 3

func cmdProbe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("probe", stderr)
	proxyFlag := fs.String("proxy", "", "egressd's proxy as this sandbox reaches it, host:port or http://host:port (default: HTTPS_PROXY, HTTP_PROXY)")
	dnsFlag := fs.String("dns", "", "this sandbox's resolver, host:port (default: the first nameserver of /etc/resolv.conf)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	junit := fs.String("junit", "", "also write the report as JUnit XML to FILE")
	every := fs.Duration("every", 0, "run again at this interval until stopped (a drift check), reporting each run")
	var toolServers []selftest.ToolServer
	fs.Func("tool-server", "a tool server this sandbox is given, NAME=URL[,tool=TOOL][,arg=ARG] (repeatable): its fetch must refuse what the policy refuses", func(v string) error {
		ts, err := probe.ParseToolServer(v)
		toolServers = append(toolServers, ts)
		return err
	})
	cmdArgs, err := parseFlags(fs, args)
	if err != nil || *every > 0 && len(cmdArgs) > 0 {
		fmt.Fprintln(stderr, "usage: egressd probe [--proxy HOST:PORT] [--dns HOST:PORT] [--tool-server NAME=URL]... [--json] [--junit FILE] [--every D | -- CMD [ARGS]]")
		return exitUsage
	}
	o := probe.Options{Env: os.Environ(), ToolServers: toolServers}
	o.Home, _ = os.UserHomeDir()
	if *proxyFlag != "" {
		o.Proxy, err = probe.ParseProxy(ctx, *proxyFlag)
	} else {
		o.Proxy, err = probe.ProxyFromEnv(ctx)
	}
	if err != nil {
		fmt.Fprintf(stderr, "egressd probe: %v\n", err)
		return exitUsage
	}
	if *dnsFlag != "" {
		if o.DNS, err = netip.ParseAddrPort(*dnsFlag); err != nil {
			fmt.Fprintf(stderr, "egressd probe: --dns: %v\n", err)
			return exitUsage
		}
	} else if a, err := probe.ResolverFromFile("/etc/resolv.conf"); err == nil {
		o.DNS = a
	}
	once := func() int {
		rep, identity, err := probeOnce(ctx, o, *every)
		if err != nil {
			fmt.Fprintf(stderr, "egressd probe: %v\n", err)
			return exitUsage
		}
		if *asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetEscapeHTML(false)
			enc.Encode(rep)
		} else {
			rep.WriteTable(stdout)
			for _, c := range rep.Credentials {
				fmt.Fprintf(stdout, "long-lived key inside: %s %s at %s\n", c.Kind, c.Name, c.Location)
			}
		}
		if *junit != "" {
			if err := writeJUnitFile(*junit, identity, rep); err != nil {
				fmt.Fprintf(stderr, "egressd probe: %v\n", err)
				return exitUsage
			}
		}
		switch rep.Outcome() {
		case selftest.OutcomeSealed:
			return exitOK
		case selftest.OutcomeLeak:
			return exitDeny
		}
		return exitUsage
	}
	if *every > 0 {
		t := time.NewTicker(*every)
		defer t.Stop()
		for {
			once()
			select {
			case <-ctx.Done():
				return exitOK
			case <-t.C:
			}
		}
	}
	code := once()
	if len(cmdArgs) == 0 {
		return code
	}
	if code != exitOK {
		fmt.Fprintf(stderr, "egressd probe: not starting %s: this sandbox is not proven sealed\n", cmdArgs[0])
		return exitUnsealed
	}
	err = execCommand(cmdArgs)
	fmt.Fprintf(stderr, "egressd probe: exec %s: %v\n", cmdArgs[0], err)
	return 127
}

// probeOnce fetches the plan, runs it and reports the result to egressd.
// A result egressd did not take is an error: the run proves nothing to
// anyone else.
func probeOnce(ctx context.Context, o probe.Options, every time.Duration) (*selftest.Report, string, error) {
	plan, err := probe.FetchPlan(ctx, o)
	if err != nil {
		return nil, "", err
	}
	rep, err := probe.Run(ctx, plan, o)
	if err != nil {
		return nil, plan.Identity, err
	}
	if err := probe.Report(ctx, plan, rep, every, o); err != nil {
		return rep, plan.Identity, err
	}
	return rep, plan.Identity, nil
}

func writeJUnitFile(path, identity string, rep *selftest.Report) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--junit: %w", err)
	}
	if err := probe.WriteJUnit(f, identity, rep); err != nil {
		f.Close()
		return fmt.Errorf("--junit %s: %w", path, err)
	}
	return f.Close()
}

// execCommand replaces this process with argv (the entrypoint guard's
// command keeps its PID, signals and exit code).
func execCommand(argv []string) error {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return err
	}
	return syscall.Exec(path, argv, os.Environ())
}
