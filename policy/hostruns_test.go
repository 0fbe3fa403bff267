package policy

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// decodeWhole is what the parser makes of data without a cut.
func decodeWhole(data []byte) (*rawConfig, error) {
	var raw rawConfig
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&raw); err != nil {
		return nil, err
	}
	return &raw, nil
}

// hostLines is n entries `<ind>- hostK.example` (some quoted).
func hostLines(ind string, n int, from int) string {
	var b strings.Builder
	for k := from; k < from+n; k++ {
		switch k % 3 {
		case 0:
			fmt.Fprintf(&b, "%s- h%d.example.com\n", ind, k)
		case 1:
			fmt.Fprintf(&b, "%s- \"*.w%d.example.org\"\n", ind, k)
		default:
			fmt.Fprintf(&b, "%s- 'H%d.Example.NET'  \n", ind, k)
		}
	}
	return b.String()
}

// TestDecodeCut: where the cut is taken it decodes to exactly what the
// whole text does (values and lines); where a placeholder could not come
// back exactly once as a hosts entry, the cut is refused.
func TestDecodeCut(t *testing.T) {
	run := hostLines("      ", 100, 0)
	for _, tt := range []struct {
		name, cfg string
		cut       bool
	}{
		{"two rules and deny", "version: 1\nallow:\n  - name: a\n    hosts:\n" + run + "    ports: [443]\n  - name: b\n    hosts:\n" + hostLines("    ", 70, 500) + "deny:\n  hosts:\n" + hostLines("  ", 80, 900), true},
		{"zero indentation", "version: 1\ndeny:\n  hosts:\n" + hostLines("  ", 70, 0) + "allow:\n- name: a\n  hosts:\n" + hostLines("  ", 70, 100), true},
		{"split by comments and other lines", "version: 1\nallow:\n  - hosts:\n" + hostLines("      ", 66, 0) + "      # a comment\n" + hostLines("      ", 65, 66) + "      - x.example # trailing\n" + hostLines("      ", 64, 200), true},
		{"CRLF, no final newline", strings.ReplaceAll("version: 1\nallow:\n  - hosts:\n"+run, "\n", "\r\n") + "      - last.example", true},
		{"short list", "version: 1\nallow:\n  - hosts:\n" + hostLines("      ", 10, 0), false},
		{"in a block scalar", "version: 1\nallow:\n  - name: a\n    message: |\n" + run + "    hosts: [a.example]\n", false},
		{"in a quoted string", "version: 1\nallow:\n  - name: \"x\n" + run + "      y\"\n    hosts: [a.example]\n", false},
		{"aliased elsewhere", "version: 1\nallow:\n  - hosts: &h\n" + run + "    paths: *h\n", false},
		{"aliased twice", "version: 1\nallow:\n  - hosts: &h\n" + run + "  - hosts: *h\n", false},
		{"aliased once from a key yaml skips", "version: 1\n~: &h\n" + run + "allow:\n  - hosts: *h\n", false},
		{"an alias elsewhere", "version: 1\nallow:\n  - name: &n a\n    hosts:\n" + run + "  - name: *n\n    hosts: [\"*.b.example\"]\n", false},
		{"in another key", "version: 1\nallow:\n  - paths:\n" + run + "    hosts: [a.example]\n", false},
		{"continued plain scalar", "version: 1\nallow:\n  - hosts:\n" + run + "        more.example\n", false},
		{"syntax error", "version: 1\nallow:\n  - hosts:\n" + run + "    ports: [443\n", false},
		{"unknown key", "version: 1\nallow:\n  - hosts:\n" + run + "    prots: [443]\n", false},
		{"in a flow sequence", "version: 1\nallow:\n  - hosts: [\n" + run + "    ]\n", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeCut([]byte(tt.cfg), minHostRun)
			if !tt.cut {
				if !errors.Is(err, errNoCut) {
					t.Fatalf("cut taken (%v)", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("cut refused: %v", err)
			}
			want, err := decodeWhole([]byte(tt.cfg))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("the cut decodes differently:\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

// TestHostRunErrorsKeepLines: a bad host in a cut run is reported on its
// own line, as without the cut.
func TestHostRunErrorsKeepLines(t *testing.T) {
	cfg := "version: 1\nallow:\n  - name: big\n    hosts:\n" + hostLines("      ", 100, 0) + "      - bad..example\n" + hostLines("      ", 100, 100) + "    ports: [nope]\n"
	_, err := Parse(strings.NewReader(cfg), "big.yaml")
	var ce ConfigErrors
	if !errors.As(err, &ce) {
		t.Fatalf("%v", err)
	}
	lines := map[int]bool{}
	for _, e := range ce {
		lines[e.Line] = true
	}
	if !lines[105] || !lines[206] {
		t.Errorf("errors on lines %v, want 105 (the bad host) and 206 (ports): %v", lines, err)
	}
}

func FuzzDecodeCut(f *testing.F) {
	f.Add("version: 1\nallow:\n  - hosts:\n    - a.example\n    - \"*.b.example\"\n    - c.example\n", "    - d.example\n")
	f.Add("version: 1\nallow:\n  - message: |\n    - a.example\n    - b.example\n    hosts: [x.example]\n", "")
	f.Add("version: 1\nallow:\n  - hosts: &h\n    - a.example\n    - b.example\n    paths: *h\n", "    - null\n")
	for _, seed := range cutSeeds {
		f.Add(seed, "")
	}
	f.Fuzz(func(t *testing.T, cfg, extra string) {
		data := []byte(cfg + extra)
		for _, minRun := range []int{1, 2} { // 1: every host line alone is cut too
			got, err := decodeCut(data, minRun)
			if err != nil {
				continue
			}
			want, err := decodeWhole(data)
			if err != nil {
				t.Fatalf("minRun %d: the cut decodes, the whole text does not: %v", minRun, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("minRun %d: the cut decodes differently:\n got %+v\nwant %+v", minRun, got, want)
			}
		}
	})
}

// cutSeeds are texts where a run of two or more host lines sits next to
// YAML that could change what it means: directives, document markers,
// tags, anchors and merges, odd line breaks and encodings, flow and
// complex keys, indentation, block scalars, comments, scalars of other
// types.
var cutSeeds = []string{
	"%YAML 1.1\n---\nversion: 1\nallow:\n  - hosts:\n    - yes\n    - on\n...\n",
	"%TAG !e! tag:example.com,2000:\n--- !e!x\nversion: 1\nallow:\n  - hosts: !e!h\n    - a.example\n    - b.example\n---\n",
	"version: 1\nallow:\n  - hosts:\n    - a.example\n    - b.example\n---\nversion: 1\n",
	"--- version: 1\nallow:\n  - hosts: !!seq\n    - a.example\n    - b.example\n...",
	"version: 1\nallow:\n  - hosts:\n    - !!str\n    - a.example\n    - b.example\n",
	"version: 1\nallow:\n  - hosts:\n    - !!str\n      - a.example\n      - b.example\n",
	"version: 1\nallow:\n  - hosts:\n    - &x\n    - a.example\n    - b.example\n  - hosts: [*x]\n",
	"version: 1\nallow:\n  - hosts: !!null\n    - a.example\n    - b.example\n",
	"version: 1\nallow:\n  - &r\n    hosts:\n      - a.example\n      - b.example\n  - <<: *r\n    hosts: [x.example]\n",
	"version: 1\nallow:\n  - &r\n    hosts:\n      - a.example\n      - b.example\n  - <<: [*r, *r]\n",
	"version: 1\ndeny: &d\n  hosts:\n    - a.example\n    - b.example\nallow:\n  - <<: *d\n    name: x\n",
	"version: 1\rallow:\r  - hosts:\n    - a.example\n    - b.example\n",
	"version: 1\nallow:\n  - hosts:\n    - a.example\n    - b.example\n\t\n",
	"version: 1\nallow: \u0085  - hosts:\n    - a.example\n    - b.example\n",
	"version: 1 # \u2028\nallow:\n  - hosts:\n    - a.example\n    - b.example\n",
	"\ufeffversion: 1\nallow:\n  - hosts:\n    - a.example\n\ufeff    - b.example\n    - c.example\n    - d.example\n",
	"version: 1\nallow:\n  - hosts:\n    - a.example\n    - b.example\n\x00",
	"\xff\xfev\x00:\x00 \x001\x00\n\x00  - a\n  - b\n",
	"version: 1\nallow: [{hosts: [\n    - a.example\n    - b.example\n  ]}]\n",
	"version: 1\nallow:\n  - ? hosts\n    : - a.example\n      - b.example\n",
	"version: 1\nallow:\n  - ? - a.example\n      - b.example\n    : x\n",
	"version: 1\nallow:\n  - \"hosts\n    \":\n    - a.example\n    - b.example\n",
	"version: 1\nallow:\n- hosts:\n  - a.example\n  - b.example\n- hosts:\n - c.example\n - d.example\n",
	"version: 1\nallow:\n  - message: |2\n      - a.example\n      - b.example\n    hosts: [x.example]\n",
	"version: 1\nallow:\n  - message: >-\n\n    - a.example\n    - b.example\n    hosts: [x.example]\n",
	"version: 1\nallow:\n  - hosts:\n    - x\n      - a.example\n      - b.example\n",
	"version: 1\nallow:\n  - hosts:\n    - a.example\n    - b.example\n      # c\n    # d\n  # e\n# f\n    ports: [\"443\"]\n",
	"version: 1\nallow:\n  - hosts:\n    - Null\n    - ~\n    - true\n    - 0x10\n    - 1e3\n    - .inf\n    - 2001-12-14\n    - 1_000\n    - NULL\n    - nULL\n",
	"version: 1\nallow:\n  - HOSTS:\n    - a.example\n    - b.example\n  - Hosts:\n    - a.example\n",
	"version: 1\nallow:\n  - hosts:\n    - 'a.example'\n    - \"b.example\"\n    - '*'\n    - \"**\"\n",
	"version: 1\nallow:\n  - hosts:\n    - a.example\n    - b.example\n  - hosts:\n    - a.example\n    - b.example\n  - hosts: []\n",
	"version: 1\nsandbox:\n  uids: &u\n    - 1\n    - 2\nallow:\n  - hosts: *u\n",
	"version: 1\nallow:\n  - hosts: &h\n    - a.example\n    - b.example\n  - ~: *h\n",
	"version: 1\nallow:\n  - hosts:\n    - a.example\n    - b.example\n" + strings.Repeat("# long comment ", 200) + "\n",
}

// TestCutAllocatesByHostLines: the cut's room for hosts is sized by the
// lines that can be hosts, not by every line: a config padded with blank
// or comment lines (which the parser skips almost for free) must not make
// the cut allocate more than decoding the whole text does and a copy of
// the text (it was 24 bytes a line more).
func TestCutAllocatesByHostLines(t *testing.T) {
	allocs := func(decode func([]byte) (*rawConfig, error), cfg []byte) uint64 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		if _, err := decode(cfg); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	for _, pad := range []string{"\n", "#\n", "# - x\n"} {
		cfg := []byte("version: 1\nallow:\n  - hosts:\n" + hostLines("      ", 100, 0) + strings.Repeat(pad, 1<<20/len(pad)))
		whole := allocs(decodeWhole, cfg)
		cut := allocs(func(b []byte) (*rawConfig, error) { return decodeCut(b, minHostRun) }, cfg)
		if cut > whole+2*uint64(len(cfg)) {
			t.Errorf("pad %q: the cut of a %d-byte config of 100 hosts allocated %d bytes, the whole text %d", pad, len(cfg), cut, whole)
		}
	}
}

// TestCutKeepsTheAliasBudget: yaml.v3 refuses a document whose decoding is
// mostly alias expansion ("excessive aliasing", its guard against alias
// bombs); the cut decodes one placeholder where the whole text decodes
// every host, so through an alias it would accept what the parser
// refuses. Here the hosts are anchored under a key yaml.v3 skips (~) and
// aliased once into a rule.
func TestCutKeepsTheAliasBudget(t *testing.T) {
	cfg := "version: 1\n~: &h\n" + hostLines("  ", 2000, 0) + "allow:\n  - hosts: *h\n"
	if _, err := decodeWhole([]byte(cfg)); err == nil || !strings.Contains(err.Error(), "excessive aliasing") {
		t.Fatalf("the parser takes the whole text (%v): the test no longer shows the budget", err)
	}
	if _, err := Parse(strings.NewReader(cfg), "alias.yaml"); err == nil || !strings.Contains(err.Error(), "excessive aliasing") {
		t.Errorf("Parse: %v, want the parser's excessive aliasing error", err)
	}
}
