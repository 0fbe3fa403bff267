package policy

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"reflect"
	"strconv"
	"strings"
	"unsafe"

	"go.yaml.in/yaml/v3"
)

// A million hosts inline in the YAML cost most of a policy's load in the
// YAML parser: yaml.v3 builds a node of a few hundred bytes for every entry
// before anything is decoded. A long run of entries that are each nothing
// but a host name on its own line is cut out of the text before the parser
// sees it (one placeholder entry and blank lines keep every line number),
// and put back into the decoded config. The parser still parses the whole
// config; the cut is taken only when every placeholder comes back exactly
// once, as an entry of a `hosts:` list on the line it was put on, and
// nowhere else, and the config has no alias (yaml.v3's alias budget
// counts the nodes the cut leaves out). Any other outcome (a run inside a
// block scalar, an alias, a syntax error) decodes the text whole, as
// before.

// minHostRun: shorter lists are left to the parser.
const minHostRun = 64

// hostRun is one cut run: the placeholder that stands for it, and its
// entries with their lines.
type hostRun struct {
	placeholder string
	line        int
	hosts       []at[string]
}

// cutHostRuns returns data with each run of at least minRun lines of
// the form `<spaces>- <host>` (one indentation) replaced by the entry
// `<spaces>- <placeholder>` and blank lines, and the runs; nil runs when
// there is none. A host is a plain scalar of letters, digits, '.', '-' and
// '_' (not "null", which YAML reads as no value), or such a string in
// quotes, where '*' is allowed too: exactly the scalars whose value is
// their text.
func cutHostRuns(data []byte, nonce string, minRun int) ([]byte, []hostRun) {
	var (
		out     []byte
		runs    []hostRun
		text    = unsafe.String(unsafe.SliceData(data), len(data)) // the hosts are slices of it: data must not change
		lineNo  = 1
		runFrom = -1 // offset of the current run's first line
		runInd  = -1
		runLine int
		hosts   []at[string] // every run's entries, back to back; the runs are slices of it
		run     int          // where the current run starts in hosts
		outCap  int
	)
	flush := func(end int) {
		if n := len(hosts) - run; n >= minRun {
			if out == nil {
				out = make([]byte, 0, outCap)
				out = append(out, data[:runFrom]...)
			}
			ph := "egressd-hosts-" + nonce + "-" + strconv.Itoa(len(runs))
			out = append(out, strings.Repeat(" ", runInd)+"- "+ph+"\n"...)
			out = append(out, strings.Repeat("\n", n-1)...)
			runs = append(runs, hostRun{placeholder: ph, line: runLine, hosts: hosts[run:len(hosts):len(hosts)]})
		} else {
			if out != nil {
				out = append(out, data[runFrom:end]...)
			}
			hosts = hosts[:run]
		}
		run, runFrom, runInd = len(hosts), -1, -1
	}
	for off := 0; off < len(data); lineNo++ {
		end := bytes.IndexByte(data[off:], '\n')
		next := off + end + 1
		if end < 0 {
			next = len(data)
		}
		line := data[off:next]
		ind, v0, v1, ok := hostRunLine(line)
		if ok && runFrom >= 0 && ind != runInd { // a run at another indentation starts here
			flush(off)
		}
		if ok {
			if runFrom < 0 {
				runFrom, runInd, runLine = off, ind, lineNo
				if hosts == nil { // room for every host line, in one allocation
					n, size := countHostRunLines(data[off:])
					hosts = make([]at[string], 0, n)
					// and for the text, should every host line be cut:
					// a line each, a placeholder a run
					outCap = len(data) - size + n + (n/max(minRun, 1)+1)*(runInd+48)
				}
			}
			hosts = append(hosts, at[string]{V: text[off+v0 : off+v1], Line: lineNo})
		} else {
			if runFrom >= 0 {
				flush(off)
			}
			if out != nil {
				out = append(out, line...)
			}
		}
		off = next
	}
	if runFrom >= 0 {
		flush(len(data))
	}
	if len(runs) == 0 {
		return data, nil
	}
	return out, runs
}

// countHostRunLines counts the lines of data that hostRunLine matches,
// and their bytes: the room the cut needs (a count of all lines overstated
// it by 24 bytes a blank or comment line).
func countHostRunLines(data []byte) (n, size int) {
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line = data[:i+1]
		}
		if _, _, _, ok := hostRunLine(line); ok {
			n++
			size += len(line)
		}
		data = data[len(line):]
	}
	return n, size
}

