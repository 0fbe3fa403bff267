//go:build !linux

package hostlist

import (
	"os"
	"sync/atomic"
)

var mappedBytes atomic.Int64 // stays 0

// mapBytes: huge-page mappings are a Linux-only optimisation; elsewhere
// the arrays live on the heap.
func mapBytes(n int) ([]byte, bool) { return nil, false }

func unmapBytes([]byte) {}

// fileStamp: no reuse of loaded lists where the platform gives no ctime.
func fileStamp(os.FileInfo) (listStamp, bool) { return listStamp{}, false }

func prefault([]byte) {}
