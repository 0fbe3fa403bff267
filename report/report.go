// Package report renders the evidence pack (`egressd report`) from the
// policy, the self-test history, the kernel walls and the decision log
// `egressd serve` writes, and parses that decision log.
package report

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/egressd/egressd/event"
	"github.com/egressd/egressd/honeytoken"
	"github.com/egressd/egressd/nft"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/selftest"
)

// Bounds on what the evidence pack lists in full; totals are always exact.
const (
	reportRuns     = 50 // most recent self-test runs listed
	reportHits     = 50 // most recent high-risk hits listed
	reportDenials  = 25 // top denial groups listed
	maxLogLineSize = 1 << 20
)

// decision is a proxy decision line as the report reads it.
type decision = event.Record

// actionPages are the page types that act rather than read.
var actionPages = map[string]bool{"login": true, "upload": true, "posting": true, "publish": true, "oauth": true, "admin": true}

// DecisionLog is what the report reads from a decision log. Probe
// traffic (egressd's self-test, in-sandbox probes) is counted apart: the
// other tables are about real sandboxes only.
type DecisionLog struct {
	lines, decisions, allowed, skipped int
	probes                             int // decisions on probe traffic
	toolCalls, toolDenied              int // sandbox decisions made via egressd's fetch tool
	first, last                        time.Time
	highRisk                           []decision
	blocked                            []decision        // metadata and action pages refused
	denials                            map[[3]string]int // reason, host, identity → count
	reached                            map[[2]string]*reach
	honey                              map[honeyKey]*honeyCount // honeytoken hits (evidence.go)
}

// reach is what one agent reached on one host.
type reach struct {
	requests int
	pages    map[string]bool
}

// ReadDecisionLog reads the JSON lines `egressd serve` writes on stderr;
// lines that are not JSON are counted and skipped.
func ReadDecisionLog(path string) (*DecisionLog, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open decision log: %w", err)
	}
	defer f.Close()
	dl, err := parseDecisionLog(f)
	if err != nil {
		return nil, fmt.Errorf("read decision log %s: %w", path, err)
	}
	return dl, nil
}

// parseDecisionLog reads decision lines from r.
func parseDecisionLog(r io.Reader) (*DecisionLog, error) {
	dl := &DecisionLog{denials: map[[3]string]int{}, reached: map[[2]string]*reach{}, honey: map[honeyKey]*honeyCount{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, maxLogLineSize)
	for sc.Scan() {
		dl.lines++
		var d decision
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			dl.skipped++
			continue
		}
		dl.countHoney(&d)
		if !d.IsDecision() {
			continue
		}
		if policy.IsProbeIdentity(d.Identity) {
			dl.probes++
			continue
		}
		dl.decisions++
		if d.Via == event.ViaTool {
			dl.toolCalls++
			if d.Decision != event.Allow {
				dl.toolDenied++
			}
		}
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
			k := [2]string{d.Identity, d.Host}
			r := dl.reached[k]
			if r == nil {
				r = &reach{pages: map[string]bool{}}
				dl.reached[k] = r
			}
			r.requests++
			if d.PageType != "" {
				r.pages[d.PageType] = true
			}
			continue
		}
		if d.HighRisk || actionPages[d.PageType] || d.Reason == "mirror" || d.Reason == "page-type" {
			dl.blocked = append(dl.blocked, d)
		}
		dl.denials[[3]string{d.Reason, d.Host, d.Identity}]++
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return dl, nil
}

// Input is what the evidence pack is made of.
type Input struct {
	Now    time.Time
	Policy *policy.Policy
	Runs   []selftest.HistoryLine
	// SkippedRuns is how many history lines could not be read (skipped).
	SkippedRuns int
	Log         *DecisionLog
	LogFile     string
	Walls       string // the kernel walls with their counters (nft.Show)
	WallsErr    error  // why Walls is empty
	// Honeytokens are the canary credentials egressd placed (the state
	// directory's store): kept apart from the keys the scan found.
	Honeytokens []honeytoken.Token
	// Seal, when signing, is the signature's content known before the
	// pack is rendered (hashes, checkpoint, key id): the pack shows it.
	Seal *Seal
}