// hostRunLine matches one line `<spaces>- <host><spaces>` with an optional
// "\r" before the "\n" and returns the indentation and where the host's
// value starts and ends in the line.
func hostRunLine(line []byte) (ind, v0, v1 int, ok bool) {
	n := len(line)
	if n > 0 && line[n-1] == '\n' {
		n--
	}
	if n > 0 && line[n-1] == '\r' {
		n--
	}
	for n > 0 && line[n-1] == ' ' {
		n--
	}
	for ind < n && line[ind] == ' ' {
		ind++
	}
	if ind+2 >= n || line[ind] != '-' || line[ind+1] != ' ' {
		return 0, 0, 0, false
	}
	v0, v1, ok = hostRunValue(line, ind+2, n)
	return ind, v0, v1, ok
}

// hostRunValue checks the scalar line[v0:v1] and returns where its value
// is: inside the quotes of a quoted one.
func hostRunValue(line []byte, v0, v1 int) (int, int, bool) {
	star := false // '*' only in quotes: bare, it starts an alias
	if q := line[v0]; q == '"' || q == '\'' {
		if line[v1-1] != q || v1-v0 < 3 {
			return 0, 0, false
		}
		v0, v1, star = v0+1, v1-1, true
	} else if v := string(line[v0:v1]); line[v0] == '.' || line[v0] == '-' || v == "null" || v == "Null" || v == "NULL" {
		return 0, 0, false
	}
	for _, c := range line[v0:v1] {
		if !hostRunByte(c) && (c != '*' || !star) {
			return 0, 0, false
		}
	}
	return v0, v1, true
}

func hostRunByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '-' || c == '_'
}

// errNoCut: the cut text does not decode to the same config; decode the
// text whole.
var errNoCut = errors.New("host runs cannot be put back")

// decodeCut decodes data with its long host runs cut out and put back;
// errNoCut when there is none, or when the cut would not decode to
// exactly what the whole text does.
func decodeCut(data []byte, minRun int) (*rawConfig, error) {
	var b [8]byte
	rand.Read(b[:])
	cut, runs := cutHostRuns(data, hex.EncodeToString(b[:]), minRun)
	if runs == nil {
		return nil, errNoCut
	}
	var raw rawConfig
	dec := yaml.NewDecoder(bytes.NewReader(cut))
	dec.KnownFields(true)
	if err := dec.Decode(&raw); err != nil {
		return nil, errNoCut // the whole text gives the error its full form
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errNoCut
	}
	// yaml.v3 refuses a document decoded mostly through aliases (its guard
	// against alias bombs), counting every node it decodes; the cut decodes
	// one node a run, so where aliases are it could pass what the whole
	// text fails. An alias needs a '*'; only then is the text parsed again.
	if bytes.IndexByte(cut, '*') >= 0 && hasAlias(cut) {
		return nil, errNoCut
	}
	byName := make(map[string]*hostRun, len(runs))
	for i := range runs {
		byName[runs[i].placeholder] = &runs[i]
	}
	// Every placeholder must be in the decoded config once, in all of it.
	if countStrings(reflect.ValueOf(&raw).Elem(), byName) != len(runs) {
		return nil, errNoCut
	}
	used := 0
	expand := func(list []at[string]) []at[string] {
		if r := byName[list0(list)]; len(list) == 1 && r != nil && list[0].Line == r.line {
			used++
			return r.hosts // the whole list was the run: no copy
		}
		var out []at[string]
		for j, h := range list {
			r := byName[h.V]
			if r != nil && h.Line == r.line {
				if out == nil {
					out = append(make([]at[string], 0, len(list)+len(r.hosts)), list[:j]...)
				}
				out = append(out, r.hosts...)
				used++
			} else if out != nil {
				out = append(out, h)
			}
		}
		if out == nil {
			return list
		}
		return out
	}
	for i := range raw.Allow {
		raw.Allow[i].Hosts = expand(raw.Allow[i].Hosts)
	}
	raw.Deny.Hosts = expand(raw.Deny.Hosts)
	if used != len(runs) {
		return nil, errNoCut
	}
	return &raw, nil
}

// hasAlias reports whether the YAML text data holds an alias (or does not
// parse).
func hasAlias(data []byte) bool {
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil {
		return true
	}
	var walk func(n *yaml.Node) bool
	walk = func(n *yaml.Node) bool {
		if n.Kind == yaml.AliasNode {
			return true
		}
		for _, c := range n.Content {
			if walk(c) {
				return true
			}
		}
		return false
	}
	return walk(&doc)
}

// countStrings counts the strings in v that are placeholders.
func countStrings(v reflect.Value, placeholders map[string]*hostRun) int {
	n := 0
	switch v.Kind() {
	case reflect.String:
		if placeholders[v.String()] != nil {
			n++
		}
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			n += countStrings(v.Elem(), placeholders)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			n += countStrings(v.Field(i), placeholders)
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			n += countStrings(v.Index(i), placeholders)
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			n += countStrings(it.Key(), placeholders) + countStrings(it.Value(), placeholders)
		}
	}
	return n
}

func list0(list []at[string]) string {
	if len(list) == 0 {
		return ""
	}
	return list[0].V
}
