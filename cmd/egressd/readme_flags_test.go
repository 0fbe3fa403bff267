package main

import (
	"flag"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeCommandTableFlags: the README's command table names every
// flag of every command it lists (run --log-level was missing).
func TestReadmeCommandTableFlags(t *testing.T) {
	// Not parallel: it sets flagSetMade, a package-level hook every run() reads.
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{} // command → the first cells of its rows
	name := regexp.MustCompile("^`egressd ([a-z]+)")
	for line := range strings.Lines(string(b)) {
		cells := strings.Split(strings.ReplaceAll(line, `\|`, "/"), "|")
		if len(cells) < 3 || !strings.HasPrefix(line, "| `egressd ") {
			continue
		}
		if m := name.FindStringSubmatch(strings.TrimSpace(cells[1])); m != nil {
			rows[m[1]] += cells[1]
		}
	}
	if len(rows) < 10 {
		t.Fatalf("found %d command rows in the README: the table's form changed", len(rows))
	}
	sub := map[string][]string{"ca": {"export"}, "audit": {"verify"}, "nft": {"down"}}
	for name, cell := range rows {
		if _, ok := commands[name]; !ok {
			continue // version: not a flag set
		}
		var sets []*flag.FlagSet
		flagSetMade = func(fs *flag.FlagSet) { sets = append(sets, fs) }
		runCmd(append(append([]string{name}, sub[name]...), "--help")...)
		flagSetMade = nil
		for _, fs := range sets {
			fs.VisitAll(func(f *flag.Flag) {
				if !strings.Contains(cell, "--"+f.Name) {
					t.Errorf("README command table: egressd %s lacks --%s", name, f.Name)
				}
			})
		}
	}
}
