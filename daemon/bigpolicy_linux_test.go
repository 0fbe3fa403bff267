package daemon

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/testutil"
	"github.com/egressd/egressd/policy"
)

// TestLoadKeepsTheCollectorClose: while a policy loads, the collector runs
// at loadGCPercent (a reload builds a second big policy beside the one in
// force: at the default GOGC the heap peaked at twice both); afterwards
// the operator's setting is back. An operator's lower GOGC stands.
func TestLoadKeepsTheCollectorClose(t *testing.T) {
	// Not parallel: it sets GOGC and reads this process's RSS, which other tests change.
	gogc := func() int { v := debug.SetGCPercent(-1); debug.SetGCPercent(v); return v }
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	for _, before := range []int{100, 50, loadGCPercent / 2} {
		debug.SetGCPercent(before)
		var during int
		if _, err := load(func() (*policy.Policy, error) { during = gogc(); return nil, nil }); err != nil {
			t.Fatal(err)
		}
		if want := min(before, loadGCPercent); during != want || during > 50 {
			t.Errorf("GOGC %d: %d while loading, want %d (at most 50)", before, during, want)
		}
		if after := gogc(); after != before {
			t.Errorf("GOGC %d: %d after the load", before, after)
		}
	}
}

// BenchmarkBigPolicy is `egressd serve` with a 1,000,000-host policy as
// a user runs it: start (load, listeners, boot self-test) until ready, then
// a verified reload, for the hosts written inline in the YAML and for the
// same hosts in allow[].hosts_files. It reports wall and CPU seconds and
// the process's peak RSS of each step (VmHWM, reset before each; the
// self-test is a stub: the real one needs a network namespace, and costs
// ~0.1 s whatever the policy's size). EGRESSD_BENCH_HOSTS changes the size.
func BenchmarkBigPolicy(b *testing.B) {
	n := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("EGRESSD_BENCH_HOSTS")); err == nil {
		n = v
	}
	dir := b.TempDir()
	inline, files := writeBigConfigs(b, dir, n)
	for _, c := range []struct{ name, path string }{{"inline", inline}, {"hosts_files", files}} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				benchServe(b, c.path)
			}
		})
	}
}

func benchServe(b *testing.B, path string) {
	runtime.GC()
	debug.FreeOSMemory()
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	opt := Options{
		Load:          func() (*policy.Policy, error) { return policy.Load(path) },
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		Verify:        func(context.Context, *policy.Policy) Verdict { return Verdict{Sealed: true} },
		ProxyListener: pl,
	}
	step := measureStep()
	d, err := New(opt)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx, nil) }()
	defer func() { cancel(); <-done }()
	<-d.Booted()
	step(b, "start")
	if ok, why := d.Ready(); !ok {
		b.Fatalf("not ready after the boot: %s", why)
	}
	step = measureStep()
	if err := d.Reload(ctx, "bench"); err != nil {
		b.Fatal(err)
	}
	step(b, "reload")
}

// measureStep starts measuring a step; the returned func reports its wall
// and CPU seconds and the peak RSS since.
func measureStep() func(b *testing.B, name string) {
	os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) // resets VmHWM to the RSS now
	cpu, start := testutil.CPUSeconds(), time.Now()
	return func(b *testing.B, name string) {
		b.ReportMetric(time.Since(start).Seconds(), "s/"+name)
		b.ReportMetric(testutil.CPUSeconds()-cpu, "s-cpu/"+name)
		b.ReportMetric(testutil.PeakRSSMiB(), "MiB-peak-rss/"+name)
	}
}

// writeBigConfigs writes n hosts over 10 rules, half exact names and half
// wildcards, once inline in a config and once in hosts files, streamed to
// disk so the benchmark's own heap stays small.
func writeBigConfigs(b *testing.B, dir string, n int) (inline, files string) {
	host := func(k int) string {
		if k%2 == 0 {
			return fmt.Sprintf("host%d.example%d.com", k, k%997)
		}
		return fmt.Sprintf("*.svc%d.example%d.org", k, k%991)
	}
	create := func(name string, fill func(w *bufio.Writer)) string {
		path := filepath.Join(dir, name)
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		w := bufio.NewWriterSize(f, 1<<20)
		fill(w)
		if err := w.Flush(); err != nil {
			b.Fatal(err)
		}
		f.Close()
		return path
	}
	const head = "version: 1\nlisten:\n  admin: 127.0.0.1:0\nallow:\n"
	per := n / 10
	inline = create("inline.yaml", func(w *bufio.Writer) {
		w.WriteString(head)
		for r := range 10 {
			fmt.Fprintf(w, "  - name: rule%d\n    ports: [443]\n    pages: [\"*\"]\n    hosts:\n", r)
			for i := range per {
				fmt.Fprintf(w, "      - %q\n", host(r*per+i))
			}
		}
	})
	files = create("files.yaml", func(w *bufio.Writer) {
		w.WriteString(head)
		for r := range 10 {
			fmt.Fprintf(w, "  - name: rule%d\n    ports: [443]\n    pages: [\"*\"]\n    hosts_files: [rule%d.txt]\n", r, r)
			create(fmt.Sprintf("rule%d.txt", r), func(w *bufio.Writer) {
				for i := range per {
					fmt.Fprintln(w, host(r*per+i))
				}
			})
		}
	})
	return inline, files
}
