package tools

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestRender(t *testing.T) {
	for _, tc := range []struct {
		name, ct, body string
		limit          int
		want           string // the whole result, or with a "~" prefix a substring
	}{
		{"html", "text/html; charset=utf-8", "<h1>Title</h1><p>a <a href=\"/x\">link</a></p>", 1000, "# Title\n\na [link](http://site.example/x)"},
		{"html sniffed", "", "<html><body><p>hi</p></body></html>", 1000, "hi"},
		{"script dropped", "text/html", "<p>a</p><script>steal()</script>", 1000, "a"},
		{"plain", "text/plain", "just text", 1000, "just text"},
		{"json", "application/json", `{"a":1}`, 1000, `{"a":1}`},
		{"problem json", "application/problem+json", `{"a":1}`, 1000, `{"a":1}`},
		{"bad utf-8", "text/plain", "a\xffb", 1000, "a\uFFFDb"},
		{"binary", "application/octet-stream", "\x00\x01\x02", 1000, "[egressd: 3 bytes of application/octet-stream: binary content is not shown]"},
		{"image", "image/png", "\x89PNG", 1000, "~binary content is not shown"},
		{"clipped", "text/plain", "0123456789", 4, "0123"},
		{"clipped on a rune", "text/plain", "aé", 2, "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := render(tc.ct, []byte(tc.body), "http://site.example/page", tc.limit)
			if want, sub := strings.CutPrefix(tc.want, "~"); sub && !strings.Contains(got, want) || !sub && got != tc.want {
				t.Errorf("render(%q, %q) = %q, want %q", tc.ct, tc.body, got, tc.want)
			}
		})
	}
}

// FuzzRender: whatever a site sends, the text is valid UTF-8 within the
// limit, and rendering does not panic.
func FuzzRender(f *testing.F) {
	f.Add("text/html", []byte("<h1>x</h1><table><tr><td>a</td></tr></table>"), 50)
	f.Add("", []byte("<!doctype html><p>é"), 3)
	f.Add("text/plain; charset=latin1", []byte("a\xff\xfe"), 2)
	f.Add("text/html", []byte(strings.Repeat("<div>", 2000)), 100)
	f.Fuzz(func(t *testing.T, ct string, body []byte, limit int) {
		if limit <= 0 || limit > 1<<16 || len(body) > 1<<16 {
			t.Skip()
		}
		got := render(ct, body, "http://site.example/", limit)
		if len(got) > limit && !strings.HasPrefix(got, "[egressd: ") {
			t.Fatalf("%d bytes over the limit %d", len(got), limit)
		}
		if !utf8.ValidString(got) {
			t.Fatalf("invalid UTF-8: %q", got)
		}
	})
}

func TestCapture(t *testing.T) {
	c := newCapture(5)
	n, err := c.Write([]byte("abc"))
	if n != 3 || err != nil {
		t.Fatalf("first write: %d %v", n, err)
	}
	n, err = c.Write([]byte("defg"))
	if n != 2 || err != errFull || !c.truncated || c.buf.String() != "abcde" || c.code() != 200 {
		t.Fatalf("second write: %d %v truncated %v %q %d", n, err, c.truncated, c.buf.String(), c.code())
	}
}
