package archtest

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/egressd/egressd/internal/testutil"
)

// The manual's contract lists are held to the code here: a metric, a fuzz
// target or a command-line flag added without its line in the docs fails,
// and so does a line for one that is gone. (Deny reasons: policy's
// TestReadmeDenyReasons; config keys: policy's TestDocsConfigKeys; the
// command table's flags: cmd/egressd's TestReadmeCommandTableFlags.)

// TestDocsMetrics: docs/METRICS.md's metrics table names exactly the
// metrics the code declares (egressd_dns_* stands for the DNS filter's).
func TestDocsMetrics(t *testing.T) {
	root := moduleRoot(t)
	code := testutil.ExportedMetrics(t, root)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "METRICS.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| (`egressd_[a-z0-9_*]+`(?:, `egressd_[a-z0-9_*]+`)*) \\|")
	documented := map[string]bool{}
	for l := range strings.SplitSeq(string(doc), "\n") {
		if m := row.FindStringSubmatch(l); m != nil {
			for _, n := range strings.Split(m[1], ", ") {
				documented[strings.Trim(n, "`")] = true
			}
		}
	}
	covered := func(name string) bool {
		if documented[name] {
			return true
		}
		for d := range documented {
			if p, ok := strings.CutSuffix(d, "*"); ok && strings.HasPrefix(name, p) {
				return true
			}
		}
		return false
	}
	for name := range code {
		if !covered(name) {
			t.Errorf("metric %s is exported but not in docs/METRICS.md's table", name)
		}
	}
	for name := range documented {
		if !strings.HasSuffix(name, "*") && !code[name] {
			t.Errorf("docs/METRICS.md lists %s, which the code does not export", name)
		}
	}
}

// TestDocsFuzzTargets: docs/TESTING.md names every fuzz target of the
// module, and only those.
func TestDocsFuzzTargets(t *testing.T) {
	root := moduleRoot(t)
	decl := regexp.MustCompile(`(?m)^func (Fuzz[A-Za-z0-9_]+)\(`)
	var code []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range decl.FindAllSubmatch(b, -1) {
			code = append(code, string(m[1]))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(code) < 10 {
		t.Fatalf("found only %d fuzz targets: the scan is broken", len(code))
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "TESTING.md"))
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile("`(Fuzz[A-Za-z0-9_]+)`").FindAllStringSubmatch(string(doc), -1)
	documented := map[string]bool{}
	for _, m := range named {
		documented[m[1]] = true
	}
	sort.Strings(code)
	for _, f := range code {
		if !documented[f] {
			t.Errorf("fuzz target %s is not named in docs/TESTING.md", f)
		}
	}
	for f := range documented {
		if !slices.Contains(code, f) {
			t.Errorf("docs/TESTING.md names %s, which no test declares", f)
		}
	}
}