// Write renders the evidence pack in Markdown.
func Write(w io.Writer, in Input) {
	p := in.Policy
	fmt.Fprintf(w, "# egressd evidence pack\n\nGenerated %s from config `%s`.\n\n", in.Now.Format(time.RFC3339), p.Source)
	own, _ := splitRuns(in.Runs)
	fmt.Fprintf(w, "**Summary:** %s\n\n", historySummary(own))

	fmt.Fprintf(w, "## 1. The single egress route: the kernel walls\n\n")
	fmt.Fprintf(w, "Sandbox traffic may reach only the proxy and DNS ports on the gateway; everything else is dropped and counted (nftables table `inet %s`, with packet and byte counters).\n\n", nft.DefaultTable)
	if in.WallsErr != nil {
		fmt.Fprintf(w, "> Not available: %v. Run `egressd report` as root on the gateway that holds the walls.\n\n", in.WallsErr)
	} else {
		fmt.Fprintf(w, "```\n%s\n```\n\n", strings.TrimRight(in.Walls, "\n"))
	}

	fmt.Fprintf(w, "## 2. The effective policy\n\n")
	writePolicy(w, p)

	_, sandboxes := splitRuns(in.Runs)
	fmt.Fprintf(w, "## 3. Escape tests: egressd's self-test\n\n")
	if in.SkippedRuns > 0 {
		fmt.Fprintf(w, "> %d lines of the self-test history could not be read and were skipped.\n\n", in.SkippedRuns)
	}
	writeHistory(w, own)

	fmt.Fprintf(w, "## 4. In-sandbox probes\n\n")
	writeProbes(w, in.Now, sandboxes)

	fmt.Fprintf(w, "## 5. Blocked attempts by sandboxes: high-risk hits, metadata and action pages, denials\n\n")
	writeDecisions(w, in.Log, in.LogFile)

	fmt.Fprintf(w, "## 6. What each agent reached\n\n")
	writeReached(w, in.Log)

	fmt.Fprintf(w, "## 7. No long-lived keys inside\n\n")
	writeCredentials(w, sandboxes, in.Honeytokens)

	fmt.Fprintf(w, "## 8. Honeytokens: attempts to use a planted credential\n\n")
	writeHoneyHits(w, in.Log, in.Honeytokens)

	fmt.Fprintf(w, "## 9. Signature\n\n")
	writeSeal(w, in.Seal)
}

// splitRuns separates egressd's own runs from in-sandbox probe results.
func splitRuns(runs []selftest.HistoryLine) (own, sandboxes []selftest.HistoryLine) {
	for _, h := range runs {
		if h.Source == "probe" {
			sandboxes = append(sandboxes, h)
		} else {
			own = append(own, h)
		}
	}
	return own, sandboxes
}

// ProbeRow is one identity's in-sandbox probe record.
type ProbeRow struct {
	Identity    string                `json:"identity"`
	Runs        int                   `json:"runs"`
	LeakRuns    int                   `json:"leak_runs"`
	Last        time.Time             `json:"last_run"`
	Outcome     string                `json:"last_outcome"`
	Failures    []selftest.Result     `json:"last_failures,omitempty"`
	Credentials []selftest.Credential `json:"credentials,omitempty"`
}

// probeRows is the per-identity view of the in-sandbox probe runs,
// sorted by identity.
func probeRows(runs []selftest.HistoryLine) []ProbeRow {
	by := map[string]*ProbeRow{}
	for _, h := range runs {
		if h.Report == nil {
			continue
		}
		r := by[h.Identity]
		if r == nil {
			r = &ProbeRow{Identity: h.Identity}
			by[h.Identity] = r
		}
		r.Runs++
		if h.Report.Outcome() == selftest.OutcomeLeak {
			r.LeakRuns++
		}
		if !h.Report.Start.Before(r.Last) {
			r.Last, r.Outcome, r.Failures, r.Credentials = h.Report.Start, h.Report.Outcome(), h.Report.Failures(), h.Report.Credentials
		}
	}
	var out []ProbeRow
	for _, r := range by {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b ProbeRow) int { return strings.Compare(a.Identity, b.Identity) })
	return out
}

