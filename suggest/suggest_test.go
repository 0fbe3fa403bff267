package suggest

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/egressd/egressd/policy"
)

func line(id, method, host string, port int, path, page, rule, decision, reason string, highRisk bool) string {
	return fmt.Sprintf(`{"time":"2026-12-01T10:00:00Z","level":"WARN","msg":"decision","identity":%q,"view":%q,"method":%q,"host":%q,"port":%d,"path":%q,"page_type":%q,"rule":%q,"decision":%q,"reason":%q,"high_risk":%v,"status":403}`,
		id, id, method, host, port, path, page, rule, decision, reason, highRisk)
}

var trial = strings.Join([]string{
	line("build", "GET", "pypi.internal.example", 443, "/simple/requests/", "read", "", "deny", "no-rule", false),
	line("build", "GET", "pypi.internal.example", 443, "/packages/ab/cd/0123456789abcdef0123456789abcdef0123456789abcdef0123456789ab/requests-2.32.0-py3-none-any.whl", "download", "", "deny", "no-rule", false),
	line("research", "GET", "docs.example.com", 443, "/guide/intro", "read", "", "deny", "no-rule", false),
	line("research", "HEAD", "docs.example.com", 443, "/guide/", "read", "", "deny", "no-rule", false),
	line("research", "POST", "paste.example.net", 443, "/upload", "upload", "", "deny", "no-rule", false),
	line("build", "CONNECT", "git.example.org", 22, "", "read", "", "deny", "no-rule", false),
	line("build", "GET", "169.254.169.254", 80, "/latest/meta-data/", "read", "", "deny", "high-risk", true),
	line("build", "PUT", "pypi.org", 443, "/legacy/", "publish", "pypi", "deny", "mirror", false),
	line("build", "GET", "allowed.example.com", 443, "/", "read", "web", "allow", "allowed", false),
	line("build", "GET", "quarantined.example.com", 443, "/", "read", "", "deny", "quarantine", false),
	`not json`,
}, "\n") + "\n"

func TestSuggest(t *testing.T) {
	entries, skipped, err := Read(strings.NewReader(trial))
	if err != nil || skipped != 1 || len(entries) != 10 {
		t.Fatalf("Read: %d entries, %d skipped, %v", len(entries), skipped, err)
	}
	var b bytes.Buffer
	Suggest(&b, entries, Options{})
	out := b.String()
	for _, want := range []string{
		"- name: pypi-internal-example\n    hosts: [pypi.internal.example]\n    ports: [443]\n    mirror: pypi",
		"- name: docs-example-com\n    hosts: [docs.example.com]\n    ports: [443]\n    pages: [read]\n    methods: [GET, HEAD]",
		"# REVIEW: write pages seen (upload)",
		"hosts: [git.example.org]\n    ports: [22]\n    # only CONNECTs were seen",
		"#   high-risk 169.254.169.254 (1)",
		"#   mirror pypi.org (1)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("suggest lacks\n%s\nin\n%s", want, out)
		}
	}
	for _, never := range []string{"hosts: [169.254.169.254]", "hosts: [pypi.org]", "allowed.example.com", "quarantined.example.com"} {
		if strings.Contains(out, never) {
			t.Errorf("suggest proposes %q:\n%s", never, out)
		}
	}
	// The proposals paste into a config that parses.
	if _, err := policy.Parse(strings.NewReader("version: 1\n"+out), "pasted.yaml"); err != nil {
		t.Errorf("pasted proposals do not parse: %v\n%s", err, out)
	}

	b.Reset()
	Suggest(&b, entries, Options{Identity: "research"})
	out = b.String()
	if strings.Contains(out, "pypi.internal.example") || !strings.Contains(out, "identities: [research]\n    hosts: [docs.example.com]") {
		t.Errorf("--identity research:\n%s", out)
	}
}

