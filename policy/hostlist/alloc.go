package hostlist

import (
	"os"
	"runtime"
	"slices"
	"sync"
	"unsafe"
)

// hugeMapMin: smaller arrays stay on the heap (a huge page is 2 MiB).
const hugeMapMin = 4 << 20

// bigAlloc hands out the large arrays of one Set: mappings outside
// the Go heap where the platform gives them (mapBytes), heap slices
// otherwise. The mappings live as long as the set does.
type bigAlloc struct {
	maps [][]byte
	// warming: prefaults still running. A mapping is not given back under
	// one: the address range could be mapped again for something else,
	// which the prefault would then fault in.
	warming sync.WaitGroup
}

// bytes returns n zero bytes; warm ones are faulted in on another thread
// (prefault) for a caller about to fill them.
func (a *bigAlloc) bytes(n int, warm bool) []byte {
	if m, ok := mapBytes(n); ok {
		a.maps = append(a.maps, m)
		if warm {
			a.warming.Go(func() { prefault(m) })
		}
		return m
	}
	return make([]byte, n)
}

func (a *bigAlloc) uint64s(n int, warm bool) []uint64 {
	if m, ok := mapBytes(n * 8); ok { // page-aligned, so aligned for uint64
		a.maps = append(a.maps, m)
		if warm {
			a.warming.Go(func() { prefault(m) })
		}
		return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(m))), n)
	}
	return make([]uint64, n)
}

// uint64sUpTo returns an empty slice with room for max, where only the
// part used will take memory (a mapping); on the heap it starts smaller
// and grows as appended to.
func (a *bigAlloc) uint64sUpTo(max int) []uint64 {
	if m, ok := mapBytes(max * 8); ok {
		a.maps = append(a.maps, m)
		return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(m))), max)[:0]
	}
	return make([]uint64, 0, max/8)
}

func (a *bigAlloc) uint32s(n int, warm bool) []uint32 {
	if m, ok := mapBytes(n * 4); ok {
		a.maps = append(a.maps, m)
		if warm {
			a.warming.Go(func() { prefault(m) })
		}
		return unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(m))), n)
	}
	return make([]uint32, n)
}

// trim gives back the pages of x's mapping past len(x), if x is one:
// x's capacity must not be used afterwards.
func (a *bigAlloc) trim(x []uint64) {
	a.trimBytes(unsafe.Pointer(unsafe.SliceData(x)), len(x)*8)
}

// trimBytes gives back the pages past the first n bytes of the mapping
// at p, if p is one.
func (a *bigAlloc) trimBytes(p unsafe.Pointer, n int) {
	for i, m := range a.maps {
		if unsafe.Pointer(unsafe.SliceData(m)) == p {
			page := os.Getpagesize()
			keep := (n + page - 1) / page * page
			if keep < len(m) {
				a.warming.Wait()
				unmapBytes(m[keep:])
				a.maps[i] = m[:keep]
			}
			return
		}
	}
}

// free gives back the mapping behind x at once (scratch space), if x is
// one; a heap slice is left to the collector.
func (a *bigAlloc) free(x []uint64) {
	p := unsafe.Pointer(unsafe.SliceData(x))
	for i, m := range a.maps {
		if unsafe.Pointer(unsafe.SliceData(m)) == p {
			a.warming.Wait()
			unmapBytes(m)
			a.maps = slices.Delete(a.maps, i, i+1)
			return
		}
	}
}

// freeAll gives back every mapping at once: for a set that failed to
// load, whose arrays nothing else holds.
func (a *bigAlloc) freeAll() {
	a.warming.Wait()
	for _, m := range a.maps {
		unmapBytes(m)
	}
	a.maps = nil
}

// freeWith unmaps what is left once s is unreachable. Every method that
// reads s's arrays keeps s alive until it is done (runtime.KeepAlive).
func (a *bigAlloc) freeWith(s *Set) {
	if len(a.maps) == 0 {
		return
	}
	a.warming.Wait()
	runtime.AddCleanup(s, func(maps [][]byte) {
		for _, m := range maps {
			unmapBytes(m)
		}
	}, a.maps)
}
