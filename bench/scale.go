//go:build linux

package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// metricsOf scrapes egressd's admin /metrics for the named series (no
// labels); a fresh connection each time, so the scrape leaves nothing
// behind that the next count would see.
func metricsOf(admin string, names ...string) (map[string]float64, error) {
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := cl.Get("http://" + admin + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		for _, n := range names {
			if name == n {
				out[n], _ = strconv.ParseFloat(val, 64)
			}
		}
	}
	return out, sc.Err()
}

// clientHello is the first flight of a real Go TLS client to 127.0.0.1
// (no SNI, as for any IP address): an idle tunnel sends it so the proxy
// runs its ClientHello check, then stays silent.
func clientHello() ([]byte, error) {
	var cc captureConn
	tls.Client(&cc, &tls.Config{ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}}).Handshake()
	if cc.buf.Len() == 0 {
		return nil, errors.New("no ClientHello captured")
	}
	return cc.buf.Bytes(), nil
}

type captureConn struct {
	net.Conn // nil: only the methods below are used by a handshake
	buf      bytes.Buffer
}

func (c *captureConn) Read([]byte) (int, error)         { return 0, errors.New("capture only") }
func (c *captureConn) Write(p []byte) (int, error)      { return c.buf.Write(p) }
func (c *captureConn) Close() error                     { return nil }
func (c *captureConn) SetDeadline(time.Time) error      { return nil }
func (c *captureConn) SetReadDeadline(time.Time) error  { return nil }
func (c *captureConn) SetWriteDeadline(time.Time) error { return nil }

const (
	mGoroutines = "go_goroutines"
	mFDs        = "process_open_fds"
	mHeap       = "go_memstats_heap_inuse_bytes"
	mStack      = "go_memstats_stack_inuse_bytes"
	mTunnels    = "egressd_open_tunnels"

	// where the memory not given back sits (runtime.MemStats)
	mSys          = "go_memstats_sys_bytes"
	mHeapIdle     = "go_memstats_heap_idle_bytes"
	mHeapReleased = "go_memstats_heap_released_bytes"
	mGCSys        = "go_memstats_gc_sys_bytes"
	mOtherSys     = "go_memstats_other_sys_bytes"
	mSpanSys      = "go_memstats_mspan_sys_bytes"
)

