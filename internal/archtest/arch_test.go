package archtest

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/egressd/egressd"

type pkg struct {
	ImportPath string
	Doc        string
	Imports    []string
	Name       string
}

func listPackages(t *testing.T) []pkg {
	t.Helper()
	out, err := exec.Command("go", "list", "-json", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// allowed lists, per package, the packages of ours it may import; a
// package not listed may import any of ours except internal/testnet.
var allowed = map[string][]string{
	"policy":    {},
	"configs":   {},
	"nft":       {},
	"ca":        {},
	"sandbox":   {},
	"proxy":     {"policy"},
	"dnsfilter": {"policy"},
	"selftest":  {},
	"audit":     {},
	// the self-test plan and its runner, and the evidence pack: library
	// code cmd/egressd only wires.
	"selftest/plan":    {"policy", "selftest"},
	"selftest/probens": {"daemon", "policy", "sandbox", "selftest", "selftest/plan", "selftest/probe"},
	"selftest/probe":   {"selftest"},
	"report":           {"nft", "policy", "selftest"},
}

func TestDependencyDirection(t *testing.T) {
	for _, p := range listPackages(t) {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		ok, limited := allowed[rel]
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			dep := strings.TrimPrefix(imp, module+"/")
			if dep == "internal/testnet" {
				t.Errorf("%s (production code) imports internal/testnet", rel)
			}
			if limited && !contains(ok, dep) {
				t.Errorf("%s imports %s: DESIGN.md allows only %v", rel, dep, ok)
			}
		}
	}
}

func TestPackageDocs(t *testing.T) {
	for _, p := range listPackages(t) {
		if !strings.HasPrefix(p.Doc, "Package "+p.Name) && !(p.Name == "main" && strings.HasPrefix(p.Doc, "Command ")) {
			t.Errorf("%s: package doc %q must start with \"Package %s\"", p.ImportPath, p.Doc, p.Name)
		}
	}
}

func contains(l []string, s string) bool {
	for _, v := range l {
		if v == s {
			return true
		}
	}
	return false
}
