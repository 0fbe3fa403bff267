package testutil

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// ExportedMetrics is every metric name egressd's code under root declares
// (a collector's Name or a Desc), read from the source so the list has one
// home, the code: the docs' metrics table, the alerting rules and the
// dashboard are held to it.
func ExportedMetrics(t testing.TB, root string) map[string]bool {
	t.Helper()
	decl := regexp.MustCompile(`(?:Name:\s*|NewDesc\()"(egressd_[a-z0-9_]+)"`)
	names := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (d.Name() == "testdata" || d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range decl.FindAllSubmatch(b, -1) {
			names[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !names["egressd_verified"] || !names["egressd_requests_total"] {
		t.Fatalf("found only %d metric names in the code under %s: the scan is broken", len(names), root)
	}
	return names
}
