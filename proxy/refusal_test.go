package proxy

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestConnectRefusalStatusLine: a refused CONNECT's status line carries
// egressd's reason ("403 egressd no-rule"), because that line is all pip,
// git and curl print of a failed tunnel; the header, the body with the
// reason and the Go client's error say the same.
func TestConnectRefusalStatusLine(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	port := h.tlsO.port()
	for _, tt := range []struct {
		name, authority, line string
		notReady              bool
	}{
		{"no rule", "unlisted.test:" + port, "HTTP/1.1 403 egressd no-rule\r\n", false},
		{"high-risk address", "meta.test:" + port, "HTTP/1.1 403 egressd high-risk\r\n", false},
		{"not ready", "allowed.test:" + port, "HTTP/1.1 503 egressd not-ready\r\n", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h.ready.Store(!tt.notReady)
			defer h.ready.Store(true)
			out := h.raw("CONNECT " + tt.authority + " HTTP/1.1\r\nHost: " + tt.authority + "\r\n\r\n")
			reason := strings.TrimSuffix(strings.Fields(tt.line)[3], "\r\n")
			head, body, _ := strings.Cut(out, "\r\n\r\n")
			if !strings.HasPrefix(out, tt.line) || !strings.Contains(head, "\r\nX-Egressd-Deny: "+reason) || !strings.Contains(head, "\r\nConnection: close") || !strings.HasPrefix(body, "egressd: denied: "+reason) {
				t.Errorf("CONNECT %s: %.300q", tt.authority, out)
			}
		})
	}
	if resp, errText := h.do("GET", "https://unlisted.test:"+port+"/", nil, nil); resp != nil || !strings.Contains(errText, "egressd no-rule") {
		t.Errorf("Go client through a refused CONNECT: %v %q", resp, errText)
	}
}

// TestRefusalLineNamesTheTarget: a request refused before any rule (a
// Host header that disagrees with the URL) still logs the full decision
// line: host and port of the URL, and the rule and page_type keys (never
// decided, so empty), so log readers need no second schema.
func TestRefusalLineNamesTheTarget(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	h.raw("GET http://allowed.test:8080/x HTTP/1.1\r\nHost: other.test\r\n\r\n")
	line := waitLog(t, h, `"reason":"host-mismatch"`)
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{"host": "allowed.test", "port": float64(8080), "path": "/x"} {
		if got, ok := m[k]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v in %s", k, got, ok, want, line)
		}
	}
	for _, k := range []string{"rule", "page_type"} {
		if _, ok := m[k]; !ok {
			t.Errorf("no %s in %s", k, line)
		}
	}
}
