package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/egressd/egressd/event"
	"github.com/egressd/egressd/nft"
	"github.com/egressd/egressd/policy"
)

func init() { commands["report"] = cmdReport }

// showWalls reads the kernel walls with their counters; tests replace it.
var showWalls = func() (string, error) { return nft.Show(nft.CurrentNamespace, nft.DefaultTable) }

// Bounds on what the evidence pack lists in full; totals are always exact.
const (
	reportRuns     = 50 // most recent self-test runs listed
	reportHits     = 50 // most recent high-risk hits listed
	reportDenials  = 25 // top denial groups listed
	maxLogLineSize = 1 << 20
)

func cmdReport(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("report", stderr)
	cfg := configFlag(fs)
	stateDir := fs.String("state-dir", defaultStateDir(), "directory holding the self-test history")
	logFile := fs.String("log", "", "decision log: the JSON lines `egressd serve` writes on stderr")
	if pos, err := parseFlags(fs, args); err != nil || len(pos) > 0 {
		fmt.Fprintln(stderr, "usage: egressd report [--config FILE] [--state-dir DIR] [--log FILE]")
		return exitUsage
	}
	p, err := loadPolicy(*cfg)
	if err != nil {
		printConfigError(stderr, err)
		return exitUsage
	}
	runs, err := readHistory(filepath.Join(*stateDir, historyFile))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(stderr, "egressd report: %v\n", err)
		return exitUsage
	}
	var dl *decisionLog
	if *logFile != "" {
		if dl, err = readDecisionLog(*logFile); err != nil {
			fmt.Fprintf(stderr, "egressd report: %v\n", err)
			return exitUsage
		}
	}
	walls, wallsErr := showWalls()
	writeReport(stdout, reportInput{now: time.Now().UTC(), policy: p, runs: runs, log: dl, logFile: *logFile, walls: walls, wallsErr: wallsErr})
	return exitOK
}

// readHistory reads the self-test history, oldest first. A line that does
// not parse is kept as a run with an error, so a damaged history shows.
func readHistory(path string) ([]historyLine, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open self-test history: %w", err)
	}
	defer f.Close()
	var out []historyLine
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, maxLogLineSize)
	for n := 1; sc.Scan(); n++ {
		var h historyLine
		if err := json.Unmarshal(sc.Bytes(), &h); err != nil || h.Report == nil {
			out = append(out, historyLine{Source: fmt.Sprintf("unreadable line %d", n)})
			continue
		}
		out = append(out, h)
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("read self-test history %s: %w", path, err)
	}
	return out, nil
}

// decision is a proxy decision line as the report reads it.
type decision = event.Record

type decisionLog struct {
	lines, decisions, allowed, skipped int
	first, last                        time.Time
	highRisk                           []decision
	denials                            map[[3]string]int // reason, host, identity → count
}

func readDecisionLog(path string) (*decisionLog, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open decision log: %w", err)
	}
	defer f.Close()
	dl := &decisionLog{denials: map[[3]string]int{}}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, maxLogLineSize)
	for sc.Scan() {
		dl.lines++
		var d decision
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			dl.skipped++
			continue
		}
		if !d.IsDecision() {
			continue
		}
		dl.decisions++
		if dl.first.IsZero() || d.Time.Before(dl.first) {
			dl.first = d.Time
		}
		if d.Time.After(dl.last) {
			dl.last = d.Time
		}
		if d.HighRisk {
			dl.highRisk = append(dl.highRisk, d)
		}
		if d.Decision == event.Allow {
			dl.allowed++
			continue
		}
		dl.denials[[3]string{d.Reason, d.Host, d.Identity}]++
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read decision log %s: %w", path, err)
	}
	return dl, nil
}

type reportInput struct {
	now      time.Time
	policy   *policy.Policy
	runs     []historyLine
	log      *decisionLog
	logFile  string
	walls    string
	wallsErr error
}

// writeReport renders the evidence pack in Markdown.
func writeReport(w io.Writer, in reportInput) {
	p := in.policy
	fmt.Fprintf(w, "# egressd evidence pack\n\nGenerated %s from config `%s`.\n\n", in.now.Format(time.RFC3339), p.Source)
	fmt.Fprintf(w, "**Summary:** %s\n\n", historySummary(in.runs))

	fmt.Fprintf(w, "## 1. The single egress route: the kernel walls\n\n")
	fmt.Fprintf(w, "Sandbox traffic may reach only the proxy and DNS ports on the gateway; everything else is dropped and counted (nftables table `inet %s`, with packet and byte counters).\n\n", nft.DefaultTable)
	if in.wallsErr != nil {
		fmt.Fprintf(w, "> Not available: %v. Run `egressd report` as root on the gateway that holds the walls.\n\n", in.wallsErr)
	} else {
		fmt.Fprintf(w, "```\n%s\n```\n\n", strings.TrimRight(in.walls, "\n"))
	}

	fmt.Fprintf(w, "## 2. The effective policy\n\n")
	writePolicy(w, p)

	fmt.Fprintf(w, "## 3. Self-test history\n\n")
	writeHistory(w, in.runs)

	fmt.Fprintf(w, "## 4. High-risk hits and denials\n\n")
	writeDecisions(w, in.log, in.logFile)
}

