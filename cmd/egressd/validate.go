package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy"
)

func init() { commands["validate"] = cmdValidate }

func cmdValidate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("validate", stderr)
	cfg := configFlag(fs)
	strict := fs.Bool("strict", false, "make warnings errors (exit 2): for CI")
	offline := fs.Bool("offline", false, "resolve no names: skip the check that each rule's names resolve to addresses the rule can allow")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) > 0 && *cfg == "" && len(pos) == 1 {
		*cfg = pos[0] // "egressd validate FILE" reads as one expects
	} else if len(pos) > 0 {
		fmt.Fprintln(stderr, "usage: egressd validate [--strict] [--offline] [--config FILE]")
		return exitUsage
	}
	p, err := loadPolicy(*cfg)
	if err != nil {
		printConfigError(stderr, err)
		return exitUsage
	}
	level := "warning"
	if *strict {
		level = "error"
	}
	warned := append(p.Warnings(), p.Lints()...)
	var notes []string
	if !*offline {
		w, n := resolvedWarnings(ctx, p)
		warned, notes = append(warned, w...), n
	}
	for _, w := range warned {
		fmt.Fprintf(stderr, "%s: %s: %s\n", p.Source, level, w)
	}
	for _, n := range notes {
		fmt.Fprintf(stderr, "%s: note: %s\n", p.Source, n)
	}
	if *strict && len(warned) > 0 {
		return exitUsage
	}
	fmt.Fprintf(stdout, "%s: ok: %d allow rules, %d identities\n", p.Source, len(p.Rules), len(p.Identities))
	return exitOK
}

// validate's name check is bounded so that it stays quick offline and in
// CI: every name at once (resolveWorkers at a time, the first
// resolveMaxNames of all rules) under one deadline.
const (
	resolveBudget   = 2 * time.Second
	resolveWorkers  = 16
	resolveMaxNames = 256
)

// resolvedWarnings resolves the rules' exact names as egressd would (the
// configured upstreams, else Go's resolver: proxy.Resolver) and warns for
// each name whose every answer the rule can never allow
// (policy.NeverAllowsAddrs). A name that does not resolve within the
// deadline is a note: validate must not fail on an offline machine.
func resolvedWarnings(ctx context.Context, p *policy.Policy) (warnings, notes []string) {
	type name struct {
		r    *policy.Rule
		host string
	}
	var names []name
	capped := false
rules:
	for _, r := range p.Rules {
		for h := range r.Hosts.All() {
			if strings.HasPrefix(h, "*") || p.HighRiskName(h) {
				continue // a wildcard names no one address; high-risk is warned already
			}
			if len(names) == resolveMaxNames {
				capped = true
				break rules
			}
			names = append(names, name{r, h})
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, resolveBudget)
	defer cancel()
	res := &proxy.Resolver{Upstreams: p.Resolver.Upstreams, Timeout: resolveBudget}
	warns, unresolved := make([]string, len(names)), make([]string, len(names))
	sem := make(chan struct{}, resolveWorkers)
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			addrs, err := res.Lookup(ctx, n.host)
			if err != nil {
				unresolved[i] = fmt.Sprintf("allow[%d] (%q): %s did not resolve (%v): whether the rule can allow it is known only live", n.r.Index, n.r.Name, n.host, err)
				return
			}
			warns[i] = p.NeverAllowsAddrs(n.r, n.host, addrs)
		})
	}
	wg.Wait()
	for i := range names {
		if warns[i] != "" {
			warnings = append(warnings, warns[i])
		}
		if unresolved[i] != "" {
			notes = append(notes, unresolved[i])
		}
	}
	if capped {
		notes = append(notes, fmt.Sprintf("only the first %d names of the rules were resolved", resolveMaxNames))
	}
	return warnings, notes
}
