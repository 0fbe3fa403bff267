package classify

import (
	"bufio"
	"os"
	"strings"
	"testing"
)

// corpusCase is one labelled real request of testdata/corpus.txt.
type corpusCase struct {
	line            int
	label           PageType
	method, url, ct string
}

func loadCorpus(t *testing.T) []corpusCase {
	t.Helper()
	f, err := os.Open("testdata/corpus.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []corpusCase
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" || l[0] == '#' {
			continue
		}
		fields := strings.SplitN(l, " ", 4)
		if len(fields) < 3 {
			t.Fatalf("corpus.txt:%d: want <label> <METHOD> <URL> [<content-type>]", n)
		}
		label, ok := ParsePageType(fields[0])
		if !ok {
			t.Fatalf("corpus.txt:%d: unknown label %q", n, fields[0])
		}
		c := corpusCase{line: n, label: label, method: fields[1], url: fields[2]}
		if len(fields) == 4 {
			c.ct = fields[3]
		}
		out = append(out, c)
	}
	return out
}

// TestCorpus classifies every request of the corpus as a rule without
// read_posts would, and holds the classifier to at least 97% right and no
// write called a read or download (issue 12 item 7). It logs each mistake.
func TestCorpus(t *testing.T) {
	cases := loadCorpus(t)
	if len(cases) < 400 {
		t.Fatalf("corpus has %d requests, want at least 400", len(cases))
	}
	right, leaks := 0, 0
	for _, c := range cases {
		r := pageRequest(c.method, c.url, c.ct, 0)
		r.ReadPosts = nil
		got, why := ClassifyPage(r)
		switch {
		case got == c.label:
			right++
		case c.label.IsWrite() && !got.IsWrite():
			leaks++
			t.Errorf("corpus.txt:%d: WRITE AS READ: %s %s = %v (%s), want %v", c.line, c.method, c.url, got, why, c.label)
		default:
			t.Logf("corpus.txt:%d: mistake: %s %s = %v (%s), want %v", c.line, c.method, c.url, got, why, c.label)
		}
	}
	acc := float64(right) / float64(len(cases))
	t.Logf("corpus: %d requests, %d right (%.1f%%), %d writes classified as reads", len(cases), right, 100*acc, leaks)
	if acc < 0.97 {
		t.Errorf("accuracy %.1f%%, want at least 97%%", 100*acc)
	}
}
