package archtest

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/egressd/egressd"

// anyPackage in a package's allowed list lets it import every production
// package of ours: the wiring layers (cmd, bench).
const anyPackage = "*"

// allowed lists, per package of ours (path relative to the module root),
// the packages of ours its production code may import. Every package must
// be listed: a new package fails TestDependencyDirection until its rule is
// added here. The layers, bottom up:
//
//   - leaves, importing nothing of ours: policy, configs, nft, ca,
//     sandbox, selftest, event (the decision record's schema), dnsclient
//     (the upstream DNS client);
//   - audit, on event;
//   - the data path: proxy and dnsfilter, on policy (proxy also on event);
//   - daemon, the lifecycle around them and the one gateway builder
//     (proxy, DNS filter, walls, audit) serve and run share;
//   - runbox, `egressd run`'s sandbox around a daemon gateway;
//   - cmd/egressd and bench, which only wire: anything above.
//
// internal/testnet and internal/testutil are for tests only: no production
// code may import them, whatever this table says.
var allowed = map[string][]string{
	"policy":          {"policy/classify", "policy/hostlist"},
	"policy/classify": {},
	"policy/hostlist": {}, // big host lists: mmap and unsafe stay behind Load/Covers/Len
	"configs":         {},
	"nft":             {},
	"ca":              {},
	"sandbox":         {},
	"audit":           {"event"},
	"selftest":        {},
	"event":           {},
	"honeytoken":      {}, // canary credentials and their scan: a leaf the data path asks
	"proxy":           {"policy", "event", "inject", "honeytoken", "dnsclient"},
	"dnsclient":       {},                  // the one upstream DNS client of proxy and dnsfilter
	"inject":          {"policy"},          // secrets of inject rules: reads files, nothing else
	"presets":         {"policy"},          // writes a config, checked by the parser
	"suggest":         {"policy", "event"}, // reads decision logs and prints: never changes a config
	"dnsfilter":       {"policy", "event", "honeytoken", "dnsclient"},
	"daemon":          {"policy", "proxy", "dnsfilter", "audit", "ca", "nft", "selftest", "selftest/plan", "honeytoken", "tools"},
	"runbox":          {"ca", "daemon", "event", "nft", "policy", "sandbox", "honeytoken"},
	// the MCP fetch endpoint: every fetch goes through the proxy, which
	// it sees only as an interface (tools.Checkpoint)
	"tools": {},
	// the self-test plan, its runner, the sandbox side, and the evidence
	// pack: library code cmd/egressd only wires.
	"selftest/plan":    {"policy", "selftest"},
	"selftest/probens": {"nft", "policy", "sandbox", "selftest", "selftest/plan", "selftest/probe"},
	"selftest/probe":   {"selftest"},
	"report":           {"event", "policy", "selftest", "audit", "honeytoken"},
	"deploy":           {},

	"cmd/egressd":      {anyPackage},
	"bench":            {anyPackage},
	"bench/faults/m17": {},
	"bench/gofloor":    {},
	"examples/origin":  {}, // the quick start's local site: imports none of ours

	"internal/archtest": {},
	"internal/testnet":  {"sandbox"},
	"internal/testutil": {},
}

// testOnly are the packages production code must not import.
var testOnly = []string{"internal/testnet", "internal/testutil"}

type pkg struct {
	Rel     string   // path relative to the module root, "" for the root
	Name    string   // package name
	Doc     string   // package doc comment
	Imports []string // production imports, all build tags
}

// moduleRoot finds the directory holding go.mod above the test's directory.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the test directory")
		}
		dir = up
	}
}

