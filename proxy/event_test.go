package proxy

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"

	"github.com/egressd/egressd/event"
)

// TestDecisionRecordSchema: the proxy's decision lines carry exactly the
// keys package event defines (and slog's own), so the audit chain and the
// report read what the proxy writes; so does the refusal of a request that
// never reached a rule.
func TestDecisionRecordSchema(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	h.do("GET", "http://unlisted.test/x", nil, nil)
	h.raw("GET http://allowed.test/ HTTP/1.1\r\nHost: other.test\r\n\r\n")
	rt := map[string]bool{"time": true, "level": true, "msg": true, "component": true}
	want := map[string]bool{}
	for _, k := range event.Keys() {
		want[k] = true
	}
	optional := map[string]bool{}
	for _, k := range event.OptionalKeys() {
		optional[k] = true
	}
	for _, tc := range []struct {
		reason string
		full   bool
	}{{`"reason":"no-rule"`, true}, {`"reason":"host-mismatch"`, true}} {
		line := waitLog(t, h, tc.reason)
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if m["msg"] != event.Msg {
			t.Errorf("%s: msg %v, want %q", tc.reason, m["msg"], event.Msg)
		}
		got := map[string]bool{}
		for k := range m {
			if !rt[k] && !optional[k] {
				got[k] = true
			}
		}
		for k := range got {
			if !want[k] {
				t.Errorf("%s: key %q is not in package event", tc.reason, k)
			}
		}
		if tc.full && !maps.Equal(got, want) {
			t.Errorf("%s: keys %v, want %v", tc.reason, slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
		}
	}
}
