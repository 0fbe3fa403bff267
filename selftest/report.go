package selftest

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"
)

// Status is the outcome of one probe.
type Status string

const (
	// Pass: the probe was blocked as expected, or a positive control got
	// through.
	Pass Status = "pass"
	// Leak: the probe got out. The run is not sealed.
	Leak Status = "LEAK"
	// Failed: a positive control could not reach its target: the
	// allowlist does not work, so the blocked probes prove nothing.
	Failed Status = "FAILED"
	// NotRun: the probe was not attempted (no root, no hook, no target).
	NotRun Status = "not-run"
	// Error: the probe could not tell (its own socket failed, the proxy
	// did not answer).
	Error Status = "error"
	// Untestable: the probe could not be carried out live because the
	// upstream it needs did not resolve or answer (egressd answered a
	// tunnel the policy allows with 502/504 upstream-*), so nothing got
	// past egressd; what the probe asks is decided by the policy offline
	// (a write probe carries the refusal the policy gives it). Not a
	// leak, and no reason to withhold readiness: an outage of one allowed
	// host takes nothing down.
	Untestable Status = "untestable"
)

// Outcomes of a whole run, as Report.Outcome returns them.
const (
	OutcomeSealed     = "sealed"     // every probe passed
	OutcomeLeak       = "leak"       // a probe leaked
	OutcomeIncomplete = "incomplete" // no leak found, but some probes did not run
	// OutcomeControlFailed: no leak, but a positive control could not
	// reach its target (the network or the upstream may be down), so the
	// refusals prove nothing. Not a leak: it must not page anyone as one.
	OutcomeControlFailed = "control-failed"
)

// Result is one probe's outcome.
type Result struct {
	ID       string        `json:"id"`       // unique probe name, e.g. "tcp/1.1.1.1:443"
	Route    string        `json:"route"`    // the escape route it tests
	Target   string        `json:"target"`   // what it tried to reach
	Expected string        `json:"expected"` // what a sealed sandbox shows
	Status   Status        `json:"status"`
	Result   string        `json:"result"` // what happened, briefly
	Duration time.Duration `json:"duration_ns"`
	Leak     bool          `json:"leak"`             // Status is Leak or Failed
	Detail   string        `json:"detail,omitempty"` // why it failed, or a note
}

// Report is one run of the catalog.
type Report struct {
	Start    time.Time     `json:"time"`
	Duration time.Duration `json:"duration_ns"`
	Results  []Result      `json:"results"`
	// Credentials are the long-lived keys an in-sandbox probe found in
	// its environment and the well-known files of its user: names and
	// locations, never values.
	Credentials []Credential `json:"credentials,omitempty"`
}

// Credential is one long-lived key found inside a sandbox.
type Credential struct {
	Kind     string `json:"kind"`     // "aws-credentials", "ssh-private-key", "env-token", ...
	Name     string `json:"name"`     // the variable, profile or key name
	Location string `json:"location"` // the file, or "env"
}

// Sealed reports whether every probe ran and passed.
func (r *Report) Sealed() bool { return r.Outcome() == OutcomeSealed }

// Outcome is OutcomeLeak if any probe leaked, else OutcomeControlFailed if
// a positive control failed, else OutcomeIncomplete if any probe did not
// run or could not tell, else OutcomeSealed. Untestable probes (an
// upstream outage: nothing got past egressd, the policy decides them
// offline) leave a sealed run sealed. An empty run is incomplete.
func (r *Report) Outcome() string {
	out := OutcomeSealed
	if len(r.Results) == 0 {
		out = OutcomeIncomplete
	}
	control := false
	for _, res := range r.Results {
		switch res.Status {
		case Leak:
			return OutcomeLeak
		case Failed:
			control = true
		case NotRun, Error:
			out = OutcomeIncomplete
		}
	}
	if control {
		return OutcomeControlFailed
	}
	return out
}

// Leaks returns the results with status Leak.
func (r *Report) Leaks() []Result { return r.with(Leak) }

// Leaked reports whether any probe found evidence that something got past
// the policy or the walls: the one predicate that tells a leak from an
// outage (a failed positive control, an untestable probe, a probe that
// could not tell are none).
func (r *Report) Leaked() bool { return len(r.Leaks()) > 0 }

// Untestables returns the probes that could not be carried out live
// (status Untestable: an upstream outage, or a rule that can never allow).
func (r *Report) Untestables() []Result { return r.with(Untestable) }

// UntestableLines are the untestable probes as warnings, one line per
// distinct cause: "untestable live: <cause>: id, id and N more".
func (r *Report) UntestableLines() []string {
	var causes []string
	ids := map[string][]string{}
	for _, res := range r.Untestables() {
		cause, _, _ := strings.Cut(res.Detail, "; ")
		if ids[cause] == nil {
			causes = append(causes, cause)
		}
		ids[cause] = append(ids[cause], res.ID)
	}
	out := make([]string, len(causes))
	for i, c := range causes {
		who := ids[c]
		list := strings.Join(who, ", ")
		if len(who) > 3 {
			list = fmt.Sprintf("%s and %d more", strings.Join(who[:2], ", "), len(who)-2)
		}
		out[i] = c + ": " + list
	}
	return out
}

// ControlsFailed returns the positive controls that failed.
func (r *Report) ControlsFailed() []Result { return r.with(Failed) }

// Failures returns the results with status Leak or Failed.
func (r *Report) Failures() []Result { return r.with(Leak, Failed) }