// scaleTunnels holds o.tunnels idle CONNECT tunnels through egressd for
// o.hold, then closes them and checks that goroutines and descriptors
// return to where they started.
func scaleTunnels(o *options, or *origin, dir string) error {
	n := o.tunnels
	// Each tunnel costs egressd two descriptors, and this process two
	// (client and sink); the hard limit is what either may reach.
	var lim syscall.Rlimit
	limitNote := ""
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil {
		if most := (int(lim.Max) - 200) / 2; n > most {
			limitNote = fmt.Sprintf("Only %d tunnels: the descriptor hard limit here is %d (raising it needs CAP_SYS_RESOURCE), and %d tunnels need %d descriptors in egressd alone.\n\n", most, lim.Max, n, 2*n)
			n = most
		}
	}
	progress("scale: %d idle tunnels for %s", n, o.hold)
	hello, err := clientHello()
	if err != nil {
		return err
	}
	p, err := startEgressd(or, dir, "egressd-tunnels", o.proxyCPU, o.egressd, egressdOpts{mode: egressdSpliced, conns: n + 1000, env: o.env()})
	if err != nil {
		return err
	}
	track(p)
	defer stop(p)
	pid := p.pid()
	time.Sleep(500 * time.Millisecond)
	names := []string{mGoroutines, mFDs, mHeap, mStack, mTunnels}
	before, err := metricsOf(p.admin, names...)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	rssBefore, _ := procMem(pid)
	cpu0 := procCPU(pid)

	connect := fmt.Appendf(nil, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", or.sink, or.sink)
	conns := make([]net.Conn, n)
	var next, failed atomic.Int64
	var firstErr error
	var errOnce sync.Once
	start := time.Now()
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				c, err := openIdle(p.addr, connect, hello)
				if err != nil {
					failed.Add(1)
					errOnce.Do(func() { firstErr = err })
					continue
				}
				conns[i] = c
			}
		})
	}
	wg.Wait()
	setup := time.Since(start)
	cpuSetup := procCPU(pid) - cpu0
	defer func() {
		for _, c := range conns {
			if c != nil {
				abort(c)
			}
		}
	}()
	opened := n - int(failed.Load())
	// every tunnel's hello must have reached the sink
	deadline := time.Now().Add(30 * time.Second)
	for or.sinkConns.Load() < int64(opened) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	atSink := or.sinkConns.Load()
	time.Sleep(o.hold)
	held, err := metricsOf(p.admin, names...)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	rssHeld, _ := procMem(pid)
	stillAtSink := or.sinkConns.Load()

	for i, c := range conns {
		if c != nil {
			abort(c)
			conns[i] = nil
		}
	}
	closed := time.Now()
	after, err := drained(p.admin, names, before, or)
	if err != nil {
		return err
	}
	drain := time.Since(closed)
	rssAfter, hwm := procMem(pid)
	mb, err := memoryAfter(p.admin, pid, closed, rssBefore, max(rssHeld, rssAfter))
	if err != nil {
		return err
	}

	perTunnel := float64(rssHeld-rssBefore) / float64(max(opened, 1))
	leakG := after[mGoroutines] - before[mGoroutines]
	leakF := after[mFDs] - before[mFDs]
	fmt.Printf("\n### Scale: %d idle CONNECT tunnels through egressd, held %s\n\n", n, o.hold)
	fmt.Print(limitNote)
	if firstErr != nil {
		fmt.Printf("%d tunnels failed to open; first error: %s\n\n", failed.Load(), oneLine(firstErr))
	}
	fmt.Println("| | before | tunnels held | after close |")
	fmt.Println("|---|--:|--:|--:|")
	fmt.Printf("| tunnels open (egressd_open_tunnels) | %.0f | %.0f | %.0f |\n", before[mTunnels], held[mTunnels], after[mTunnels])
	fmt.Printf("| tunnels at the origin sink | 0 | %d (all %d up), %d after %s | %d |\n", atSink, opened, stillAtSink, o.hold, or.sinkConns.Load())
	fmt.Printf("| RSS MiB | %.1f | %.1f | %.1f (%.1f after %s) |\n", mib(rssBefore), mib(rssHeld), mib(rssAfter), mib(mb.minute), mb.lateAt)
	fmt.Printf("| Go heap in use MiB | %.1f | %.1f | %.1f (%.1f after %s) |\n", mib(int64(before[mHeap])), mib(int64(held[mHeap])), mib(int64(after[mHeap])), mib(int64(mb.late[mHeap])), mb.lateAt)
	fmt.Printf("| Go stacks MiB | %.1f | %.1f | %.1f (%.1f after %s) |\n", mib(int64(before[mStack])), mib(int64(held[mStack])), mib(int64(after[mStack])), mib(int64(mb.late[mStack])), mb.lateAt)
	fmt.Printf("| goroutines | %.0f | %.0f | %.0f |\n", before[mGoroutines], held[mGoroutines], after[mGoroutines])
	fmt.Printf("| open fds | %.0f | %.0f | %.0f |\n", before[mFDs], held[mFDs], after[mFDs])
	fmt.Println()
	fmt.Printf("Setup: %d tunnels in %.1f s (%.0f/s, 32 at a time), proxy CPU %.0f µs per tunnel. ", opened, setup.Seconds(), float64(opened)/setup.Seconds(), float64(cpuSetup.Microseconds())/float64(max(opened, 1)))
	fmt.Printf("Memory: %.1f KiB RSS per idle tunnel; peak RSS %.1f MiB (goal < 300 MiB %s). ", perTunnel/1024, mib(hwm), okIf(true, hwm < 300<<20))
	fmt.Printf("After close: back to baseline in %.1f s; leaked goroutines %.0f, leaked fds %.0f (goal 0 %s). ", drain.Seconds(), max(leakG, 0), max(leakF, 0), okIf(true, leakG <= 0 && leakF <= 0))
	mb.perTunnel = perTunnel
	printMemoryBack(mb)
	return nil
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// memoryBack is what the idle-tunnel run saw of egressd's memory after
// the tunnels closed.
type memoryBack struct {
	before, held, minute int64         // RSS at the start, at its highest, at the end of the window
	back                 time.Duration // when RSS was back within 10 % of the growth; -1: not in the window
	late                 map[string]float64
	lateAt               time.Duration
	perTunnel            float64 // RSS bytes per open tunnel
}

