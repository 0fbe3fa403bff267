package policy

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// readmeDenyTable parses docs/DECISIONS.md's "Deny reasons" table: reason → status
// (0 for "—", logged only).
func readmeDenyTable(t *testing.T, readme string) map[string]int {
	t.Helper()
	_, section, ok := strings.Cut(readme, "### Deny reasons (`X-Egressd-Deny`)")
	if !ok {
		t.Fatal("docs/DECISIONS.md has no \"### Deny reasons (`X-Egressd-Deny`)\" section")
	}
	row := regexp.MustCompile("^\\| `([^`]+)` \\| ([^|]+) \\|")
	table := map[string]int{}
	inTable := false
	for line := range strings.Lines(section) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break
			}
			continue
		}
		inTable = true
		if strings.HasPrefix(line, "| reason ") || strings.HasPrefix(line, "| ---") {
			continue
		}
		m := row.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("docs/DECISIONS.md deny table: row %q is not | `reason` | status | meaning |", line)
			continue
		}
		status := 0
		if s := strings.TrimSpace(m[2]); s != "—" {
			n, err := strconv.Atoi(s)
			if err != nil {
				t.Errorf("docs/DECISIONS.md deny table: %s: status %q is not a number or —", m[1], s)
			}
			status = n
		}
		if _, dup := table[m[1]]; dup {
			t.Errorf("docs/DECISIONS.md deny table lists %s twice", m[1])
		}
		table[m[1]] = status
	}
	return table
}

// TestReadmeDenyReasons: docs/DECISIONS.md's table lists exactly the declared
// denials, each with its status.
func TestReadmeDenyReasons(t *testing.T) {
	b, err := os.ReadFile("../docs/DECISIONS.md")
	if err != nil {
		t.Fatal(err)
	}
	table := readmeDenyTable(t, string(b))
	for _, r := range Reasons() {
		status, listed := table[r.String()]
		delete(table, r.String())
		switch {
		case !r.Denies():
			if listed {
				t.Errorf("docs/DECISIONS.md deny table lists %s, which is not a denial", r)
			}
		case !listed:
			t.Errorf("docs/DECISIONS.md deny table misses %s (status %d): add a row", r, r.Status())
		case status != r.Status():
			t.Errorf("docs/DECISIONS.md deny table: %s has status %d, the code sends %d", r, status, r.Status())
		}
	}
	for name := range table {
		t.Errorf("docs/DECISIONS.md deny table lists %s, which policy/reason.go does not declare", name)
	}
}

// TestReasons: names are unique and non-empty; every denial has advice
// and a status a client can get (or 0: logged only).
func TestReasons(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range Reasons() {
		if r.String() == "" || seen[r.String()] {
			t.Errorf("reason %d: name %q empty or repeated", r, r)
		}
		seen[r.String()] = true
		switch s := r.Status(); {
		case r == ReasonAllowed && s != 200:
			t.Errorf("allowed has status %d", s)
		case r.Denies() && r.Help() == "":
			t.Errorf("%s: a denial without advice", r)
		case s != 0 && (s < 200 || s > 599):
			t.Errorf("%s: status %d", r, s)
		}
	}
	if Reason(len(reasons)).String() != "unknown" || ReasonAllowed.Denies() || !ReasonNoRule.Denies() {
		t.Error("unknown reason or Denies")
	}
}
