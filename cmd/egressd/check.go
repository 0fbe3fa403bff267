package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"

	"github.com/egressd/egressd/policy"
)

func init() { commands["check"] = cmdCheck }

// checkResult is the --json output of check (docs/ARCHITECTURE.md "Contracts").
type checkResult struct {
	Decision   string `json:"decision"`
	Rule       string `json:"rule"`
	Reason     string `json:"reason"`
	Detail     string `json:"detail,omitempty"`
	PageType   string `json:"page_type"`
	PageSignal string `json:"page_signal,omitempty"`
	Host       string `json:"host"`
	Addr       string `json:"addr,omitempty"`
	HighRisk   bool   `json:"high_risk"`
	Inspect    bool   `json:"inspect,omitempty"`
	Error      string `json:"error,omitempty"`
	Identity   string `json:"identity,omitempty"` // the declared identity whose view applied
	Message    string `json:"message,omitempty"`  // the operator's text in the 403 body
	Inject     bool   `json:"inject,omitempty"`   // egressd adds the rule's credential (never shown)

	reason policy.Reason
}

func cmdCheck(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("check", stderr)
	cfg := configFlag(fs)
	method := fs.String("method", "GET", "HTTP method of the request (URL targets)")
	ctype := fs.String("content-type", "", "Content-Type of the request body")
	asJSON := fs.Bool("json", false, "print the decision as JSON")
	identity := fs.String("identity", "", "decide in the view of this declared identity (default: a client that is none)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, "usage: egressd check [--config FILE] [--identity ID] [--method M] [--content-type T] [--json] URL|HOST:PORT")
		return exitUsage
	}
	if _, _, err := net.SplitHostPort(pos[0]); err != nil && !strings.Contains(pos[0], "://") {
		// a bare host is a question egressd cannot answer: which port, which URL?
		fmt.Fprintf(stderr, "egressd check: %q: want a URL or host:port (e.g. https://%s/ or %s:443)\n", pos[0], pos[0], pos[0])
		return exitUsage
	}
	p, err := loadPolicy(*cfg)
	if err != nil {
		printConfigError(stderr, err)
		return exitUsage
	}
	if *identity != "" && !slices.ContainsFunc(p.Identities, func(id policy.Identity) bool { return id.Name == *identity }) {
		fmt.Fprintf(stderr, "egressd: check: --identity %q is not declared under identities[] in %s\n", *identity, p.Source)
		return exitUsage
	}
	res := decide(p, pos[0], *identity, *method, *ctype) // as sent: the proxy decides the same method string
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetEscapeHTML(false)
		enc.Encode(res)
	} else {
		printCheck(stdout, res)
	}
	if res.Decision == "allow" {
		return exitOK
	}
	return exitDeny
}

// decide runs the offline decision for a URL (absolute form: the request
// decision) or a host:port (the CONNECT decision).
func decide(p *policy.Policy, target, identity, method, ctype string) checkResult {
	var t policy.Target
	var err error
	isURL := strings.Contains(target, "://")
	if isURL {
		t, err = policy.ParseURL(target)
	} else {
		t, err = policy.ParseAuthority(target)
	}
	if err != nil {
		// As the proxy does: a target no parser accepts is still scanned
		// for a high-risk host in any spelling.
		host, hr := p.HighRiskIn(target)
		return checkResult{Decision: "deny", Reason: policy.ReasonBadTarget.String(), PageType: policy.PageRead.String(), Host: host, HighRisk: hr, Error: err.Error(), reason: policy.ReasonBadTarget}
	}
	var d policy.Decision
	if isURL {
		d = p.DecideRequestAs(&t, identity, method, ctype, 0)
	} else {
		d = p.DecideTargetAs(&t, identity)
	}
	res := checkResult{
		Decision: "deny", Rule: d.RuleName(), Reason: d.Reason.String(), Detail: d.Detail,
		PageType: d.PageType.String(), PageSignal: d.PageSignal, Host: d.Host,
		HighRisk: d.HighRisk, Inspect: d.Inspect, reason: d.Reason,
		Identity: d.View, Message: p.Message(&d), Inject: d.InjectFor() != nil,
	}
	if d.Allow {
		res.Decision = "allow"
	}
	if d.Addr.IsValid() {
		res.Addr = d.Addr.String()
	}
	return res
}

func printCheck(w io.Writer, r checkResult) {
	fmt.Fprintf(w, "%s\treason=%s\trule=%s\tpage_type=%s\thost=%s", r.Decision, r.Reason, orDash(r.Rule), r.PageType, orDash(r.Host))
	if r.Addr != "" {
		fmt.Fprintf(w, "\taddr=%s", r.Addr)
	}
	fmt.Fprintf(w, "\thigh_risk=%v", r.HighRisk)
	if r.Identity != "" {
		fmt.Fprintf(w, "\tidentity=%s", r.Identity)
	}
	if r.Inject {
		fmt.Fprintf(w, "\tinject=yes")
	}
	fmt.Fprintln(w)
	if r.Detail != "" {
		fmt.Fprintf(w, "  detail: %s\n", r.Detail)
	}
	if r.Error != "" {
		fmt.Fprintf(w, "  error: %s\n", r.Error)
	}
	if r.Decision == "deny" {
		fmt.Fprintf(w, "  %s\n", r.reason.Help())
	}
	if r.Message != "" {
		fmt.Fprintf(w, "  message: %s\n", r.Message)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
