package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/egressd/egressd/daemon"
	"github.com/egressd/egressd/nft"
)

func init() { commands["nft"] = cmdNft }

func cmdNft(_ context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: egressd nft apply|show|down [--config FILE]")
		return exitUsage
	}
	verb := args[0]
	fs := newFlagSet("nft "+verb, stderr)
	cfg := configFlag(fs)
	if pos, err := parseFlags(fs, args[1:]); err != nil || len(pos) > 0 {
		return exitUsage
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(stderr, "egressd nft: needs root (CAP_NET_ADMIN)")
		return exitUsage
	}
	switch verb {
	case "apply":
		p, err := loadPolicy(*cfg)
		if err != nil {
			printConfigError(stderr, err)
			return exitUsage
		}
		s, err := daemon.WallSpec(p)
		if err != nil {
			fmt.Fprintf(stderr, "egressd nft apply: %v\n", err)
			return exitUsage
		}
		if _, err := nft.Ensure(nft.CurrentNamespace, s); err != nil {
			fmt.Fprintf(stderr, "egressd nft apply: %v\n", err)
			return exitUsage
		}
		fmt.Fprintf(stdout, "applied table inet %s (stays until `egressd nft down`)\n", s.TableName())
	case "show":
		text, err := nft.Show(nft.CurrentNamespace, nft.DefaultTable)
		if err != nil {
			fmt.Fprintf(stderr, "egressd nft show: %v\n", err)
			return exitUsage
		}
		io.WriteString(stdout, text)
	case "down":
		if err := nft.Down(nft.CurrentNamespace, nft.DefaultTable); err != nil {
			fmt.Fprintf(stderr, "egressd nft down: %v\n", err)
			return exitUsage
		}
		fmt.Fprintf(stdout, "removed table inet %s: sandboxes are no longer walled\n", nft.DefaultTable)
	default:
		fmt.Fprintf(stderr, "egressd nft: unknown verb %q (apply, show, down)\n", verb)
		return exitUsage
	}
	return exitOK
}
