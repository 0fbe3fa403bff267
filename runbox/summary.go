package runbox

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"

	"github.com/egressd/egressd/policy"
)

// logHandler splits a run's log: every line to the log file; egressd's own
// warnings and errors also to the terminal, but never a decision or DNS
// line (they would interleave with CMD's output); decisions are counted
// for the summary printed at exit.
type logHandler struct {
	file, term slog.Handler
	sum        *summary
}

func (h *logHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.file.Enabled(ctx, l) || h.term.Enabled(ctx, l)
}

func (h *logHandler) Handle(ctx context.Context, r slog.Record) error {
	// traffic lines go to the run log only: decisions, DNS queries and the
	// DNS filter's count of the query lines it held back
	quiet := r.Message == "decision" || r.Message == "dns query" || r.Message == "dns queries not logged"
	if r.Message == "decision" {
		h.sum.add(r)
	}
	if !quiet && h.term.Enabled(ctx, r.Level) {
		h.term.Handle(ctx, r.Clone())
	}
	if h.file.Enabled(ctx, r.Level) {
		return h.file.Handle(ctx, r)
	}
	return nil
}

func (h *logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &logHandler{file: h.file.WithAttrs(as), term: h.term.WithAttrs(as), sum: h.sum}
}

func (h *logHandler) WithGroup(name string) slog.Handler {
	return &logHandler{file: h.file.WithGroup(name), term: h.term.WithGroup(name), sum: h.sum}
}

// summary counts a run's proxy decisions.
type summary struct {
	mu      sync.Mutex
	held    int // probes running: their requests are not CMD's
	allowed int
	denied  map[[2]string]int // host, reason → count
	// npmAudit counts refused `npm audit` POSTs: refused by design, so
	// the summary says why and how to stop them.
	npmAudit int
}

func (s *summary) add(r slog.Record) {
	var decision, host, reason, method, detail, identity string
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "identity":
			identity = a.Value.String()
		case "method":
			method = a.Value.String()
		case "detail":
			detail = a.Value.String()
		case "decision":
			decision = a.Value.String()
		case "host":
			host = a.Value.String()
		case "reason":
			reason = a.Value.String()
		}
		return true
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held > 0 || policy.IsProbeIdentity(identity) || method == "CONNECT" && detail == "tunnel inspected" {
		return // a probe's (while it runs, or labelled so); or a tunnel whose requests are counted one by one
	}
	switch decision {
	case "allow":
		s.allowed++
	case "deny":
		if s.denied == nil {
			s.denied = map[[2]string]int{}
		}
		s.denied[[2]string{host, reason}]++
		if reason == "mirror" && strings.HasPrefix(detail, "npm audit") {
			s.npmAudit++
		}
	}
}

// hold stops counting while f (a probe) runs.
func (s *summary) hold(f func()) {
	s.mu.Lock()
	s.held++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.held--
		s.mu.Unlock()
	}()
	f()
}

// write prints the summary: counts, each denied host with its reason,
// and how to allow one.
func (s *summary) write(w io.Writer, logFile string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	keys := make([][2]string, 0, len(s.denied))
	for k, c := range s.denied {
		keys = append(keys, k)
		n += c
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i][0] < keys[j][0] || keys[i][0] == keys[j][0] && keys[i][1] < keys[j][1]
	})
	fmt.Fprintf(w, "egressd run: %d requests allowed, %d denied (every decision: %s)\n", s.allowed, n, logFile)
	honey := 0
	for _, k := range keys {
		fmt.Fprintf(w, "  denied %s: %s (%d)\n", k[0], k[1], s.denied[k])
		if k[1] == policy.ReasonHoneytoken.String() {
			honey += s.denied[k]
		}
	}
	if honey > 0 {
		fmt.Fprintf(w, "  %d request(s) carried a honeytoken egressd planted in the sandbox: an exfiltration attempt, whatever the rules allow; treat it as an incident\n", honey)
	}
	if s.npmAudit > 0 {
		fmt.Fprintf(w, "  npm audit was refused (%d): it uploads the whole dependency tree to the registry, which a download-only mirror never allows; turn it off with audit=false in .npmrc (or npm_config_audit=false, or --no-audit)\n", s.npmAudit)
	}
	if n > honey {
		fmt.Fprintln(w, "  to allow a host, add it to an allow rule in the config (`egressd check --config FILE URL` explains a decision)")
	}
}
