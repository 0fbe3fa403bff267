package hostlist

import (
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mappedBytes is what mapBytes has mapped and unmapBytes not yet returned.
var mappedBytes atomic.Int64

// mapBytes returns n zero bytes for one of a large list's arrays, mapped
// outside the Go heap and advised onto huge pages. A 40-million-name list
// touches over a gigabyte while it loads: with 4 KiB pages that is a
// quarter of a million page faults (a third of the load time on a VM), and
// then a TLB miss per lookup. ok is false where the kernel refuses; the
// caller then uses the heap.
func mapBytes(n int) (b []byte, ok bool) {
	if n < hugeMapMin {
		return nil, false
	}
	p, err := unix.MmapPtr(-1, 0, nil, uintptr(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, false
	}
	b = unsafe.Slice((*byte)(p), n)
	_ = unix.Madvise(b, unix.MADV_HUGEPAGE) // a hint: without it the pages are small
	mappedBytes.Add(int64(n))
	return b, true
}

// unmapBytes returns (part of) a mapping from mapBytes to the kernel; b
// starts on a page.
func unmapBytes(b []byte) {
	if len(b) > 0 && unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(b)), uintptr(len(b))) == nil {
		mappedBytes.Add(-int64(len(b)))
	}
}

// fileStamp identifies one version of an open list file: any write to it
// changes its ctime, which no user can set back.
func fileStamp(fi os.FileInfo) (listStamp, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return listStamp{}, false
	}
	return listStamp{
		dev: uint64(st.Dev), ino: st.Ino, size: st.Size,
		mtime: time.Unix(st.Mtim.Unix()), ctime: time.Unix(st.Ctim.Unix()),
	}, true
}

// prefault faults b's pages in (on the caller's thread: bigAlloc runs it
// on a goroutine of its own), so that a loader filling b front to back
// finds them there (the faults are the cost of first use of memory, and a
// list's loader is one goroutine); a no-op where the kernel lacks
// MADV_POPULATE_WRITE (before 5.14).
func prefault(b []byte) {
	if len(b) >= hugeMapMin {
		unix.Madvise(b, unix.MADV_POPULATE_WRITE)
	}
}
