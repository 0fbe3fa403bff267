package hostlist

import (
	"sync"
	"time"
	"weak"
)

// A reload re-reads the config, and with it every deny.hosts_files list: a
// 40-million-name list takes seconds and over a gigabyte, twice over while
// the old policy still serves. A list whose file has not changed since it
// was loaded is shared instead (a Set is never changed once built).

// listStamp identifies one version of a list file.
type listStamp struct {
	dev, ino     uint64
	size         int64
	mtime, ctime time.Time
}

// racyWindow: a file changed this recently may change again within the
// same timestamp tick (coarse kernel clocks), leaving its stamp equal;
// such a file is not shared, as git treats a "racily clean" index.
const racyWindow = 2 * time.Second

// listNow is the clock for racyWindow (tests move it).
var listNow = time.Now

var listCache = struct {
	sync.Mutex
	m map[string]listCached
}{m: map[string]listCached{}}

type listCached struct {
	stamp listStamp
	set   weak.Pointer[Set] // the cache never keeps a list alive
}

// cachedList returns the set loaded from path when its file is unchanged.
func cachedList(path string, st listStamp) *Set {
	listCache.Lock()
	defer listCache.Unlock()
	c, ok := listCache.m[path]
	if !ok || c.stamp != st {
		return nil
	}
	return c.set.Value()
}

// rememberList records s as loaded from path at st (before the read) when
// the file was not changed during the read (after) nor very recently.
func rememberList(path string, st, after listStamp, s *Set) {
	if st != after || listNow().Sub(later(st.mtime, st.ctime)) < racyWindow {
		return
	}
	listCache.Lock()
	defer listCache.Unlock()
	for p, c := range listCache.m { // drop the entries of freed sets
		if c.set.Value() == nil {
			delete(listCache.m, p)
		}
	}
	listCache.m[path] = listCached{stamp: st, set: weak.Make(s)}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// MappedBytes is what the package holds mapped outside the Go heap now
// (0 where lists are not mapped): for benchmarks and leak tests.
func MappedBytes() int64 { return mappedBytes.Load() }