// printMemoryBack says how much of the tunnels' memory came back, the
// memory per open tunnel, and where the Go runtime keeps the rest.
func printMemoryBack(m *memoryBack) {
	share := 0.0
	if grown := m.held - m.before; grown > 0 {
		share = float64(m.held-m.minute) / float64(grown)
	}
	if m.back >= 0 {
		fmt.Printf("Memory given back (RSS within 10 %% of the tunnels' growth over the baseline) %.1f s after close (goal ≤ %s %s).\n", m.back.Seconds(), giveBackWindow, okIf(true, m.back <= giveBackWindow))
	} else {
		fmt.Printf("Memory given back within %s: %.0f %% of the tunnels' growth (RSS %.1f MiB, baseline %.1f MiB; goal: within 10 %% of the baseline %s).\n", giveBackWindow, 100*share, mib(m.minute), mib(m.before), okIf(true, false))
	}
	fmt.Printf("Memory per open tunnel: %.1f KiB (goal ≤ 20 KiB %s). ", m.perTunnel/1024, okIf(true, m.perTunnel <= 20<<10))
	fmt.Printf("The Go runtime %s after close: %.1f MiB from the system, heap idle %.1f MiB (%.1f MiB of it released), GC metadata %.1f MiB, spans %.1f MiB, other %.1f MiB.\n",
		m.lateAt, mib(int64(m.late[mSys])), mib(int64(m.late[mHeapIdle])), mib(int64(m.late[mHeapReleased])), mib(int64(m.late[mGCSys])), mib(int64(m.late[mSpanSys])), mib(int64(m.late[mOtherSys])))
}

// giveBackWindow is how soon after a wave of tunnels closes their memory
// should be back with the system (issue 27's goal: within a minute).
const giveBackWindow = time.Minute

