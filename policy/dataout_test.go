package policy

import (
	"net/http"
	"strings"
	"testing"
)

// Issue 12: what an allowed rule lets out. Each case is a request an agent
// used to carry data out; each must now be refused or classified for what
// it is.

const dataoutConfig = `version: 1
allow:
  - name: docs
    hosts: [docs.example.com, acme.atlassian.net]
    pages: [read]
  - name: default-pages
    hosts: [code.example.com]
  - name: jira
    hosts: [jira.example.com]
    pages: [read]
    read_posts: [jira-search]
  - name: pypi
    hosts: [pypi.example.com]
    mirror: pypi
  - name: files
    hosts: [files.example.com]
    mirror: generic
  - name: git
    hosts: [git.example.com]
    mirror: git
`

func decideReq(t *testing.T, p *Policy, method, url, ct string, n int64) Decision {
	t.Helper()
	tgt, err := ParseURL(url)
	if err != nil {
		t.Fatalf("ParseURL(%q): %v", url, err)
	}
	return p.DecideRequest(&tgt, method, ct, n)
}

// TestReadPostsOnlyWhereOptedIn is item 1: the named read-POSTs were reads
// on every host.
func TestReadPostsOnlyWhereOptedIn(t *testing.T) {
	p := mustParse(t, dataoutConfig)
	cases := []struct {
		name, method, url, ct string
		allow                 bool
	}{
		{"jira search on a read rule without opt-in", "POST", "https://acme.atlassian.net/rest/api/2/search", "application/json", false},
		{"jira-shaped POST on a docs host", "POST", "https://docs.example.com/rest/api/2/search", "application/json", false},
		{"upload-pack POST on default pages", "POST", "https://code.example.com/x/y.git/git-upload-pack", "application/x-git-upload-pack-request", false},
		{"jira search opted in", "POST", "https://jira.example.com/rest/api/2/search", "application/json", true},
		{"upload-pack on the git mirror", "POST", "https://git.example.com/x/y.git/git-upload-pack", "application/x-git-upload-pack-request", true},
	}
	for _, c := range cases {
		d := decideReq(t, p, c.method, c.url, c.ct, 100)
		if d.Allow != c.allow {
			t.Errorf("%s: allow=%v (%s %s %s), want %v", c.name, d.Allow, d.Reason, d.PageType, d.PageSignal, c.allow)
		}
	}
	d := decideReq(t, p, "POST", "https://jira.example.com/rest/api/2/search", "application/json", 100)
	if !d.ReadPost || d.BodyCap <= 0 || d.BodyCap > 64<<10 {
		t.Fatalf("opted-in read POST: ReadPost=%v BodyCap=%d, want a body check", d.ReadPost, d.BodyCap)
	}
	tgt, _ := ParseURL("https://jira.example.com/rest/api/2/search")
	if ok, _ := p.CheckBody(&d, &tgt, "POST", "application/json", []byte(strings.Repeat("\x00exfil", 1000))); ok {
		t.Errorf("opted-in read POST forwards a body that is not a Jira search")
	}
	if ok, why := p.CheckBody(&d, &tgt, "POST", "application/json", []byte(`{"jql":"project = X","maxResults":10}`)); !ok {
		t.Errorf("a real Jira search body refused: %s", why)
	}
	if d.BodyReason() != ReasonBody {
		t.Errorf("body reason %v, want body", d.BodyReason())
	}
}

func TestReadPostsConfig(t *testing.T) {
	for _, cfg := range []string{
		"version: 1\nallow:\n  - hosts: [a.com]\n    read_posts: [jira-serch]\n",
		"version: 1\nallow:\n  - hosts: [a.com]\n    mirror: pypi\n    read_posts: [jira-search]\n",
	} {
		if _, err := Parse(strings.NewReader(cfg), "t.yaml"); err == nil {
			t.Errorf("accepted %q", cfg)
		}
	}
}

// TestHeadBudgets is item 3: headers were forwarded whatever their size.
func TestHeadBudgets(t *testing.T) {
	p := mustParse(t, dataoutConfig)
	big := strings.Repeat("A", 30<<10)
	mk := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Add(kv[i], kv[i+1])
		}
		return h
	}
	cases := []struct {
		name, url string
		h         http.Header
		ok        bool
		drop      []string
	}{
		{"30 KB X-Exfil on a read rule", "https://docs.example.com/guide", mk("X-Exfil", big), false, nil},
		{"normal read", "https://docs.example.com/guide", mk("User-Agent", "curl/8.5.0", "Accept", "*/*"), true, nil},
		{"X-Exfil and Cookie on pypi mirror are dropped", "https://pypi.example.com/simple/requests/", mk("X-Exfil", big, "Cookie", "a=b", "User-Agent", "pip/24.0"), true, []string{"Cookie", "X-Exfil"}},
		{"20 KB User-Agent on a generic mirror", "https://files.example.com/a.tar.gz", mk("User-Agent", big[:20<<10]), false, nil},
		{"proxy auth not counted", "https://docs.example.com/guide", mk("Proxy-Authorization", "Basic "+big[:8000]), true, nil},
	}
	for _, c := range cases {
		d := decideReq(t, p, "GET", c.url, "", 0)
		if !d.Allow {
			t.Fatalf("%s: %s denied: %s", c.name, c.url, d.Reason)
		}
		drop, ok, why := p.CheckHead(&d, c.h)
		if ok != c.ok {
			t.Errorf("%s: ok=%v (%s), want %v", c.name, ok, why, c.ok)
		}
		if c.drop != nil && strings.Join(sorted(drop), ",") != strings.Join(c.drop, ",") {
			t.Errorf("%s: drop %v, want %v", c.name, drop, c.drop)
		}
	}
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// TestQueryBudget is item 3: a read rule forwarded any query string.
func TestQueryBudget(t *testing.T) {
	p := mustParse(t, dataoutConfig)
	d := decideReq(t, p, "GET", "https://docs.example.com/search?q="+strings.Repeat("a", 3000), "", 0)
	if d.Allow || d.Reason != ReasonQueryBudget {
		t.Errorf("3 KB query on a read rule: allow=%v reason=%s, want query-budget", d.Allow, d.Reason)
	}
	if d := decideReq(t, p, "GET", "https://docs.example.com/search?q=context+deadline", "", 0); !d.Allow {
		t.Errorf("short query denied: %s", d.Reason)
	}
}

// TestEveryRequestClassified is item 7(a): denials before the rule check
// reported page_type read.
func TestEveryRequestClassified(t *testing.T) {
	p := mustParse(t, dataoutConfig+"deny:\n  hosts: [upload.pypi.org]\n")
	d := decideReq(t, p, "POST", "https://upload.pypi.org/legacy/", "multipart/form-data; boundary=x", 100)
	if d.Allow || d.PageType != PagePublish {
		t.Errorf("high-risk upload: allow=%v page_type=%s (%s), want deny, publish", d.Allow, d.PageType, d.PageSignal)
	}
	d = decideReq(t, p, "POST", "https://nowhere.example/login", "application/x-www-form-urlencoded", 10)
	if d.PageType != PageLogin {
		t.Errorf("no-rule login: page_type=%s, want login", d.PageType)
	}
}

// TestMethodAsSent is item 7(d): one code path for check and the proxy; a
// lower-case method is not GET.
func TestMethodAsSent(t *testing.T) {
	p := mustParse(t, dataoutConfig)
	if d := decideReq(t, p, "get", "https://docs.example.com/guide", "", 0); d.Allow {
		t.Errorf("lower-case get allowed on a read rule as %s", d.PageType)
	}
}
