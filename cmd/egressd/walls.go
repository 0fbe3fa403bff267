package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/egressd/egressd/daemon"
	"github.com/egressd/egressd/nft"
	"github.com/egressd/egressd/runbox"
	"github.com/egressd/egressd/sandbox"
)

func init() { commands["nft"] = cmdNft }

func cmdNft(_ context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: egressd nft apply|show|down [--all] [--config FILE]")
		return exitUsage
	}
	verb := args[0]
	fs := newFlagSet("nft "+verb, stderr)
	cfg := configFlag(fs)
	all := fs.Bool("all", false, "down: also remove the tables, links, namespaces and temp dirs of egressd run sandboxes that died (live runs are listed, not touched)")
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
		if *all {
			return nftDownAll(*cfg, stdout, stderr)
		}
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

// nftDownAll removes every table egressd owns here: inet egressd and the
// leftovers of dead runs (inet egressd-run-N with its link, namespace and
// temp dir). A live run keeps its table; it is listed.
func nftDownAll(cfg string, stdout, stderr io.Writer) int {
	p, err := loadPolicy(cfg)
	if err != nil {
		printConfigError(stderr, err)
		return exitUsage
	}
	gw, err := sandbox.Current()
	if err != nil {
		fmt.Fprintf(stderr, "egressd nft down: %v\n", err)
		return exitUsage
	}
	defer gw.Close()
	code := exitOK
	sw, err := runbox.Sweep(gw, runbox.DefaultRunDir, p.Sandbox.InterfacePrefix, true)
	if err != nil {
		fmt.Fprintf(stderr, "egressd nft down --all: %v\n", err)
		code = exitUsage
	}
	if err := nft.Down(nft.CurrentNamespace, nft.DefaultTable); err == nil {
		sw.Removed = append(sw.Removed, "table inet "+nft.DefaultTable)
	} else if !errors.Is(err, nft.ErrNoTable) {
		fmt.Fprintf(stderr, "egressd nft down --all: %v\n", err)
		code = exitUsage
	}
	for _, r := range sw.Removed {
		fmt.Fprintf(stdout, "removed %s\n", r)
	}
	for _, l := range sw.Live {
		fmt.Fprintf(stdout, "kept table inet %s: the run is alive (stop it; its teardown removes the table)\n", l)
	}
	if len(sw.Removed) == 0 && len(sw.Live) == 0 {
		fmt.Fprintln(stdout, "no egressd tables here")
	}
	return code
}
