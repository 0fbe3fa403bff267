package proxy

import (
	"flag"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/testutil"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/ from what the code writes now")

// TestDecisionLineGolden holds the decision line, the record users and
// SIEMs parse, to testdata/decisions.golden: keys, their order, levels and
// values for an allow, a high-risk denial, a no-rule denial, a page-type
// denial and an upstream failure. Only the time, the origin's random port
// and byte counts (placeholders) are masked. A change to the line is a
// contract change: rerun with -update and say why in the commit.
func TestDecisionLineGolden(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	port := h.plain.port()
	requests := []struct{ method, url string }{
		{"GET", "http://allowed.test:" + port + "/golden/allowed?q=1"},
		{"GET", "http://meta.test:" + port + "/golden/latest/meta-data/"},
		{"GET", "http://unlisted.test:" + port + "/golden/unlisted"},
		{"POST", "http://docs.test:" + port + "/golden/login"},
		{"GET", "http://allowed.test:1/golden/unreachable"},
	}
	var lines []string
	for _, r := range requests {
		h.do(r.method, r.url, strings.NewReader(""), nil)
		path := r.url[strings.Index(r.url[len("http://"):], "/")+len("http://"):]
		path, _, _ = strings.Cut(path, "?")
		line, err := h.logs.Wait(10*time.Second, nil, `"msg":"decision"`, `"path":"`+path+`"`)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, maskDecisionLine(line, port))
	}
	testutil.Golden(t, filepath.Join("testdata", "decisions.golden"), strings.Join(lines, "\n")+"\n", *update)
}

var (
	goldenTime  = regexp.MustCompile(`"time":"[^"]*",`)
	goldenBytes = regexp.MustCompile(`"(bytes_in|bytes_out|bytes)":[1-9][0-9]*`)
)

func maskDecisionLine(line, port string) string {
	line = goldenTime.ReplaceAllString(line, "")
	line = strings.ReplaceAll(line, `"port":`+port+`,`, `"port":"<origin>",`)
	return goldenBytes.ReplaceAllString(line, `"$1":"<n>"`)
}
