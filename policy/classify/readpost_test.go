package classify

import (
	"strings"
	"testing"
)

// TestReadPostsNeedOptIn: a named read-only POST is a read only where the
// rule opts in; elsewhere it is the write every POST is (issue 12 item 1).
func TestReadPostsNeedOptIn(t *testing.T) {
	cases := []struct{ method, url, ct string }{
		{"POST", "https://acme.atlassian.net/rest/api/2/search", "application/json"},
		{"POST", "https://exfil.example/rest/api/2/search", "application/json"},
		{"POST", "https://exfil.example/x/git-upload-pack", "application/x-git-upload-pack-request"},
		{"POST", "https://huggingface.co/api/models/a/b/paths-info/main", "application/x-www-form-urlencoded"},
	}
	for _, c := range cases {
		r := pageRequest(c.method, c.url, c.ct, 100)
		r.ReadPosts = nil
		if got, why := ClassifyPage(r); !got.IsWrite() {
			t.Errorf("no opt-in: ClassifyPage(%s %s) = %v (%s), want a write", c.method, c.url, got, why)
		}
	}
}

func TestCheckReadPostBody(t *testing.T) {
	long := strings.Repeat("A", 3000)
	cases := []struct {
		signal, body string
		ok           bool
	}{
		{"readpost:jira-search", `{"jql":"project = ABC ORDER BY created","startAt":0,"maxResults":50,"fields":["summary","status"]}`, true},
		{"readpost:jira-search", `{"jql":"project = ABC","nextPageToken":"abc","fields":["*all"],"expand":["names"],"fieldsByKeys":false}`, true},
		{"readpost:jira-search", `not json at all`, false},
		{"readpost:jira-search", `{"jql":"x","exfil":"` + long + `"}`, false},
		{"readpost:jira-search", `{"jql":"` + long + `"}`, false},
		{"readpost:jira-search", `{"jql":"x","jql":"y"}`, false},
		{"readpost:jira-search", `{"jql":"x"} trailing`, false},
		{"readpost:jira-search", `{"fields":["summary","` + long[:100] + `"]}`, false},
		// Paging numbers are integers of at most 10 digits: a number of
		// thousands of digits (or a fraction, an exponent) carried data.
		{"readpost:jira-search", `{"jql":"x","startAt":` + strings.Repeat("7", 5000) + `}`, false},
		{"readpost:jira-search", `{"jql":"x","maxResults":0.31415926535897932384626433832795028841971e-99}`, false},
		{"readpost:jira-search", `{"jql":"x","reconcileIssues":[10001,10002],"startAt":100,"maxResults":1000}`, true},
		{"readpost:hf-paths-info", `paths=config.json&paths=model.safetensors&expand=true`, true},
		{"readpost:hf-paths-info", `paths=config.json&data=` + long, false},
		{"readpost:hf-paths-info", ``, false},
		{"readpost:sonatype-status", ``, true},
		{"readpost:sonatype-status", `x`, false},
		{"readpost:git-upload-pack", "0032want 11f6ad8ec52a2984abaafd7c3b516503785c2072\n00000009done\n", true},
		{"readpost:git-upload-pack", "0010free text!!\n0000", false},
		{"readpost:nope", ``, false},
	}
	for _, c := range cases {
		if ok, why := CheckReadPostBody(c.signal, []byte(c.body)); ok != c.ok {
			t.Errorf("CheckReadPostBody(%s, %.60q) = %v (%s), want %v", c.signal, c.body, ok, why, c.ok)
		}
	}
}

// FuzzReadPostBody: a body a read-only POST check accepts stays within its
// cap, and the body forwarded (CheckedBody's one spelling) passes the same
// check: the server never gets bytes the check did not accept.
func FuzzReadPostBody(f *testing.F) {
	f.Add("readpost:jira-search", []byte(`{"jql":"project = ABC","startAt":0,"maxResults":50,"fields":["summary"]}`))
	f.Add("readpost:jira-search", []byte(`{ "jql" : "a\u0041\ud83d\ude00" }`))
	f.Add("readpost:hf-paths-info", []byte(`paths=config.json&paths=model.safetensors&expand=true`))
	f.Fuzz(func(t *testing.T, signal string, body []byte) {
		e := readPostBySignal(signal)
		if e == nil {
			return
		}
		if ok, _ := CheckReadPostBody(signal, body); !ok {
			return
		}
		if int64(len(body)) > e.MaxBody {
			t.Fatalf("accepted %d bytes over the cap %d", len(body), e.MaxBody)
		}
		fwd, _, err := CheckedBody(e.ContentType, body)
		if err != nil {
			t.Fatalf("accepted body cannot be forwarded: %v", err)
		}
		if ok, why := CheckReadPostBody(signal, fwd); !ok {
			t.Fatalf("forwarded spelling %q of accepted %q fails the check: %s", fwd, body, why)
		}
	})
}
