package tools

import (
	"fmt"
	"mime"
	"net/http"
	"strings"
	"unicode/utf8"

	htmltomarkdown "github.com/JohannesKaufmann/html-to-markdown/v2"
	"github.com/JohannesKaufmann/html-to-markdown/v2/converter"
)

// render turns a response body into text a model reads: HTML as
// Markdown (links resolved against base), text and structured text as
// they are (valid UTF-8), anything else as a one-line note. The result is
// at most limit bytes.
func render(contentType string, body []byte, base string, limit int) string {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil || mt == "" {
		mt, _, _ = mime.ParseMediaType(http.DetectContentType(body))
	}
	var out string
	switch {
	case mt == "text/html" || mt == "application/xhtml+xml":
		// The converter passes bytes that are not UTF-8 through: make the
		// page valid first, as text is (a JSON tool result carries only
		// UTF-8, and FuzzRender found "<h1>\xb1" coming out as is).
		page := strings.ToValidUTF8(string(body), "\uFFFD")
		md, err := htmltomarkdown.ConvertString(page, converter.WithDomain(base))
		if err != nil {
			out = fmt.Sprintf("[egressd: the HTML could not be converted (%v); raw text follows]\n%s", err, page)
		} else {
			out = md
		}
	case textual(mt):
		out = strings.ToValidUTF8(string(body), "\uFFFD")
	default:
		return fmt.Sprintf("[egressd: %d bytes of %s: binary content is not shown]", len(body), mt)
	}
	return clip(out, limit)
}

// textual reports whether a media type is text a model can read as is.
func textual(mt string) bool {
	switch {
	case strings.HasPrefix(mt, "text/"), strings.HasSuffix(mt, "+json"), strings.HasSuffix(mt, "+xml"):
		return true
	}
	switch mt {
	case "application/json", "application/xml", "application/javascript", "application/x-javascript", "application/x-ndjson", "application/yaml", "application/toml":
		return true
	}
	return false
}

// clip cuts s to at most n bytes on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s[len(s)-1:]) {
		r, size := utf8.DecodeLastRuneInString(s)
		if r != utf8.RuneError || size > 1 {
			break
		}
		s = s[:len(s)-1]
	}
	return s
}
