package testutil

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// MeasureLoad runs load once and reports its wall and CPU seconds
// (s/load, s-cpu/load), the bytes it allocated (MiB-allocated), what it
// keeps on the heap and, through mapped, in mappings outside the heap
// (MiB-kept), and the process's peak RSS (MiB-peak-rss, VmHWM: the test
// binary's too). mapped may be nil.
func MeasureLoad(b *testing.B, mapped func() int64, load func() (any, error)) {
	if mapped == nil {
		mapped = func() int64 { return 0 }
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	mapBefore := mapped()
	cpu := CPUSeconds()
	start := time.Now()
	v, err := load()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(time.Since(start).Seconds(), "s/load")
	b.ReportMetric(CPUSeconds()-cpu, "s-cpu/load")
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/(1<<20), "MiB-allocated")
	runtime.GC()
	runtime.ReadMemStats(&after)
	kept := int64(after.HeapAlloc) - int64(before.HeapAlloc) + mapped() - mapBefore
	b.ReportMetric(float64(kept)/(1<<20), "MiB-kept")
	b.ReportMetric(PeakRSSMiB(), "MiB-peak-rss")
	runtime.KeepAlive(v)
}

// PeakRSSMiB is the process's VmHWM in MiB (0 where /proc is not there).
func PeakRSSMiB() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return float64(kb) / 1024
		}
	}
	return 0
}
