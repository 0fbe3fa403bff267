//go:build unix

package testutil

import "syscall"

// CPUSeconds is the process's user and system CPU time so far: on a
// shared machine a load's wall time says more about the neighbours.
func CPUSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}
