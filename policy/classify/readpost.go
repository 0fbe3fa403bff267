package classify

import (
	"bytes"
	"encoding/json"
	"io"
	"net/url"
	"strings"
)

// Body grammars of the read-only POSTs: a body is accepted only in the shape
// its protocol sends, so an opted-in read cannot carry arbitrary bytes.

const (
	// jiraSearchBodyCap bounds a Jira search body: JQL plus paging and
	// field lists stay well under 4 KiB in Jira's own clients.
	jiraSearchBodyCap = 8 << 10
	// maxJQL bounds the one free-text field of a Jira search.
	maxJQL = 2048
	// hfPathsInfoBodyCap bounds a paths-info body: huggingface_hub sends
	// the paths of one snapshot in batches of 50.
	hfPathsInfoBodyCap = 32 << 10
)

// checkJiraSearch accepts the JSON object of POST /rest/api/*/search
// (Jira REST API v2/v3): jql, paging and field selectors, nothing else, no
// duplicate keys, no trailing data.
func checkJiraSearch(body []byte) (bool, string) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if !jsonDelim(dec, '{') {
		return false, "jira search: body is not a JSON object"
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		key, _ := t.(string)
		if err != nil || seen[key] {
			return false, "jira search: bad or duplicate key"
		}
		seen[key] = true
		var ok bool
		switch key {
		case "jql":
			var s string
			s, ok = jsonString(dec)
			ok = ok && len(s) <= maxJQL
		case "startAt", "maxResults":
			ok = jsonNumber(dec)
		case "validateQuery", "nextPageToken":
			var s string
			s, ok = jsonString(dec)
			ok = ok && len(s) <= 256
		case "fieldsByKeys":
			ok = jsonBool(dec)
		case "fields", "expand", "properties":
			n := 0
			ok = jsonArray(dec, func() bool {
				s, ok := jsonString(dec)
				n++
				return ok && n <= 64 && csJiraField.span(s, 64)
			})
		case "reconcileIssues":
			n := 0
			ok = jsonArray(dec, func() bool { n++; return n <= 64 && jsonNumber(dec) })
		default:
			return false, "jira search: unexpected key"
		}
		if !ok {
			return false, "jira search: bad value of " + key
		}
	}
	if !jsonDelim(dec, '}') {
		return false, "jira search: bad JSON"
	}
	if _, err := dec.Token(); err != io.EOF {
		return false, "jira search: trailing data"
	}
	return true, ""
}

var csJiraField = mkCharset("A-Za-z0-9_.*-")

// checkHFPathsInfo accepts paths=<file path>(&paths=...)*[&expand=true|false]
// as huggingface_hub's get_paths_info sends it.
func checkHFPathsInfo(body []byte) (bool, string) {
	q, err := url.ParseQuery(string(body))
	if err != nil {
		return false, "hf paths-info: bad form body"
	}
	for k, vs := range q {
		switch k {
		case "paths":
			if len(vs) > 1000 {
				return false, "hf paths-info: too many paths"
			}
			for _, v := range vs {
				if !csHFPath.span(v, 512) || strings.Contains(v, "..") {
					return false, "hf paths-info: bad path"
				}
			}
		case "expand":
			if len(vs) != 1 || vs[0] != "true" && vs[0] != "false" {
				return false, "hf paths-info: bad expand"
			}
		default:
			return false, "hf paths-info: unexpected field"
		}
	}
	if len(q["paths"]) == 0 {
		return false, "hf paths-info: no paths"
	}
	return true, ""
}

var csHFPath = mkCharset("A-Za-z0-9._/ +=@-")

// jsonNumber accepts a non-negative integer of at most 10 digits (paging
// offsets and issue ids): a JSON number has no length limit of its own.
func jsonNumber(dec *json.Decoder) bool {
	t, err := dec.Token()
	n, ok := t.(json.Number)
	return err == nil && ok && csDigit.span(string(n), 10)
}

func jsonBool(dec *json.Decoder) bool {
	t, err := dec.Token()
	_, ok := t.(bool)
	return err == nil && ok
}
