package runbox

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestLogHandlerDNSSummary: the DNS filter's count of the query lines it
// held back ("dns queries not logged") is a DNS line like the ones it
// counts: the run log gets it, the user's terminal does not.
func TestLogHandlerDNSSummary(t *testing.T) {
	t.Parallel()
	var file, term bytes.Buffer
	log := slog.New(&logHandler{
		file: slog.NewJSONHandler(&file, &slog.HandlerOptions{Level: slog.LevelInfo}),
		term: slog.NewJSONHandler(&term, &slog.HandlerOptions{Level: slog.LevelWarn}),
		sum:  &summary{},
	}).With("component", "dns")
	log.Warn("dns queries not logged", "client", "10.237.0.2", "result", "refused", "skipped", 40)
	if term.Len() != 0 {
		t.Errorf("on the terminal: %s", term.String())
	}
	if !strings.Contains(file.String(), `"msg":"dns queries not logged"`) {
		t.Errorf("not in the run log: %q", file.String())
	}
}
