package policy

import (
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestDocsConfigKeys: the config reference in docs/CONFIG.md (its YAML
// block) shows exactly the keys the parser knows, section by section: a key
// added to the code without its line in the reference fails, and so does a
// documented key the parser would refuse as unknown.
func TestDocsConfigKeys(t *testing.T) {
	b, err := os.ReadFile("../docs/CONFIG.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "```yaml\n")
	if !ok {
		t.Fatal("docs/CONFIG.md has no yaml block")
	}
	block, _, _ := strings.Cut(rest, "```")
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(block), &doc); err != nil {
		t.Fatalf("docs/CONFIG.md's reference is not YAML: %v", err)
	}
	documented := map[string]bool{}
	nodeKeys(doc.Content[0], "", documented)
	code := map[string]bool{}
	typeKeys(reflect.TypeFor[rawConfig](), "", code)
	if len(code) < 40 {
		t.Fatalf("found only %d config keys in the raw types: the walk is broken", len(code))
	}
	var missing, unknown []string
	for k := range code {
		if !documented[k] {
			missing = append(missing, k)
		}
	}
	for k := range documented {
		if !code[k] {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(unknown)
	for _, k := range missing {
		t.Errorf("config key %s is not in docs/CONFIG.md's reference", k)
	}
	for _, k := range unknown {
		t.Errorf("docs/CONFIG.md's reference shows %s, which the parser does not know", k)
	}
}

// nodeKeys collects the key paths of a YAML document ("allow[].hosts").
func nodeKeys(n *yaml.Node, path string, out map[string]bool) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := n.Content[i].Value
			if path != "" {
				p = path + "." + p
			}
			out[p] = true
			nodeKeys(n.Content[i+1], p, out)
		}
	case yaml.SequenceNode:
		for _, c := range n.Content {
			nodeKeys(c, path+"[]", out)
		}
	}
}

// typeKeys collects the key paths the raw config types accept.
func typeKeys(t reflect.Type, path string, out map[string]bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() == reflect.Slice {
		typeKeys(t.Elem(), path+"[]", out)
		return
	}
	if t.Kind() != reflect.Struct || strings.HasPrefix(t.Name(), "at[") {
		return
	}
	for i := range t.NumField() {
		k, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if k == "" || k == "-" {
			continue
		}
		p := k
		if path != "" {
			p = path + "." + k
		}
		out[p] = true
		typeKeys(t.Field(i).Type, p, out)
	}
}
