//go:build linux

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTick is USER_HZ, the unit of utime and stime in /proc/<pid>/stat;
// it is 100 on every Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

// procCPU is the user+system CPU of pid and of its live descendants
// (squid and tinyproxy may run helpers); 0 for pid 0.
func procCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	var ticks int64
	for _, p := range append([]int{pid}, descendants(pid)...) {
		f := statFields(p)
		if len(f) < 13 {
			continue
		}
		// fields after "(comm)": state is [0], utime [11], stime [12],
		// and cutime, cstime (children already reaped) [13], [14]
		n := 13
		if p == pid {
			n = 15
		}
		for _, s := range f[11:n] {
			t, _ := strconv.ParseInt(s, 10, 64)
			ticks += t
		}
	}
	return time.Duration(ticks) * clockTick
}

// statFields returns the fields of /proc/pid/stat after the command name.
func statFields(pid int) []string {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return nil
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// descendants lists the live processes below pid.
func descendants(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	parent := map[int]int{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f := statFields(p)
		if len(f) < 2 {
			continue
		}
		pp, _ := strconv.Atoi(f[1])
		parent[p] = pp
	}
	var out []int
	for p := range parent {
		for q := parent[p]; q > 1; q = parent[q] {
			if q == pid {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// procMem returns VmRSS and VmHWM (peak RSS) of pid in bytes, summed over
// its live descendants.
func procMem(pid int) (rss, hwm int64) {
	for _, p := range append([]int{pid}, descendants(pid)...) {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p), "status"))
		if err != nil {
			continue
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			switch k {
			case "VmRSS":
				rss += kb << 10
			case "VmHWM":
				hwm += kb << 10
			}
		}
	}
	return rss, hwm
}
