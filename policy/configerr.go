package policy

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// This file turns a config yaml.v3 refused into what a person fixing the
// file needs: the field path with the rule's index ("allow[1].hosts"), the
// key they probably meant, and the shape a value should have. The errors
// are found by walking the document's nodes beside the raw config's Go
// types (nodeErrors), so each comes with its node's own line and the
// field's own type; yaml.v3's message text is read only for what has no
// node (a syntax error's line) or what the walk does not know.

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

// nodeErrors walks the document n beside the Go type t (the raw config)
// and reports what the strict decoder refuses, each at its node's line:
// a key t does not have (with the known key it probably meant), a key
// given twice, and a value of the wrong shape for its field (a list where
// one value goes, a word where a number goes, ...).
func nodeErrors(file string, n *yaml.Node, t reflect.Type) ConfigErrors {
	w := nodeWalk{file: file}
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return nil
		}
		n = n.Content[0]
	}
	w.check(n, t, "", 0)
	return w.errs
}

type nodeWalk struct {
	file string
	errs ConfigErrors
}

// maxWalkDepth bounds the walk: the raw types are a few levels deep, and
// aliases could otherwise make a cycle.
const maxWalkDepth = 32

func (w *nodeWalk) add(line int, field, msg string) {
	w.errs = append(w.errs, &ConfigError{File: w.file, Line: line, Field: field, Msg: msg})
}

func (w *nodeWalk) check(n *yaml.Node, t reflect.Type, path string, depth int) {
	if depth > maxWalkDepth {
		return
	}
	for n.Kind == yaml.AliasNode && n.Alias != nil && depth < maxWalkDepth {
		n, depth = n.Alias, depth+1
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // an empty value leaves the field unset
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if v, ok := atValue(t); ok {
		t = v
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			w.add(n.Line, fieldOr(path), "want a section of keys (key: value), not a "+nodeWord(n))
			return
		}
		w.mapping(n, t, path, depth)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			w.add(n.Line, fieldOr(path), listHint(t, n))
			return
		}
		for i, item := range n.Content {
			w.check(item, t.Elem(), path+"["+strconv.Itoa(i)+"]", depth+1)
		}
	default:
		if n.Kind != yaml.ScalarNode {
			w.add(n.Line, fieldOr(path), "want a single value, not a "+nodeWord(n))
			return
		}
		if err := n.Decode(reflect.New(t).Interface()); err != nil {
			w.add(n.Line, fieldOr(path), scalarHint(t, n))
		}
	}
}

// mapping checks the keys of the section n against the struct t.
func (w *nodeWalk) mapping(n *yaml.Node, t reflect.Type, path string, depth int) {
	fields := map[string]reflect.Type{}
	var known []string
	for i := range t.NumField() {
		if k, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); k != "" && k != "-" {
			fields[k] = t.Field(i).Type
			known = append(known, k)
		}
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Tag == "!!merge" {
			continue // merges and complex keys: yaml.v3's own message stands
		}
		if first, dup := seen[k.Value]; dup {
			w.add(k.Line, fieldOr(path), fmt.Sprintf("key %q is set twice (first at line %d)", k.Value, first))
			continue
		}
		seen[k.Value] = k.Line
		ft, ok := fields[k.Value]
		if !ok {
			msg := fmt.Sprintf("unknown key %q", k.Value)
			if s := suggest(k.Value, known); s != "" {
				msg += fmt.Sprintf(": did you mean %q?", s)
			}
			w.add(k.Line, fieldOr(path), msg)
			continue
		}
		sub := k.Value
		if path != "" {
			sub = path + "." + k.Value
		}
		w.check(v, ft, sub, depth+1)
	}
}

// atValue reports whether t is at[T] (a value with its line) and gives T.
func atValue(t reflect.Type) (reflect.Type, bool) {
	if t.Kind() != reflect.Struct || t.PkgPath() != reflect.TypeFor[at[int]]().PkgPath() || !strings.HasPrefix(t.Name(), "at[") {
		return nil, false
	}
	f, ok := t.FieldByName("V")
	return f.Type, ok
}

func fieldOr(path string) string {
	if path == "" {
		return "top level"
	}
	return path
}

// listHint says what a list field wants, for a value that is not a list.
func listHint(t reflect.Type, n *yaml.Node) string {
	e := t.Elem()
	for e.Kind() == reflect.Pointer {
		e = e.Elem()
	}
	if _, isAt := atValue(e); e.Kind() == reflect.Struct && !isAt {
		return "want a list of entries (lines starting with \"- \")"
	}
	example := "x"
	if n.Kind == yaml.ScalarNode && n.Value != "" {
		example = n.Value
	}
	return fmt.Sprintf("want a list, e.g. [%s]", example)
}

// scalarHint says what a scalar field of type t wants, for a value it
// cannot take.
func scalarHint(t reflect.Type, n *yaml.Node) string {
	switch t.Kind() {
	case reflect.Bool:
		return "want true or false, not a " + nodeWord(n)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if n.ShortTag() == "!!int" || n.ShortTag() == "!!float" && strings.Trim(n.Value, "+-0123456789_") == "" {
			return fmt.Sprintf("%q: want a whole number of at most %d bits", n.Value, t.Bits())
		}
		return "want a whole number, not a " + nodeWord(n)
	}
	return "want a single value, not a " + nodeWord(n)
}

// nodeWord names the kind of value n is, as a person reads the file.
func nodeWord(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "list"
	case yaml.MappingNode:
		return "section"
	}
	switch n.ShortTag() {
	case "!!int", "!!float":
		return "number"
	case "!!bool":
		return "true/false value"
	case "!!str":
		return "string"
	}
	return strings.TrimPrefix(n.ShortTag(), "!!")
}
