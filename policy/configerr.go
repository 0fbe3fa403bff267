package policy

import (
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// This file turns yaml.v3's decoding errors into what a person fixing the
// file needs: the field path with the rule's index ("allow[1].hosts"), the
// key they probably meant, and the shape a value should have.

// rawTypes maps the raw type names in yaml.v3's messages to their types,
// for the known keys of each section.
var rawTypes = map[string]reflect.Type{
	"Config": reflect.TypeFor[rawConfig](), "Listen": reflect.TypeFor[rawListen](), "Resolver": reflect.TypeFor[rawResolver](),
	"Rule": reflect.TypeFor[rawRule](), "Deny": reflect.TypeFor[rawDeny](), "Identity": reflect.TypeFor[rawIdentity](),
	"Sandbox": reflect.TypeFor[rawSandbox](), "Selftest": reflect.TypeFor[rawSelftest](), "Limits": reflect.TypeFor[rawLimits](),
	"Audit": reflect.TypeFor[rawAudit](), "Tools": reflect.TypeFor[rawTools](), "ToolServer": reflect.TypeFor[rawToolServer](),
	"Inject": reflect.TypeFor[rawInject](), "Basic": reflect.TypeFor[rawBasic](), "UpstreamProxy": reflect.TypeFor[rawUpstreamProxy](),
}

// knownKeys lists the config keys of a raw section type.
func knownKeys(t reflect.Type) []string {
	var keys []string
	for i := range t.NumField() {
		if k, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); k != "" {
			keys = append(keys, k)
		}
	}
	return keys
}

// suggest returns the known key closest to key (a typo of at most two
// edits, or one that differs only in case, '-' or '_'), or "".
func suggest(key string, known []string) string {
	norm := func(s string) string { return strings.ReplaceAll(strings.ToLower(s), "-", "_") }
	best, bestD := "", 3
	for _, k := range known {
		if norm(k) == norm(key) {
			return k
		}
		if d := editDistance(key, k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the Damerau-Levenshtein (optimal string alignment)
// distance between a and b.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// pathAt returns the field path ("allow[1].hosts") of the deepest entry of
// the document n that holds line, and that entry's value node.
func pathAt(n *yaml.Node, line int) (string, *yaml.Node) {
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		return pathAt(n.Content[0], line)
	}
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			end := math.MaxInt
			if i+2 < len(n.Content) {
				end = n.Content[i+2].Line
			}
			if line < k.Line || line >= end {
				continue
			}
			if line == k.Line && (v.Line == line || v.Kind == yaml.ScalarNode) {
				return k.Value, v
			}
			sub, leaf := pathAt(v, line)
			if sub == "" {
				return k.Value, leaf
			}
			if strings.HasPrefix(sub, "[") {
				return k.Value + sub, leaf
			}
			return k.Value + "." + sub, leaf
		}
	case yaml.SequenceNode:
		for i, item := range n.Content {
			end := math.MaxInt
			if i+1 < len(n.Content) {
				end = n.Content[i+1].Line
			}
			if line < item.Line || line >= end {
				continue
			}
			sub, leaf := pathAt(item, line)
			if sub == "" {
				return "[" + strconv.Itoa(i) + "]", leaf
			}
			return "[" + strconv.Itoa(i) + "]." + sub, leaf
		}
	}
	return "", n
}

// unmarshalRE parses yaml.v3's type errors.
var unmarshalRE = regexp.MustCompile("^cannot unmarshal !!(\\w+)(?: `(.*)`)? into (\\S+)$")

// typeHint says what shape a value should have, for a type error of
// yaml.v3 ("cannot unmarshal !!str `x` into []policy.at[string]").
func typeHint(got, into string, leaf *yaml.Node) string {
	example := "x"
	if leaf != nil && leaf.Kind == yaml.ScalarNode && leaf.Value != "" {
		example = leaf.Value
	}
	switch {
	case strings.HasPrefix(into, "[]policy.raw"):
		return "want a list of entries (lines starting with \"- \")"
	case strings.HasPrefix(into, "[]"):
		return fmt.Sprintf("want a list, e.g. [%s]", example)
	case strings.HasPrefix(into, "policy.raw"):
		return "want a section of keys (key: value), not a " + kindWord(got)
	case strings.Contains(into, "bool"):
		return "want true or false, not a " + kindWord(got)
	case strings.Contains(into, "int"):
		return "want a whole number, not a " + kindWord(got)
	default:
		return "want a single value, not a " + kindWord(got)
	}
}

func kindWord(tag string) string {
	switch tag {
	case "seq":
		return "list"
	case "map":
		return "section"
	case "str":
		return "string"
	case "int", "float":
		return "number"
	}
	return tag
}
