//go:build !unix

package testutil

// CPUSeconds is 0 where the platform gives no rusage.
func CPUSeconds() float64 { return 0 }