func TestReplay(t *testing.T) {
	entries, _, _ := Read(strings.NewReader(trial))
	old, err := policy.Parse(strings.NewReader("version: 1\nallow:\n  - {name: web, hosts: [allowed.example.com]}\n"), "old.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// the same policy as the one that produced the log: nothing changes
	if d := Replay(old, entries); len(d.Changes) != 0 || d.Replayed != 9 || d.Skipped != 1 {
		t.Errorf("replay under the logging policy: %+v", d)
	}
	next, err := policy.Parse(strings.NewReader(`version: 1
identities:
  - {name: research, user: research, token_sha256: 2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881}
  - {name: build, user: build, token_sha256: 2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881}
allow:
  - {name: docs, hosts: [docs.example.com], identities: [research], pages: [read], methods: [GET]}
  - {name: pypi, hosts: [pypi.internal.example], mirror: pypi, identities: [research]}
`), "new.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d := Replay(next, entries)
	var b bytes.Buffer
	d.Write(&b)
	out := b.String()
	for _, want := range []string{
		"deny no-rule           -> allow                     1x  GET https://docs.example.com:443/guide/intro  (identity research)",
		"allow                  -> deny no-rule              1x  GET https://allowed.example.com:443/  (identity build)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("replay lacks\n%s\nin\n%s", want, out)
		}
	}
	// HEAD is not in the new rule's methods; pypi is research's, not build's
	if strings.Contains(out, "HEAD https://docs") || strings.Contains(out, "pypi.internal.example") {
		t.Errorf("replay shows a change that is none:\n%s", out)
	}
	if !d.Loosened() {
		t.Error("Loosened = false with a deny → allow")
	}
}

func FuzzRead(f *testing.F) {
	f.Add(trial)
	f.Fuzz(func(t *testing.T, s string) {
		entries, _, _ := Read(strings.NewReader(s))
		var b bytes.Buffer
		Suggest(&b, entries, Options{})
		p, _ := policy.Parse(strings.NewReader("version: 1\n"), "x")
		Replay(p, entries)
	})
}

// TestSuggestBasePath (issue 23): a repository manager's paths fit an
// ecosystem under a prefix: suggest proposes the mirror with its
// base_path (the product's repository prefix, not a deeper one), and says
// so when the paths fit no grammar at the root or under any prefix.
func TestSuggestBasePath(t *testing.T) {
	const hash = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789ab"
	log := strings.Join([]string{
		line("", "GET", "art.example", 443, "/artifactory/api/pypi/pypi-remote/simple/requests/", "read", "", "deny", "no-rule", false),
		line("", "GET", "art.example", 443, "/artifactory/api/pypi/pypi-remote/packages/packages/ab/cd/"+hash+"/requests-2.32.0-py3-none-any.whl", "download", "", "deny", "no-rule", false),
		line("", "GET", "nexus.example", 443, "/repository/maven-central/org/slf4j/slf4j-api/2.0.9/slf4j-api-2.0.9.jar", "download", "", "deny", "no-rule", false),
		line("", "GET", "nexus.example", 443, "/repository/maven-central/org/slf4j/slf4j-api/maven-metadata.xml", "download", "", "deny", "no-rule", false),
		line("", "GET", "devpi.example", 443, "/root/pypi/+simple/requests/", "read", "", "deny", "no-rule", false),
		line("", "GET", "devpi.example", 443, "/root/pypi/+f/0ab/0123456789abc/requests-2.32.0-py3-none-any.whl", "download", "", "deny", "no-rule", false),
		line("", "GET", "gl.example", 443, "/api/v4/groups/7/-/packages/npm/@acme%2flib", "read", "", "deny", "no-rule", false),
		line("", "GET", "app.example", 443, "/dashboard/settings?tab=1", "read", "", "deny", "no-rule", false),
	}, "\n") + "\n"
	entries, _, err := Read(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	Suggest(&b, entries, Options{})
	out := b.String()
	bare := regexp.MustCompile(`(\S)   # .*`).ReplaceAllString(out, "$1") // without the trailing comments
	for _, want := range []string{
		"hosts: [art.example]\n    ports: [443]\n    mirror: pypi\n    base_path: /artifactory/api/pypi/pypi-remote",
		"hosts: [nexus.example]\n    ports: [443]\n    mirror: maven\n    base_path: /repository/maven-central",
		"hosts: [devpi.example]\n    ports: [443]\n    mirror: pypi\n    base_path: /root/pypi",
		"hosts: [gl.example]\n    ports: [443]\n    mirror: npm\n    base_path: /api/v4/groups/7/-/packages/npm",
		"hosts: [app.example]\n    ports: [443]\n    pages: [read]\n    methods: [GET]\n    # no mirror grammar fits these paths, at the root or under a prefix",
	} {
		if !strings.Contains(bare, want) {
			t.Errorf("suggest lacks\n%s\nin\n%s", want, out)
		}
	}
	p, err := policy.Parse(strings.NewReader("version: 1\n"+out), "pasted.yaml")
	if err != nil {
		t.Fatalf("pasted proposals do not parse: %v\n%s", err, out)
	}
	// What was proposed allows what was denied.
	for _, e := range entries[:7] {
		tg, _ := policy.ParseURL("https://" + e.Host + e.Path)
		if d := p.DecideRequest(&tg, e.Method, "", 0); !d.Allow {
			t.Errorf("the proposal still denies %s %s: %s %s", e.Method, e.Path, d.Reason, d.Detail)
		}
	}
}