// Unfinished returns the results with status NotRun or Error.
func (r *Report) Unfinished() []Result { return r.with(NotRun, Error) }

func (r *Report) with(ss ...Status) []Result {
	var out []Result
	for _, res := range r.Results {
		for _, s := range ss {
			if res.Status == s {
				out = append(out, res)
			}
		}
	}
	return out
}

// Summary is one line: the outcome, counts and the run time.
func (r *Report) Summary() string {
	n := map[Status]int{}
	for _, res := range r.Results {
		n[res.Status]++
	}
	untestable := ""
	if n[Untestable] > 0 {
		untestable = fmt.Sprintf(", %d untestable live (upstream unreachable; decided by the policy offline)", n[Untestable])
	}
	return fmt.Sprintf("%s: %d probes, %d passed, %d leaked, %d controls failed, %d not run, %d errors%s, in %v",
		r.Outcome(), len(r.Results), n[Pass], n[Leak], n[Failed], n[NotRun], n[Error], untestable, r.Duration.Round(time.Millisecond))
}

// WriteTable prints the report as an aligned table (probe, route, target,
// expected, result, duration), then the detail of every probe that did not
// pass, then the summary line.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PROBE\tROUTE\tTARGET\tEXPECTED\tRESULT\tTIME")
	for _, res := range r.Results {
		mark := string(res.Status)
		if res.Result != "" {
			mark += ": " + res.Result
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%v\n", res.ID, res.Route, clip(res.Target, 60), res.Expected, clip(mark, 60), res.Duration.Round(time.Millisecond))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// One line per distinct reason, so forty "needs root" read as one.
	type group struct {
		status Status
		detail string
		ids    []string
	}
	var groups []*group
	byKey := map[string]*group{}
	for _, res := range r.Results {
		if res.Status == Pass || res.Detail == "" {
			continue
		}
		k := string(res.Status) + "\x00" + res.Detail
		g := byKey[k]
		if g == nil {
			g = &group{status: res.Status, detail: res.Detail}
			byKey[k] = g
			groups = append(groups, g)
		}
		g.ids = append(g.ids, res.ID)
	}
	var b strings.Builder
	for _, g := range groups {
		who := strings.Join(g.ids, ", ")
		if len(g.ids) > 3 {
			who = fmt.Sprintf("%s and %d more", strings.Join(g.ids[:2], ", "), len(g.ids)-2)
		}
		fmt.Fprintf(&b, "%s %s: %s\n", g.status, who, g.detail)
	}
	if b.Len() > 0 {
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "%s\n", r.Summary())
	_, err := io.WriteString(w, "\n"+b.String())
	return err
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

// jsonReport is the JSON form: the results plus the derived outcome and
// counts, so a history line can be read without recomputing them.
type jsonReport struct {
	Time       time.Time `json:"time"`
	DurationMS float64   `json:"duration_ms"`
	Outcome    string    `json:"outcome"`
	Sealed     bool      `json:"sealed"`
	Probes     int       `json:"probes"`
	Leaks      int       `json:"leaks"`
	NotRun     int       `json:"not_run"`
	// ControlsFailed counts failed positive controls (not leaks).
	ControlsFailed int `json:"controls_failed"`
	// Untestable counts the probes an upstream outage left untested live.
	Untestable  int          `json:"untestable,omitempty"`
	Results     []Result     `json:"results"`
	Credentials []Credential `json:"credentials,omitempty"`
}

// MarshalJSON adds outcome, sealed and counts to the results.
func (r *Report) MarshalJSON() ([]byte, error) {
	j := jsonReport{Time: r.Start, DurationMS: float64(r.Duration.Microseconds()) / 1000,
		Outcome: r.Outcome(), Sealed: r.Sealed(), Probes: len(r.Results), Results: r.Results}
	j.Leaks = len(r.Leaks())
	j.ControlsFailed = len(r.ControlsFailed())
	j.NotRun = len(r.Unfinished())
	j.Untestable = len(r.Untestables())
	j.Credentials = r.Credentials
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (r *Report) UnmarshalJSON(b []byte) error {
	var j jsonReport
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	r.Start = j.Time
	r.Duration = time.Duration(j.DurationMS * float64(time.Millisecond))
	r.Results = j.Results
	r.Credentials = j.Credentials
	return nil
}

// maxReportText caps one text field of a report from elsewhere.
const maxReportText = 1024

// Clean makes a report that came from elsewhere (an in-sandbox probe's,
// posted by the sandbox) safe to store and show: every text field loses
// its control characters (terminal escapes, line breaks that would fake
// report rows) and bidi controls (which reorder what a reader sees), each
// replaced by U+FFFD, and is cut to maxReportText bytes. Statuses it
// does not know become Error, so nothing reads as a pass it was not.
func (r *Report) Clean() {
	for i := range r.Results {
		x := &r.Results[i]
		for _, f := range []*string{&x.ID, &x.Route, &x.Target, &x.Expected, &x.Result, &x.Detail} {
			*f = cleanText(*f)
		}
		switch x.Status {
		case Pass, Leak, Failed, Error, NotRun, Untestable:
		default:
			x.Status = Error
		}
		x.Leak = x.Status == Leak || x.Status == Failed
	}
	for i := range r.Credentials {
		c := &r.Credentials[i]
		for _, f := range []*string{&c.Kind, &c.Name, &c.Location} {
			*f = cleanText(*f)
		}
	}
}

func cleanText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) {
			return '\uFFFD'
		}
		return r
	}, s)
	if len(s) <= maxReportText {
		return s
	}
	cut := maxReportText
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
