package event

import "log/slog"

// ReadableDurations is the slog.HandlerOptions.ReplaceAttr of egressd's
// JSON log lines: a duration is written as Go spells it ("1.5s"), which a
// person reads and time.ParseDuration parses, not as the raw nanoseconds
// slog's JSON handler writes.
func ReadableDurations(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}
