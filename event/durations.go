package event

import "log/slog"

// ReadableDurations is the slog.HandlerOptions.ReplaceAttr of egressd's
// JSON log lines: a duration is written as Go spells it ("1.5s"), which a
// person reads and time.ParseDuration parses, not as the raw nanoseconds
// slog's JSON handler writes.
//
// It also gives the level back as a string: slog passes it to any
// ReplaceAttr as an Any, which its JSON handler then writes through an
// encoding/json encoder on every line (Level.MarshalJSON: the same text,
// 1.3 % of the proxy's CPU per new tunnel in bench/RESULTS.md's profile).
func ReadableDurations(groups []string, a slog.Attr) slog.Attr {
	switch a.Value.Kind() {
	case slog.KindDuration:
		return slog.String(a.Key, a.Value.Duration().String())
	case slog.KindAny:
		if l, ok := a.Value.Any().(slog.Level); ok && len(groups) == 0 && a.Key == slog.LevelKey {
			return slog.String(a.Key, l.String())
		}
	}
	return a
}
