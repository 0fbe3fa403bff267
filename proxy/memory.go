package proxy

import (
	"runtime/debug"
	"sync/atomic"
	"time"
)

// Memory held by a wave of tunnels goes back to the system soon after the
// wave closes. Left to itself Go's runtime keeps it for minutes: the heap
// they freed is collected only at the next GC cycle, which an idle proxy
// reaches only by the forced one every two minutes, and the scavenger then
// returns the pages gradually. A proxy that held 10,000 tunnels at a peak
// would sit on their ~100 MiB long after. So when the open tunnels fall
// by at least releaseDrop and to half their peak or less, egressd runs
// debug.FreeOSMemory once, releaseDelay later (the rest of the wave
// closes meanwhile; one release covers it).
const (
	releaseDrop  = 1000
	releaseDelay = 5 * time.Second
)

// memoryReleaser counts open tunnels and gives memory back after a wave
// closes (above). The zero value uses the defaults; tests set the hooks.
type memoryReleaser struct {
	open, peak atomic.Int64 // open tunnels; the most open since the last release
	armed      atomic.Bool  // a release is scheduled

	drop  int64                           // 0: releaseDrop
	after func(d time.Duration, f func()) // nil: time.AfterFunc
	free  func()                          // nil: debug.FreeOSMemory
}

// opened counts a tunnel that opened.
func (m *memoryReleaser) opened() {
	n := m.open.Add(1)
	for p := m.peak.Load(); n > p && !m.peak.CompareAndSwap(p, n); p = m.peak.Load() {
	}
}

// closed counts a tunnel that closed and schedules a release when the
// open tunnels fell far enough from their peak.
func (m *memoryReleaser) closed() {
	n := m.open.Add(-1)
	p := m.peak.Load()
	drop := m.drop
	if drop == 0 {
		drop = releaseDrop
	}
	if p-n < drop || n > p/2 || !m.armed.CompareAndSwap(false, true) {
		return
	}
	after := m.after
	if after == nil {
		after = func(d time.Duration, f func()) { time.AfterFunc(d, f) }
	}
	after(releaseDelay, m.release)
}

// release gives the freed memory back and starts a new peak.
func (m *memoryReleaser) release() {
	if m.free != nil {
		m.free()
	} else {
		debug.FreeOSMemory()
	}
	m.peak.Store(m.open.Load())
	m.armed.Store(false)
}
