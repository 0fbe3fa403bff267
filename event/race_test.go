//go:build race

package event

// raceEnabled: the race detector's sync.Pool drops a share of what is put
// back on purpose, so allocation counts are not the program's own.
const raceEnabled = true
