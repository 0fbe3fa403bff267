package main

import (
	"flag"
	"regexp"
	"slices"
	"testing"
)

// TestFlagPlaceholders: flag.PrintDefaults takes a back-quoted word of a
// usage string as the flag's argument name, so `egressd serve` in a usage
// printed "-log egressd serve". Every back-quoted name must be a
// placeholder (FILE, DIR, N), and a boolean flag has none.
func TestFlagPlaceholders(t *testing.T) {
	// Not parallel: it sets flagSetMade, a package-level hook every run() reads.
	placeholder := regexp.MustCompile(`^[A-Z][A-Z0-9_:.]*$`)
	var names []string
	for name := range commands {
		names = append(names, name)
	}
	slices.Sort(names)
	sub := map[string][]string{"ca": {"export"}, "audit": {"verify"}, "nft": {"apply"}, "report": nil}
	for _, name := range names {
		args := append(append([]string{name}, sub[name]...), "--help")
		var sets []*flag.FlagSet
		flagSetMade = func(fs *flag.FlagSet) { sets = append(sets, fs) }
		runCmd(args...)
		flagSetMade = nil
		for _, fs := range sets {
			fs.VisitAll(func(f *flag.Flag) {
				arg, _ := flag.UnquoteUsage(f)
				if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
					if arg != "" {
						t.Errorf("%s -%s: a switch shows the argument %q", name, f.Name, arg)
					}
					return
				}
				if _, ok := quoted(f.Usage); ok && !placeholder.MatchString(arg) {
					t.Errorf("%s -%s: the back-quoted %q is taken as the argument name", name, f.Name, arg)
				}
			})
		}
	}
}

// quoted is the first back-quoted text of s.
func quoted(s string) (string, bool) {
	m := regexp.MustCompile("`([^`]*)`").FindStringSubmatch(s)
	if m == nil {
		return "", false
	}
	return m[1], true
}
