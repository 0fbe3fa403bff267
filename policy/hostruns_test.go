package policy

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
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
	f.Fuzz(func(t *testing.T, cfg, extra string) {
		data := []byte(cfg + extra)
		got, err := decodeCut(data, 2)
		if err != nil {
			return
		}
		want, err := decodeWhole(data)
		if err != nil {
			t.Fatalf("the cut decodes, the whole text does not: %v", err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("the cut decodes differently:\n got %+v\nwant %+v", got, want)
		}
	})
}