// listPackages parses every non-test Go file of the module (all build
// tags, so rules hold for every GOOS) and groups them by directory.
func listPackages(t *testing.T) []pkg {
	t.Helper()
	root := moduleRoot(t)
	byDir := map[string]*pkg{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		rel = filepath.ToSlash(rel)
		if rel == "." {
			rel = ""
		}
		p := byDir[rel]
		if p == nil {
			p = &pkg{Rel: rel, Name: f.Name.Name}
			byDir[rel] = p
		}
		if f.Doc != nil && p.Doc == "" {
			p.Doc = f.Doc.Text()
		}
		for _, is := range f.Imports {
			imp, _ := strconv.Unquote(is.Path.Value)
			if !slices.Contains(p.Imports, imp) {
				p.Imports = append(p.Imports, imp)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var pkgs []pkg
	for _, p := range byDir {
		pkgs = append(pkgs, *p)
	}
	slices.SortFunc(pkgs, func(a, b pkg) int { return strings.Compare(a.Rel, b.Rel) })
	if len(pkgs) < 10 {
		t.Fatalf("found only %d packages under %s", len(pkgs), root)
	}
	return pkgs
}

// ours returns the packages of ours that p imports, relative to the module.
func ours(p pkg) []string {
	var deps []string
	for _, imp := range p.Imports {
		if dep, ok := strings.CutPrefix(imp, module+"/"); ok {
			deps = append(deps, dep)
		}
	}
	return deps
}

// violations returns what breaks the rules in pkgs.
func violations(pkgs []pkg, allowed map[string][]string) []string {
	var bad []string
	for _, p := range pkgs {
		ok, listed := allowed[p.Rel]
		if !listed {
			bad = append(bad, "package "+p.Rel+" has no dependency rule: add it, with the packages of ours it may import, to the allowed table in internal/archtest/arch_test.go")
			continue
		}
		for _, dep := range ours(p) {
			switch {
			case slices.Contains(testOnly, dep):
				bad = append(bad, p.Rel+" (production code) imports "+dep+", which is for tests only")
			case slices.Contains(ok, anyPackage):
			case !slices.Contains(ok, dep):
				bad = append(bad, p.Rel+" imports "+dep+": its rule in internal/archtest allows only ["+strings.Join(ok, ", ")+"]")
			}
		}
	}
	return bad
}

func TestDependencyDirection(t *testing.T) {
	for _, v := range violations(listPackages(t), allowed) {
		t.Error(v)
	}
}

// TestRules: the rule check itself catches an unlisted package, a
// forbidden import and a test helper in production code.
func TestRules(t *testing.T) {
	pkgs := []pkg{
		{Rel: "policy", Imports: []string{"fmt"}},
		{Rel: "proxy", Imports: []string{module + "/policy", module + "/nft"}},
		{Rel: "daemon", Imports: []string{module + "/internal/testutil"}},
		{Rel: "newpkg"},
		{Rel: "cmd/egressd", Imports: []string{module + "/nft", module + "/internal/testnet"}},
	}
	rules := map[string][]string{"policy": {}, "proxy": {"policy"}, "daemon": {"internal/testutil"}, "cmd/egressd": {anyPackage}}
	got := strings.Join(violations(pkgs, rules), "\n")
	for _, want := range []string{
		"proxy imports nft",
		"daemon (production code) imports internal/testutil",
		"package newpkg has no dependency rule: add it",
		"cmd/egressd (production code) imports internal/testnet",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("violations do not say %q:\n%s", want, got)
		}
	}
	if n := len(strings.Split(got, "\n")); n != 4 {
		t.Errorf("%d violations, want 4:\n%s", n, got)
	}
}

func TestPackageDocs(t *testing.T) {
	for _, p := range listPackages(t) {
		if !strings.HasPrefix(p.Doc, "Package "+p.Name) && !(p.Name == "main" && strings.HasPrefix(p.Doc, "Command ")) {
			t.Errorf("%s: package doc %q must start with \"Package %s\"", p.Rel, p.Doc, p.Name)
		}
	}
}

// TestDocsPackageMap: docs/ARCHITECTURE.md's package map names exactly the
// packages of the module, so the map a newcomer reads first cannot drift
// from the tree.
func TestDocsPackageMap(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(moduleRoot(t), "docs", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "## Package map")
	if !ok {
		t.Fatal("docs/ARCHITECTURE.md has no \"## Package map\" section")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	mapped := map[string]bool{}
	for _, line := range strings.Split(table, "\n") {
		if cells := strings.Split(line, "|"); len(cells) > 2 {
			if name := strings.Trim(strings.TrimSpace(cells[1]), "`"); name != "" && name != "package" && !strings.HasPrefix(name, "---") {
				mapped[name] = true
			}
		}
	}
	for _, p := range listPackages(t) {
		if p.Rel == "" {
			continue
		}
		if !mapped[p.Rel] {
			t.Errorf("package %s is not in docs/ARCHITECTURE.md's package map: add a row saying its one job", p.Rel)
		}
		delete(mapped, p.Rel)
	}
	for name := range mapped {
		t.Errorf("docs/ARCHITECTURE.md's package map names %s, which is not a package of the module", name)
	}
}

// maxFileLines bounds a non-test Go file (issue 26.4): past it, a file
// holds more than one concern and is split by concern.
const maxFileLines = 1000

// TestFileSize: no non-test Go file of the module is over maxFileLines.
func TestFileSize(t *testing.T) {
	root := moduleRoot(t)
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if n := strings.Count(string(b), "\n"); n > maxFileLines {
			rel, _ := filepath.Rel(root, path)
			t.Errorf("%s: %d lines, over %d: split it by concern", rel, n, maxFileLines)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