func writeProbes(w io.Writer, now time.Time, runs []selftest.HistoryLine) {
	rows := probeRows(runs)
	if len(rows) == 0 {
		fmt.Fprintf(w, "No in-sandbox probe has reported. Run `egressd probe` inside each sandbox (entrypoint guard, CI gate or `--every 5m`): egressd's own self-test probes from a namespace it wires itself, which may differ from how a container or pod is wired.\n\n")
		return
	}
	fmt.Fprintf(w, "`egressd probe` runs inside each sandbox and reports through the checkpoint; the identity is the one egressd gives the sandbox's source, the times are egressd's. Outcomes are as reported by the sandbox: a leak is evidence, a pass only its claim, which never closes an earlier leak (an operator acknowledges it: `egressd probes incidents`).\n\n")
	fmt.Fprintf(w, "| identity | last run (UTC) | age | last outcome (reported) | runs | runs with a leak |\n|---|---|---|---|---|---|\n")
	var failures []string
	for _, r := range rows {
		outcome := r.Outcome
		if r.LeakRuns > 0 && outcome != selftest.OutcomeLeak {
			outcome += " (claimed after a leak)"
		}
		fmt.Fprintf(w, "| %s | %s | %v | %s | %d | %d |\n", md(r.Identity), r.Last.UTC().Format(time.RFC3339), now.Sub(r.Last).Round(time.Second), outcome, r.Runs, r.LeakRuns)
		for _, f := range r.Failures {
			failures = append(failures, fmt.Sprintf("- %s at %s: **%s** `%s` (%s, target `%s`): %s", md(r.Identity), r.Last.UTC().Format(time.RFC3339), f.Status, f.ID, f.Route, f.Target, f.Detail))
		}
	}
	fmt.Fprintln(w)
	if len(failures) > 0 {
		fmt.Fprintf(w, "Leaks and failed positive controls in each sandbox's last run:\n\n%s\n\n", strings.Join(failures, "\n"))
	}
}

// ReachRow is what one agent reached on one host.
type ReachRow struct {
	Identity  string   `json:"identity"`
	Host      string   `json:"host"`
	Requests  int      `json:"requests"`
	PageTypes []string `json:"page_types"`
}

func reachRows(dl *DecisionLog) []ReachRow {
	if dl == nil {
		return nil
	}
	var out []ReachRow
	for k, r := range dl.reached {
		pages := make([]string, 0, len(r.pages))
		for p := range r.pages {
			pages = append(pages, p)
		}
		slices.Sort(pages)
		out = append(out, ReachRow{Identity: k[0], Host: k[1], Requests: r.requests, PageTypes: pages})
	}
	slices.SortFunc(out, func(a, b ReachRow) int {
		return cmp.Or(strings.Compare(a.Identity, b.Identity), strings.Compare(a.Host, b.Host))
	})
	return out
}

func writeReached(w io.Writer, dl *DecisionLog) {
	rows := reachRows(dl)
	if dl == nil {
		fmt.Fprintf(w, "No decision log given.\n\n")
		return
	}
	if len(rows) == 0 {
		fmt.Fprintf(w, "No sandbox request was allowed in this log.\n\n")
		return
	}
	fmt.Fprintf(w, "| identity | host | requests | page types |\n|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s | %d | %s |\n", md(r.Identity), md(r.Host), r.Requests, md(strings.Join(r.PageTypes, ", ")))
	}
	fmt.Fprintln(w)
}

func writeCredentials(w io.Writer, runs []selftest.HistoryLine, planted []honeytoken.Token) {
	writePlanted(w, planted)
	rows := probeRows(runs)
	if len(rows) == 0 {
		fmt.Fprintf(w, "Not scanned: `egressd probe` scans its environment and its user's well-known credential files in each sandbox (names and locations only, never values).\n\n")
		return
	}
	fmt.Fprintf(w, "As reported by each sandbox's last `egressd probe` run (its word: a sandbox that hides a key can report none): environment variables shaped like tokens and the well-known credential files of the user it ran as (cloud CLIs, docker, .netrc, git, SSH and PEM private keys). Names and locations only; no value is ever read into the report.\n\n")
	fmt.Fprintf(w, "Keys egressd placed itself (the honeytokens above) are left out of this table; what is left is what the scan found.\n\n")
	fmt.Fprintf(w, "| identity | kind | name | location |\n|---|---|---|---|\n")
	for _, r := range rows {
		found := scannedOnly(r.Identity, r.Credentials, planted)
		if len(found) == 0 {
			fmt.Fprintf(w, "| %s | none found | - | - |\n", md(r.Identity))
		}
		for _, c := range found {
			fmt.Fprintf(w, "| %s | %s | %s | %s |\n", md(r.Identity), md(c.Kind), md(c.Name), md(c.Location))
		}
	}
	fmt.Fprintln(w)
}

// Pack is the evidence pack as JSON: the same sections as the Markdown.
type Pack struct {
	Generated time.Time              `json:"generated"`
	Config    string                 `json:"config"`
	Summary   string                 `json:"summary"`
	Walls     string                 `json:"walls,omitempty"`
	WallsErr  string                 `json:"walls_error,omitempty"`
	Rules     int                    `json:"rules"`
	Selftest  []selftest.HistoryLine `json:"selftest_runs"`
	Skipped   int                    `json:"skipped_history_lines,omitempty"`
	Probes    []ProbeRow             `json:"sandbox_probes"`
	Decisions *DecisionSummary       `json:"decisions,omitempty"`
	Reached   []ReachRow             `json:"reached"`
	// Planted lists the honeytokens egressd placed (kinds and variable
	// names, never values); HoneyHits the attempts to use them.
	Planted   []PlantedRow  `json:"honeytokens_placed"`
	HoneyHits []HoneyHitRow `json:"honeytoken_hits"`
	Seal      *Seal         `json:"signature,omitempty"` // without pack hash and sig: those are in the .sig file
}

