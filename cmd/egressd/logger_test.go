package main

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// TestLoggerDurations: a duration in egressd's JSON log lines reads as
// one ("1.5s"), not as raw nanoseconds (1500000000).
func TestLoggerDurations(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	log, err := newLogger(&b, "info")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("self-test sealed", "duration", 1500*time.Millisecond, "n", 3)
	var m map[string]any
	if err := json.Unmarshal(b.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	if m["duration"] != "1.5s" || m["n"] != float64(3) {
		t.Errorf("logged %s", b.String())
	}
}