// historySummary is the summary line: runs, probes run, leaks, the last
// sealed run and the outcome of the last run.
func historySummary(runs []historyLine) string {
	if len(runs) == 0 {
		return "no self-test has run yet (`egressd selftest`, or `egressd serve` at boot, on reload and on schedule): nothing proves the walls."
	}
	var probes, leaks int
	var lastSealed time.Time
	for _, h := range runs {
		if h.Report == nil {
			continue
		}
		probes += len(h.Report.Results)
		leaks += len(h.Report.Failures())
		if h.Report.Sealed() {
			lastSealed = h.Report.Start
		}
	}
	sealed := "never"
	if !lastSealed.IsZero() {
		sealed = lastSealed.Format(time.RFC3339)
	}
	last := runs[len(runs)-1]
	outcome := "unreadable"
	if last.Report != nil {
		outcome = last.Report.Outcome() + " at " + last.Report.Start.Format(time.RFC3339)
	}
	return fmt.Sprintf("%d self-test runs, %d probes run, %d leaks found; last sealed: %s; last run: %s.", len(runs), probes, leaks, sealed, outcome)
}

func writePolicy(w io.Writer, p *policy.Policy) {
	fmt.Fprintf(w, "- Proxy `%s`, DNS `%s`, admin `%s`.\n", orDash(p.Listen.Proxy), orDash(p.Listen.DNS), orDash(p.Listen.Admin))
	ups := make([]string, len(p.Resolver.Upstreams))
	for i, u := range p.Resolver.Upstreams {
		ups[i] = u.String()
	}
	fmt.Fprintf(w, "- Resolver upstreams: %s.\n", orDash(strings.Join(ups, ", ")))
	fmt.Fprintf(w, "- Sandboxes: interfaces `%s*`, pools `%s` and `%s`", p.Sandbox.InterfacePrefix, p.Sandbox.Pool4, p.Sandbox.Pool6)
	if len(p.Sandbox.CIDRs) > 0 {
		fmt.Fprintf(w, ", sources %v", p.Sandbox.CIDRs)
	}
	if len(p.Sandbox.UIDs) > 0 {
		fmt.Fprintf(w, ", uids %v", p.Sandbox.UIDs)
	}
	fmt.Fprintf(w, ".\n- High-risk (never allowed, every spelling): %d address blocks and the built-in metadata, console and registry-upload names.\n", len(p.HighRiskPrefixes()))
	fmt.Fprintf(w, "- Default: deny. %d allow rules, first match wins:\n\n", len(p.Rules))
	fmt.Fprintf(w, "| rule | identities | hosts | cidrs | ports | pages | methods | paths | mirror | tls | inject |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range p.Rules {
		pages := r.Pages.String()
		if r.AllPages {
			pages = "*"
		}
		cidrs := make([]string, len(r.CIDRs))
		for i, c := range r.CIDRs {
			cidrs[i] = c.String()
		}
		ids := "all"
		if len(r.Identities) > 0 {
			ids = strings.Join(r.Identities, ", ")
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %v | %s |\n", md(r.Name), md(ids), md(strings.Join(r.Hosts.Strings(), ", ")), md(strings.Join(cidrs, ", ")),
			portRanges(r), pages, md(strings.Join(r.Methods, ", ")), md(strings.Join(r.Paths, ", ")), orDash(r.Mirror.String()), r.TLS, md(injectSummary(r.Inject)))
	}
	st := &p.Selftest
	fmt.Fprintf(w, "\nSelf-test: every %v, %v per probe; %d TCP, %d UDP, %d IPv6 and %d resolver targets, %d metadata addresses, canary name `%s`, canary URL `%s`, %d positive controls.\n\n",
		st.Interval, st.Timeout, len(st.TCP), len(st.UDP), len(st.IPv6), len(st.Resolvers), len(st.Metadata), orDash(st.CanaryName), orDash(st.CanaryURL), len(st.ExpectReachable))
}

// portRanges lists the ports a rule allows as ranges ("80, 443",
// "1-65535").
func portRanges(r *policy.Rule) string {
	var out []string
	for lo := 1; lo <= 65535; lo++ {
		if !r.AllowsPort(uint16(lo)) {
			continue
		}
		hi := lo
		for hi < 65535 && r.AllowsPort(uint16(hi+1)) {
			hi++
		}
		if hi == lo {
			out = append(out, fmt.Sprint(lo))
		} else {
			out = append(out, fmt.Sprintf("%d-%d", lo, hi))
		}
		lo = hi
	}
	return orDash(strings.Join(out, ", "))
}

