// Command egressd is the egress checkpoint for AI-agent sandboxes: a
// default-deny forward proxy, a filtering DNS resolver, nftables walls and a
// self-test that proves no other way out exists. main only wires the
// packages together; see README.md and docs/ARCHITECTURE.md for the contracts.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/egressd/egressd/daemon"
	"github.com/egressd/egressd/sandbox"
)

// Exit codes shared by the subcommands (docs/ARCHITECTURE.md "Contracts").
const (
	exitOK    = 0 // allow / sealed / valid
	exitDeny  = 1 // deny / leak
	exitUsage = 2 // usage or config error / could not run
)

const usage = `usage: egressd <command> [flags]

commands:
  serve     [--config FILE] [--state-dir DIR] [--walls] [--walls-interval D]
            [--audit-log FILE] [--log-level L] [--no-selftest [--allow-unverified]]
                                                run the proxy, DNS filter and admin endpoint
  run       [--config FILE] -- CMD [ARGS]       run CMD in a sealed sandbox namespace (root)
  check     [--config FILE] [--identity ID] [--method M] [--content-type T] [--json] TARGET
                                                the decision for a URL or host:port, offline
  validate  [--strict] [--config FILE]          check a config; errors name file:line:field
  suggest   --log FILE [--identity ID]          propose rules from a trial run's denials (prints only)
  replay    [--config FILE] --log FILE [--fail-on-loosen]
                                                what a policy would decide differently on logged traffic
                                                (exit 1 when anything changes, or with --fail-on-loosen
                                                only when something denied becomes allowed)
  init      --preset P,... [--sandbox local|docker|kubernetes] [--uid N] [--out FILE]
                                                write a commented starting config
  selftest  [--config FILE] [--json] [--state-dir DIR]
                                                run the escape probes
  probe     [--proxy HOST:PORT] [--dns HOST:PORT] [--json] [--junit FILE] [--every D | -- CMD [ARGS]]
                                                the escape probes from inside a sandbox, reported to egressd
  nft       apply|show|down [--config FILE]     the kernel walls
  report    [--config FILE] [--state-dir DIR] [--log FILE] [--sign --out FILE]
                                                evidence pack for auditors (Markdown), signed
            verify --key PUB FILE               check a signed evidence pack
  ca        export [--state-dir DIR]            print egressd's CA certificate
  audit     verify [--live] [--strict] [--anchor SEQ:HASH] [--key PUB] FILE
                                                check a hash-chained (and signed) audit log
            keygen --out DIR                    the audit checkpoint signing key pair
  honeytokens issue --identity ID [--state-dir DIR] [--home DIR]
                                                canary credentials for a container or pod
  healthcheck URL                               exit 0 when URL answers 200 (container HEALTHCHECK)
  version                                       print the version, VCS revision and Go version (also --version)

egressd <command> --help lists every flag of a command.
`

func main() {
	if len(os.Args) > 1 && os.Args[1] == sandbox.NSExecArg {
		// the re-executed child of `egressd run`: enter the sandbox and exec
		err := sandbox.NSExecMain(os.Args[2:])
		fmt.Fprintf(os.Stderr, "egressd: %v\n", err)
		os.Exit(127)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches a subcommand and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	if h, ok := commands[cmd]; ok {
		if wantsHelp(rest) {
			// the flag set prints the usage and every flag, to stdout:
			// help that was asked for is not an error
			h(ctx, rest, stdout, stdout)
			return exitOK
		}
		return h(ctx, rest, stdout, stderr)
	}
	switch cmd {
	case "-h", "--help", "-help", "help":
		fmt.Fprint(stdout, usage)
		return exitOK
	case "--version", "-version", "version":
		fmt.Fprintln(stdout, daemon.ReadBuildInfo())
		return exitOK
	}
	fmt.Fprintf(stderr, "egressd: unknown command %q\n\n%s", cmd, usage)
	return exitUsage
}

// wantsHelp reports whether args ask for help before any "--".
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

type command func(ctx context.Context, args []string, stdout, stderr io.Writer) int

// commands is filled by each subcommand's file, so adding one touches only
// that file.
var commands = map[string]command{}
