package classify

import "testing"

// TestUnicodeAndUploadPages: issue 12 item 7(b) and (c). Upload pages
// reached by GET on code hosts and model hubs, and login words spelled in
// compatibility forms or confusables, were reads.
func TestUnicodeAndUploadPages(t *testing.T) {
	cases := []struct {
		url  string
		want PageType
	}{
		{"https://github.com/octocat/hello-world/upload/main", PageUpload},
		{"https://github.com/octocat/hello-world/upload/main/docs", PageUpload},
		{"https://huggingface.co/openai-community/gpt2/upload/main", PageUpload},
		{"https://huggingface.co/datasets/owner/data/upload/main", PageUpload},
		{"https://gitlab.com/group/project/-/upload", PageUpload},
		{"https://example.com/ｌｏｇｉｎ", PageLogin},
		{"https://example.com/%EF%BD%8C%EF%BD%8F%EF%BD%87%EF%BD%89%EF%BD%8E", PageLogin},
		{"https://example.com/log%C4%B1n", PageLogin},
		{"https://example.com/%D0%B0dmin", PageAdmin},         // Cyrillic а
		{"https://example.com/sign%E2%80%90in", PageLogin},    // U+2010 hyphen
		{"https://example.com/%E2%84%AAeys/new", PagePosting}, // Kelvin sign K
		{"https://example.com/ch%D0%B5ckout", PagePayment},    // Cyrillic е
		{"https://github.com/octocat/hello-world/blob/main/upload.go", PageRead},
		{"https://example.com/caf%C3%A9/menu", PageRead},
	}
	for _, c := range cases {
		r := pageRequest("GET", c.url, "", 0)
		if got, why := ClassifyPage(r); got != c.want {
			t.Errorf("ClassifyPage(GET %s) = %v (%s), want %v", c.url, got, why, c.want)
		}
	}
}