// drained waits, for up to 20 s, until egressd's goroutines and
// descriptors are back to before and the sink saw every tunnel close, and
// returns the metrics it last read.
func drained(admin string, names []string, before map[string]float64, or *origin) (map[string]float64, error) {
	start := time.Now()
	for {
		after, err := metricsOf(admin, names...)
		if err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
		if (after[mGoroutines] <= before[mGoroutines] && after[mFDs] <= before[mFDs] && or.sinkConns.Load() == 0) || time.Since(start) > 20*time.Second {
			return after, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// memoryAfter watches egressd's memory for giveBackWindow after the
// tunnels closed (givenBack), then scrapes where the runtime keeps it.
func memoryAfter(admin string, pid int, closed time.Time, before, held int64) (*memoryBack, error) {
	m := &memoryBack{before: before, held: held}
	m.back, m.minute = givenBack(pid, closed, before, held)
	late, err := metricsOf(admin, mHeap, mStack, mSys, mHeapIdle, mHeapReleased, mGCSys, mOtherSys, mSpanSys)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	m.late, m.lateAt = late, time.Since(closed).Round(time.Second)
	return m, nil
}

// givenBack polls pid's RSS from closed on, for up to giveBackWindow,
// until it is within 10 % of the held growth over the baseline: how long
// that took (-1 if it did not) and the RSS at the end.
func givenBack(pid int, closed time.Time, before, held int64) (time.Duration, int64) {
	limit := before + max(held-before, 0)/10
	for {
		rss, _ := procMem(pid)
		if rss <= limit {
			return time.Since(closed), rss
		}
		if time.Since(closed) >= giveBackWindow {
			return -1, rss
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// openIdle opens one tunnel, sends a ClientHello and leaves it idle.
func openIdle(proxy string, connect, hello []byte) (net.Conn, error) {
	c, err := dialProxy(proxy)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write(connect); err != nil {
		abort(c)
		return nil, err
	}
	resp, err := readResponse(bufio.NewReaderSize(c, 512), true)
	if err != nil {
		abort(c)
		return nil, fmt.Errorf("CONNECT: %w", err)
	}
	if resp.status != 200 {
		abort(c)
		return nil, fmt.Errorf("CONNECT: status %d", resp.status)
	}
	if _, err := c.Write(hello); err != nil {
		abort(c)
		return nil, err
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// scalePolicy loads a policy of o.hosts names and a 10-name policy in two
// egressd processes and compares HTTP keep-alive throughput by name, in
// alternating phases so drift on the shared machine hits both alike.
func scalePolicy(o *options, or *origin, dir string) error {
	const originName = "origin.bench.test"
	hostsN := func(n int) []string {
		hs := make([]string, 0, n)
		for i := range n - 1 {
			if i == (n-1)/2 {
				hs = append(hs, originName)
			}
			hs = append(hs, fmt.Sprintf("h%07d.bench.test", i))
		}
		if len(hs) < n {
			hs = append(hs, originName)
		}
		return hs
	}
	progress("scale: %d-host policy vs 10-host policy", o.hosts)
	small, err := startEgressd(or, dir, "egressd-10hosts", o.proxyCPU, o.egressd, egressdOpts{mode: egressdSpliced, hosts: hostsN(10), env: o.env(), pprof: o.profile != ""})
	if err != nil {
		return err
	}
	track(small)
	defer stop(small)
	large, err := startEgressd(or, dir, "egressd-large", o.proxyCPU, o.egressd, egressdOpts{mode: egressdSpliced, hosts: hostsN(o.hosts), env: o.env(), pprof: o.profile != ""})
	if err != nil {
		return err
	}
	track(large)
	defer stop(large)
	loadRSS, loadHWM := procMem(large.pid())
	smallRSS, _ := procMem(small.pid())
	type acc struct {
		rate, p99, cpu []float64
	}
	res := map[*proxyProc]*acc{small: {}, large: {}}
	for round := range 2 {
		for _, p := range []*proxyProc{small, large} {
			progress("scale: policy round %d, %s", round+1, p.name)
			c := &client{proxy: p.addr, origin: or, dialTO: 5 * time.Second}
			done := func() {}
			if o.profile != "" {
				done = profilePhase(p, o.profile, fmt.Sprintf("policy-%s-round%d", p.name, round+1), o.warm, o.dur)
			}
			r := runLoad(o.conns, o.warm, o.dur, p.pid(), c.keepAliveOp(originName))
			done()
			if r.errs > 0 {
				return fmt.Errorf("%s: %d errors, first: %v", p.name, r.errs, r.firstErr)
			}
			a := res[p]
			a.rate = append(a.rate, r.rate())
			a.p99 = append(a.p99, ms(r.pct(0.99)))
			a.cpu = append(a.cpu, r.cpuPerOp())
		}
	}
	mean := func(v []float64) float64 {
		s := 0.0
		for _, x := range v {
			s += x
		}
		return s / float64(len(v))
	}
	_, largeHWM := procMem(large.pid())
	ratio := mean(res[large].rate) / mean(res[small].rate)
	fmt.Printf("\n### Scale: a %d-host policy vs a 10-host policy (egressd, HTTP keep-alive GET by name)\n\n", o.hosts)
	fmt.Println("| policy | load time s | RSS after load MiB | peak RSS MiB | HTTP req/s (each round) | mean req/s | p99 ms | CPU µs/req |")
	fmt.Println("|---|--:|--:|--:|--:|--:|--:|--:|")
	for _, p := range []*proxyProc{small, large} {
		a := res[p]
		rss, hwm := smallRSS, int64(0)
		if p == large {
			rss, hwm = loadRSS, largeHWM
		} else {
			_, hwm = procMem(p.pid())
		}
		label := "10 hosts"
		if p == large {
			label = fmt.Sprintf("%d hosts", o.hosts)
		}
		fmt.Printf("| %s | %.2f | %.1f | %.1f | %.0f / %.0f | %.0f | %.2f | %.1f |\n", label, p.ready.Seconds(), mib(rss), mib(hwm),
			a.rate[0], a.rate[1], mean(a.rate), mean(a.p99), mean(a.cpu))
	}
	_ = loadHWM
	fmt.Printf("\nLarge policy req/s = %.3f× the 10-host policy (goal ≥ 0.95 %s). Load time is from exec to the first request served, including the config parse.\n", ratio, okIf(true, ratio >= 0.95))
	return nil
}
