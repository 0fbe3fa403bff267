package event

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"
)

// TestReadableDurationsLineCost: a handler with ReadableDurations writes a
// line (level, message, strings, a duration) as before and without
// allocating. slog hands the level to a ReplaceAttr as an Any, which its
// JSON handler encodes through encoding/json (an encoder per line) unless
// ReplaceAttr gives it back as a string.
func TestReadableDurationsLineCost(t *testing.T) {
	var buf bytes.Buffer
	h := slog.NewJSONHandler(&buf, &slog.HandlerOptions{ReplaceAttr: ReadableDurations})
	r := slog.NewRecord(time.Unix(1, 0), slog.LevelWarn, Msg, 0)
	r.AddAttrs(slog.String(KeyHost, "example.com"), slog.Duration("took", 1500*time.Millisecond))
	ctx := context.Background()
	if err := h.Handle(ctx, r); err != nil {
		t.Fatal(err)
	}
	want := `{"time":"` + time.Unix(1, 0).Format(time.RFC3339Nano) + `","level":"WARN","msg":"` + Msg + `","` + KeyHost + `":"example.com","took":"1.5s"}` + "\n"
	if got := buf.String(); got != want {
		t.Fatalf("line:\n got %s\nwant %s", got, want)
	}
	if raceEnabled {
		return // the line is checked above; its allocations only without -race
	}
	allocs := testing.AllocsPerRun(50, func() {
		buf.Reset()
		h.Handle(ctx, r) //nolint:errcheck // checked above
	})
	if allocs > 1 { // the duration's string
		t.Errorf("%v allocations per line, want at most 1", allocs)
	}
}