// md makes a value safe inside a Markdown table cell.
func md(s string) string {
	if s == "" {
		return "-"
	}
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}

func writeHistory(w io.Writer, runs []historyLine) {
	if len(runs) == 0 {
		fmt.Fprintf(w, "No runs recorded.\n\n")
		return
	}
	shown := runs[max(0, len(runs)-reportRuns):]
	fmt.Fprintf(w, "The last %d of %d runs, newest first.\n\n", len(shown), len(runs))
	fmt.Fprintf(w, "| time (UTC) | source | mode | outcome | probes | leaks | not run | duration |\n|---|---|---|---|---|---|---|---|\n")
	var failures []string
	for i := len(shown) - 1; i >= 0; i-- {
		h := shown[i]
		if h.Report == nil {
			fmt.Fprintf(w, "| - | %s | - | unreadable | - | - | - | - |\n", md(h.Source))
			continue
		}
		r := h.Report
		fmt.Fprintf(w, "| %s | %s | %s | %s | %d | %d | %d | %v |\n", r.Start.Format(time.RFC3339), md(h.Source), md(h.Mode), r.Outcome(),
			len(r.Results), len(r.Failures()), len(r.Unfinished()), r.Duration.Round(time.Millisecond))
		for _, f := range r.Failures() {
			failures = append(failures, fmt.Sprintf("- %s: **%s** `%s` (%s, target `%s`): %s", r.Start.Format(time.RFC3339), f.Status, f.ID, f.Route, f.Target, f.Detail))
		}
	}
	fmt.Fprintln(w)
	if len(failures) > 0 {
		fmt.Fprintf(w, "Leaks and failed positive controls in these runs, newest first:\n\n%s\n\n", strings.Join(failures, "\n"))
	} else {
		fmt.Fprintf(w, "No leak and no failed positive control in these runs.\n\n")
	}
}

func writeDecisions(w io.Writer, dl *decisionLog, file string) {
	if dl == nil {
		fmt.Fprintf(w, "No decision log given: pass `--log FILE`, a file of the JSON lines `egressd serve` writes on stderr.\n")
		return
	}
	denied := dl.decisions - dl.allowed
	fmt.Fprintf(w, "From `%s`: %d decisions", file, dl.decisions)
	if dl.decisions > 0 {
		fmt.Fprintf(w, " between %s and %s", dl.first.Format(time.RFC3339), dl.last.Format(time.RFC3339))
	}
	fmt.Fprintf(w, ", %d allowed, %d denied, %d high-risk", dl.allowed, denied, len(dl.highRisk))
	if dl.skipped > 0 {
		fmt.Fprintf(w, " (%d lines were not JSON and were skipped)", dl.skipped)
	}
	fmt.Fprintf(w, ".\n\n")
	if len(dl.highRisk) > 0 {
		hits := dl.highRisk[max(0, len(dl.highRisk)-reportHits):]
		fmt.Fprintf(w, "### High-risk hits (metadata, consoles, registry uploads), newest first\n\n| time (UTC) | identity | request | decision | reason |\n|---|---|---|---|---|\n")
		for i := len(hits) - 1; i >= 0; i-- {
			d := hits[i]
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", d.Time.UTC().Format(time.RFC3339), md(d.Identity),
				md(fmt.Sprintf("%s %s:%d%s", d.Method, d.Host, d.Port, d.Path)), d.Decision, md(d.Reason))
		}
		fmt.Fprintln(w)
	}
	if len(dl.denials) > 0 {
		type row struct {
			reason, host, identity string
			n                      int
		}
		var rows []row
		for k, n := range dl.denials {
			rows = append(rows, row{k[0], k[1], k[2], n})
		}
		slices.SortFunc(rows, func(a, b row) int {
			return cmp.Or(b.n-a.n, strings.Compare(a.reason, b.reason), strings.Compare(a.host, b.host), strings.Compare(a.identity, b.identity))
		})
		fmt.Fprintf(w, "### Denials by reason, host and identity (top %d of %d)\n\n| reason | host | identity | count |\n|---|---|---|---|\n", min(reportDenials, len(rows)), len(rows))
		for _, r := range rows[:min(reportDenials, len(rows))] {
			fmt.Fprintf(w, "| %s | %s | %s | %d |\n", md(r.reason), md(r.host), md(orDash(r.identity)), r.n)
		}
		fmt.Fprintln(w)
	}
}

// injectSummary says which header egressd adds from which file; the
// secret itself is never read here.
func injectSummary(in *policy.Inject) string {
	switch {
	case in == nil:
		return "-"
	case in.BasicUser != "":
		return fmt.Sprintf("Authorization: Basic %s:<%s>", in.BasicUser, in.File)
	}
	return fmt.Sprintf("%s: %s<%s>", in.Header, in.Prefix, in.File)
}
