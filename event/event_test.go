package event

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestRecordKeys: Record's JSON names are exactly the keys (plus slog's
// time, level and msg, and the tunnel records' own), so a reader sees every
// key a writer writes.
func TestRecordKeys(t *testing.T) {
	var tags []string
	rt := reflect.TypeFor[Record]()
	for i := range rt.NumField() {
		tag, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		tags = append(tags, tag)
	}
	want := append(append(append([]string{"time", "level", "msg"}, Keys()...), OptionalKeys()...), TunnelKeys()...)
	if !slices.Equal(tags, want) {
		t.Errorf("Record JSON names %v, want %v", tags, want)
	}
}

func TestRecordDecode(t *testing.T) {
	line := `{"time":"2026-11-30T10:00:00Z","level":"WARN","msg":"decision","component":"proxy","identity":"10.0.0.2","method":"GET","host":"x.test","port":80,"path":"/","page_type":"read","rule":"","decision":"deny","reason":"no-rule","high_risk":false,"status":403,"bytes_in":0,"bytes_out":0,"bytes":0,"detail":"d","inspected":false}`
	var r Record
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		t.Fatal(err)
	}
	if !r.IsDecision() || r.Decision != Deny || r.Reason != "no-rule" || r.Status != 403 || r.Host != "x.test" {
		t.Errorf("decoded %+v", r)
	}
}
