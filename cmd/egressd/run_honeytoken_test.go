//go:build linux

package main

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/egressd/egressd/honeytoken"
	"github.com/egressd/egressd/internal/testnet"
)

// alertLine is one of egressd's JSON log lines on the terminal.
var alertLine = regexp.MustCompile(`\{"time":[^\n]*?"msg":"alert: [^\n]*?"where":"[^"]*"\}\n`)

// honeyRunConfig is runConfig with a read-POST rule and a wildcard rule.
var honeyRunConfig = strings.Replace(runConfig, "    cidrs: [203.0.113.0/24]\n", `    cidrs: [203.0.113.0/24]
  - name: jira
    hosts: [jira.test]
    cidrs: [203.0.113.0/24]
    pages: [read]
    read_posts: [jira-search]
  - name: wild
    hosts: ["*.wild.test"]
    cidrs: [203.0.113.0/24]
`, 1)

// honeyScript runs inside `egressd run --honeytokens`: each request once
// with a canary from its environment and once without, then a DNS name
// with a canary label under an allowed wildcard and one without, then
// curl with an AWS-signature-shaped Authorization header, printing the
// refusal's headers.
const honeyScript = `q() { curl -sS -m 10 -o /dev/null -w '%{http_code} ' "$@"; }
q "http://allowed.test/search?q=1&key=$AWS_ACCESS_KEY_ID"
q "http://allowed.test/search?q=1&key=plain"
q -H "X-Api-Key: $API_KEY" http://allowed.test/h
q -H "X-Api-Key: plain" http://allowed.test/h
q -H 'Content-Type: application/json' --data "{\"jql\":\"text ~ $GITHUB_TOKEN\",\"maxResults\":10}" http://jira.test/rest/api/2/search
q -H 'Content-Type: application/json' --data "{\"jql\":\"text ~ plain\",\"maxResults\":10}" http://jira.test/rest/api/2/search
label=$(printf %s "$AWS_ACCESS_KEY_ID" | tr A-Z a-z)
getent hosts "$label.wild.test" >/dev/null && echo -n 'dns-canary-resolved ' || echo -n 'dns-canary-refused '
getent hosts x.wild.test >/dev/null && echo 'dns-plain-resolved' || echo 'dns-plain-refused'
grep -q "$AWS_ACCESS_KEY_ID" "$AWS_SHARED_CREDENTIALS_FILE" && echo credentials-file-ok
curl -sS -m 10 -D - -o /dev/null -H "X-Amz-Date: 20261201T000000Z" -H "Authorization: AWS4-HMAC-SHA256 Credential=$AWS_ACCESS_KEY_ID/20261201/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-date, Signature=0123456789abcdef" http://allowed.test/bucket/key
`

// TestRunHoneytokens: inside `egressd run --honeytokens`, a canary in a
// query string to an allowed host, in a header, in a JSON body to a
// read-POST rule and as a DNS label under an allowed wildcard is each
// refused and alerted, while the same request without it passes; curl
// with a signed-looking Authorization header shows the refusal reason.
func TestRunHoneytokens(t *testing.T) {
	t.Parallel()
	topo := testnet.New(t, testnet.WithRecords(map[string][]netip.Addr{
		"allowed.test": {testnet.OriginAddr4}, "jira.test": {testnet.OriginAddr4}, "x.wild.test": {testnet.OriginAddr4},
		"egressd-selftest.wild.test": {testnet.OriginAddr4}, // the self-test's probe name under the wildcard
	}))
	l := labOn(t, topo, honeyRunConfig)
	logFile := filepath.Join(l.dir, "run.log")
	out, code := l.run(t, []string{"--honeytokens", "--log", logFile}, "sh", "-c", honeyScript)
	if code != 0 {
		t.Fatalf("egressd run: exit %d\n%s", code, out)
	}
	all := out
	// the command's output: egressd's alert lines share the terminal
	out = alertLine.ReplaceAllString(out, "")
	if want := "403 200 403 200 403 200 dns-canary-refused dns-plain-resolved\ncredentials-file-ok\n"; !strings.HasPrefix(out, want) {
		t.Fatalf("got\n%s\nwant it to start with\n%s\n(all output:\n%s)", out, want, all)
	}
	if !strings.Contains(out, "HTTP/1.1 403") || !strings.Contains(out, "X-Egressd-Deny: honeytoken") {
		t.Fatalf("curl does not show the refusal reason:\n%s", out)
	}
	ts, err := honeytoken.Load(l.state)
	if err != nil || len(ts) != 4 {
		t.Fatalf("the run's canaries are not in the store: %v %d", err, len(ts))
	}
	owner := ts[0].Identity
	for _, h := range topo.Origin.Seen() {
		for _, tk := range ts {
			if strings.Contains(strings.ToLower(h.What), strings.ToLower(tk.Value)) {
				t.Errorf("a canary reached the origin: %s", h.What)
			}
		}
	}
	// one alert per refusal, naming the canary's identity, kind and place
	b, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, line := range strings.Split(string(b), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil || m["msg"] != "alert: honeytoken attempt" {
			continue
		}
		if m["honeytoken_of"] != owner {
			t.Errorf("alert names %v, not the run's identity %s: %s", m["honeytoken_of"], owner, line)
		}
		if a := m["honeytoken"].(string) + "@" + m["where"].(string); len(got) == 0 || got[len(got)-1] != a {
			got = append(got, a) // getent asks for A and AAAA: one alert each
		}
		if m["identity"] == "" {
			t.Errorf("alert names no sender: %s", line)
		}
	}
	want := []string{"aws-access-key-id@query", "api-key@header X-Api-Key", "github-token@body", "aws-access-key-id@dns name", "aws-access-key-id@header Authorization"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("alerts %v, want %v", got, want)
	}
}