// DecisionSummary is the decision log's part of the pack (real sandboxes
// only; probe traffic is a count).
type DecisionSummary struct {
	File      string     `json:"file"`
	Decisions int        `json:"decisions"`
	Allowed   int        `json:"allowed"`
	Probe     int        `json:"probe_decisions"`
	HighRisk  []decision `json:"high_risk"`
	Blocked   []decision `json:"blocked_metadata_and_actions"`
	// ToolCalls are the decisions on fetches by egressd's tool endpoint
	// (via: tool), ToolDenied those refused: counted in Decisions too.
	ToolCalls  int `json:"tool_calls"`
	ToolDenied int `json:"tool_calls_denied"`
}

// WriteJSON writes the evidence pack as one JSON document.
func WriteJSON(w io.Writer, in Input) error {
	own, sandboxes := splitRuns(in.Runs)
	pk := Pack{Generated: in.Now, Config: in.Policy.Source, Summary: historySummary(own), Walls: in.Walls,
		Rules: len(in.Policy.Rules), Selftest: own, Skipped: in.SkippedRuns, Probes: probeRows(sandboxes), Reached: reachRows(in.Log),
		Planted: plantedRows(in.Honeytokens), HoneyHits: honeyHitRows(in.Log), Seal: in.Seal}
	if in.WallsErr != nil {
		pk.WallsErr = in.WallsErr.Error()
	}
	if dl := in.Log; dl != nil {
		pk.Decisions = &DecisionSummary{File: in.LogFile, Decisions: dl.decisions, Allowed: dl.allowed, Probe: dl.probes, HighRisk: dl.highRisk, Blocked: dl.blocked,
			ToolCalls: dl.toolCalls, ToolDenied: dl.toolDenied}
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(pk)
}

// historySummary is the summary line: runs, probes run, leaks, the last
// sealed run and the outcome of the last run.
func historySummary(runs []selftest.HistoryLine) string {
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

func writeHistory(w io.Writer, runs []selftest.HistoryLine) {
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

func writeDecisions(w io.Writer, dl *DecisionLog, file string) {
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
	if dl.toolCalls > 0 {
		fmt.Fprintf(w, "; %d through egressd's fetch tool (%d denied)", dl.toolCalls, dl.toolDenied)
	}
	if dl.skipped > 0 {
		fmt.Fprintf(w, " (%d lines were not JSON and were skipped)", dl.skipped)
	}
	fmt.Fprintf(w, ".\n\n")
	if dl.probes > 0 {
		fmt.Fprintf(w, "%d decisions on probe traffic (`egressd-selftest`, `egressd-probe/…`) are left out of these tables: they are egressd testing the walls, not sandboxes.\n\n", dl.probes)
	}
	if len(dl.blocked) > 0 {
		bl := dl.blocked[max(0, len(dl.blocked)-reportHits):]
		fmt.Fprintf(w, "### Metadata and action pages blocked (log lines), newest first\n\n| time (UTC) | identity | request | page type | reason |\n|---|---|---|---|---|\n")
		for i := len(bl) - 1; i >= 0; i-- {
			d := bl[i]
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", d.Time.UTC().Format(time.RFC3339), md(d.Identity),
				md(requestOf(&d)), orDash(d.PageType), md(d.Reason))
		}
		fmt.Fprintln(w)
	}
	if len(dl.highRisk) > 0 {
		hits := dl.highRisk[max(0, len(dl.highRisk)-reportHits):]
		fmt.Fprintf(w, "### High-risk hits (metadata, consoles, registry uploads), newest first\n\n| time (UTC) | identity | request | decision | reason |\n|---|---|---|---|---|\n")
		for i := len(hits) - 1; i >= 0; i-- {
			d := hits[i]
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", d.Time.UTC().Format(time.RFC3339), md(d.Identity),
				md(requestOf(&d)), d.Decision, md(d.Reason))
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

// requestOf is a decision's request as the tables show it, marked when
// egressd's fetch tool made it for the sandbox.
func requestOf(d *decision) string {
	s := fmt.Sprintf("%s %s:%d%s", d.Method, d.Host, d.Port, d.Path)
	if d.Via == event.ViaTool {
		s += " (via tool)"
	}
	return s
}

// orDash shows an empty value as "-".
func orDash(s string) string { return cmp.Or(s, "-") }

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
