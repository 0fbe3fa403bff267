// Package testutil holds the helpers that tests of several packages share:
// load measurements for benchmarks (MeasureLoad, CPUSeconds, PeakRSSMiB), the
// metric names the code declares (ExportedMetrics), golden files (Golden), and
// a log sink that a test can wait on (a readiness signal instead of a
// sleep), a careless MCP fetch server (a negative control for the
// tool-server probes), a TCP echo origin (EchoServer), and the -parallel
// default of packages whose tests mostly wait (WaitingParallel). It has no production users; internal/archtest keeps it out of
// production code.
package testutil
