package hostlist

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/testutil"
)

func TestSet(t *testing.T) {
	list := "# threat list\n\nEvil.Example\n*.tracker.example.\n  spaced.example  \r\nevil.example\nx_y.example\n"
	s, err := read(strings.NewReader(list), 0)
	if err != nil {
		t.Fatal(err)
	}
	if s.Len() != 4 {
		t.Errorf("Len %d, want 4 (a duplicate dropped)", s.Len())
	}
	for name, want := range map[string]bool{
		"evil.example": true, "a.b.evil.example": true, "tracker.example": true, "x.tracker.example": true,
		"spaced.example": true, "x_y.example": true,
		"example": false, "notevil.example": false, "evil.example.org": false, "": false, "good.example": false,
	} {
		if got := s.Covers(name); got != want {
			t.Errorf("Covers(%q) = %v, want %v", name, got, want)
		}
	}
	for _, tt := range []struct{ list, want string }{
		{"ok.example\n1.2.3.4\n", "line 2"},
		{"a..b\n", "empty label"},
		{"bücher.example\n", "xn--"},
		{strings.Repeat("a", 64) + ".example\n", "63"},
		{"a b.example\n", "not allowed"},
	} {
		if _, err := read(strings.NewReader(tt.list), 0); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: %v, want an error containing %q", tt.list, err, tt.want)
		}
	}
	var empty *Set
	if empty.Covers("x.example") {
		t.Error("a nil set covers a name")
	}
}

func FuzzSet(f *testing.F) {
	f.Add("evil.example\n# c\n*.x.example.\n")
	f.Add("a..b\n\r\n")
	f.Fuzz(func(t *testing.T, list string) {
		s, err := read(strings.NewReader(list), int64(len(list)))
		if err != nil {
			return
		}
		// every accepted name is covered, under its normalized form
		for l := range strings.SplitSeq(list, "\n") {
			n, bad := normalizeListName([]byte(l))
			if bad == "" && len(n) > 0 && !s.Covers(string(n)) {
				t.Fatalf("accepted %q but does not cover it", n)
			}
		}
	})
}

// writeList generates a list of n names like a category list's
// (registrable domains and hosts under them, 10–30 bytes) at path.
func writeList(tb testing.TB, path string, n int) {
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	for i := range n {
		if i%3 == 0 {
			fmt.Fprintf(w, "cdn%d.site%d.example\n", i%7, i)
		} else {
			fmt.Fprintf(w, "site%d.example\n", i)
		}
	}
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
	f.Close()
}

// listSize is the list size for the benchmarks: EGRESSD_LIST_NAMES, else
// one million (40 million needs ~2 GiB of RAM and a minute).
func listSize() int {
	if n, err := strconv.Atoi(os.Getenv("EGRESSD_LIST_NAMES")); err == nil && n > 0 {
		return n
	}
	return 1_000_000
}

// BenchmarkSetLoad loads a generated list and reports the names and
// testutil.MeasureLoad's figures.
func BenchmarkSetLoad(b *testing.B) {
	n := listSize()
	path := filepath.Join(b.TempDir(), "list.txt")
	writeList(b, path, n)
	b.ResetTimer()
	for range b.N {
		var s *Set
		testutil.MeasureLoad(b, MappedBytes, func() (any, error) {
			var err error
			s, err = Load(path)
			return s, err
		})
		b.ReportMetric(float64(s.Len()), "names")
	}
}

// BenchmarkSetCovers: lookups of a 4-label name against the
// generated list — a hit on its registrable domain, and a miss (4 probes).
func BenchmarkSetCovers(b *testing.B) {
	n := listSize()
	path := filepath.Join(b.TempDir(), "list.txt")
	writeList(b, path, n)
	s, err := Load(path)
	if err != nil {
		b.Fatal(err)
	}
	hits := make([]string, 1024)
	misses := make([]string, 1024)
	for i := range hits {
		k := (i*7919)%n/3*3 + 1 // a name listed as site<k>.example
		hits[i] = fmt.Sprintf("a.b.site%d.example", k)
		misses[i] = fmt.Sprintf("a.b.other%d.example", k)
	}
	b.Run("hit", func(b *testing.B) {
		for i := range b.N {
			if !s.Covers(hits[i&1023]) {
				b.Fatal("miss")
			}
		}
	})
	b.Run("miss", func(b *testing.B) {
		for i := range b.N {
			if s.Covers(misses[i&1023]) {
				b.Fatal("hit")
			}
		}
	})
}

// TestSetMatchesAMap: a list big enough for mapped arrays and for
// buckets of several names, with duplicates in other cases and spellings,
// answers as a map of its names does; a dropped set's mappings are given
// back.
func TestSetMatchesAMap(t *testing.T) {
	base := mappedBytes.Load()
	var list strings.Builder
	want := map[string]bool{}
	for i := range 400_000 {
		name := fmt.Sprintf("h%d.site%d.example", i%13, i)
		want[name] = true
		list.WriteString(name + "\n")
		if i%5 == 0 { // the same name again, as a list may have it
			fmt.Fprintf(&list, "*.H%d.Site%d.Example.\n", i%13, i)
		}
	}
	s, err := read(strings.NewReader(list.String()), int64(list.Len()))
	if err != nil {
		t.Fatal(err)
	}
	if s.Len() != len(want) {
		t.Errorf("Len %d, want %d distinct names", s.Len(), len(want))
	}
	if runtime.GOOS == "linux" && mappedBytes.Load() <= base {
		t.Error("a list of this size is not in mapped arrays: the mapping path is untested")
	}
	for name := range want {
		if !s.Covers(name) || !s.Covers("a.b."+name) {
			t.Fatalf("%s (or a name under it) not covered", name)
		}
	}
	for i := range 100_000 {
		for _, name := range []string{fmt.Sprintf("h%d.site%d.example", (i+1)%13, i), fmt.Sprintf("site%d.example", i), fmt.Sprintf("h%d.site%d.example.org", i%13, i)} {
			if s.Covers(name) {
				t.Fatalf("%s covered, not listed", name)
			}
		}
	}
	s = nil
	for i := 0; mappedBytes.Load() > base; i++ { // cleanups run after a collection
		if i == 1000 {
			t.Fatalf("%d mapped bytes still held after the set was dropped", mappedBytes.Load()-base)
		}
		runtime.GC()
		runtime.Gosched()
	}
}

// TestSetSizes: lists of 0, 1 and 2 names.
func TestSetSizes(t *testing.T) {
	for _, list := range []string{"", "# only a comment\n", "one.example", "one.example\ntwo.example\n"} {
		s, err := read(strings.NewReader(list), int64(len(list)))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := s.Covers("x.one.example"), strings.Contains(list, "one."); got != want {
			t.Errorf("%q covers x.one.example: %v", list, got)
		}
		if s.Covers("three.example") || s.Covers("example") {
			t.Errorf("%q covers an unlisted name", list)
		}
	}
}

// TestListSharedWhileUnchanged: a reload of a list whose file has not
// changed shares the loaded set (no second copy, no second load); a
// changed file is read again, even at the same size and mtime; a file
// changed within racyWindow of the load is never shared.
func TestListSharedWhileUnchanged(t *testing.T) {
	dir := t.TempDir()
	list := filepath.Join(dir, "threats.txt")
	load := func() *Set {
		t.Helper()
		s, err := Load(list)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	os.WriteFile(list, []byte("bad.example.com\n"), 0o600)
	if a, b := load(), load(); a == b {
		t.Error("a list changed just now is shared: a second change in the same clock tick would go unseen")
	}
	defer func(now func() time.Time) { listNow = now }(listNow)
	listNow = func() time.Time { return time.Now().Add(time.Hour) }
	a := load()
	if b := load(); b != a {
		t.Error("an unchanged list is loaded again on every reload")
	}
	fi, _ := os.Stat(list)
	waitFileClockPast(t, dir, fi)
	os.WriteFile(list, []byte("bad.example.org\n"), 0o600) // same size
	os.Chtimes(list, fi.ModTime(), fi.ModTime())           // and mtime
	c := load()
	if c == a || !c.Covers("bad.example.org") || c.Covers("bad.example.com") {
		t.Error("a rewritten list is not read again")
	}
}

// waitFileClockPast returns once the file system's clock, which stamps
// ctime in coarse ticks, is past fi's change time (as it always is for a
// list shared after racyWindow), by touching a scratch file until its
// ctime is later.
func waitFileClockPast(t *testing.T, dir string, fi os.FileInfo) {
	t.Helper()
	st, ok := fileStamp(fi)
	if !ok {
		t.Skip("no ctime on this platform: lists are not shared")
	}
	scratch := filepath.Join(dir, "clock")
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		if time.Now().After(deadline) {
			t.Fatal("the file system's ctime did not move in 10 s")
		}
		os.WriteFile(scratch, []byte{byte(i)}, 0o600)
		sfi, err := os.Stat(scratch)
		if err != nil {
			t.Fatal(err)
		}
		if now, _ := fileStamp(sfi); now.ctime.After(st.ctime) {
			return
		}
	}
}

// TestSetKeepsOnlyItsNames: the arena is mapped (and faulted in) at
// the file's size before the names are known; what the names do not use
// (comment lines, "*." prefixes, CRLF line ends) is given back once the
// list is read, not held as long as the set lives.
func TestSetKeepsOnlyItsNames(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("lists are mapped on Linux only")
	}
	var list strings.Builder
	for i := 0; list.Len() < 8<<20; i++ {
		if i%100 == 0 {
			fmt.Fprintf(&list, "*.n%d.example.\r\n", i)
		} else {
			list.WriteString("# a line of a comment block, as list headers and sections have\r\n")
		}
	}
	base := mappedBytes.Load()
	s, err := read(strings.NewReader(list.String()), int64(list.Len()))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Covers("a.n100.example") {
		t.Fatal("a listed name is not covered")
	}
	if kept := mappedBytes.Load() - base; kept > 1<<20 {
		t.Errorf("a list of %d names of %d bytes holds %d mapped bytes", s.Len(), list.Len(), kept)
	}
	runtime.KeepAlive(s)
}

// TestFailedListLoadGivesBackItsMemory: a list that fails to load (a bad
// name on its last line) gives back the arrays mapped for it at once: a
// reload retried against a bad list must not pile them up until a
// collection happens to run (the heap barely grows, so that can be minutes).
func TestFailedListLoadGivesBackItsMemory(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("lists are mapped on Linux only")
	}
	path := filepath.Join(t.TempDir(), "bad.txt")
	var list strings.Builder
	for i := 0; list.Len() < 8<<20; i++ {
		fmt.Fprintf(&list, "n%d.example\n", i)
	}
	list.WriteString("bad name\n")
	if err := os.WriteFile(path, []byte(list.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	base := mappedBytes.Load()
	for range 3 {
		if _, err := Load(path); err == nil {
			t.Fatal("a bad list loaded")
		}
		if held := mappedBytes.Load() - base; held != 0 {
			t.Fatalf("a failed load still holds %d mapped bytes", held)
		}
	}
}

// TestSetLookupsWhileReloadedAndCollected: lookups on lists in
// mapped memory while lists are reloaded (read again, or shared through
// the cache), dropped and collected, and their mappings given back: a
// lookup on a set whose memory was unmapped under it would crash the test
// binary, a wrong answer fails it. Run it under -race too.
func TestSetLookupsWhileReloadedAndCollected(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "list.txt")
	const n = 250_000 // over 4 MiB: the arrays are mappings
	writeList(t, path, n)
	defer func(now func() time.Time) { listNow = now }(listNow)
	listNow = func() time.Time { return time.Now().Add(time.Hour) } // shared while unchanged
	first, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	var cur atomic.Pointer[Set]
	cur.Store(first)
	first = nil
	done := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for r := range 2 {
		wg.Go(func() {
			for i := r; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				k := i % n
				listed := fmt.Sprintf("site%d.example", k)
				if k%3 == 0 {
					listed = fmt.Sprintf("cdn%d.site%d.example", k%7, k)
				}
				// The set is loaded for each lookup: nothing but Covers
				// keeps it alive while it looks.
				if !cur.Load().Covers(listed) || !cur.Load().Covers("a."+listed) || cur.Load().Covers(fmt.Sprintf("site%d.example", n+k)) {
					errs <- fmt.Sprintf("wrong answer for %s", listed)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
				runtime.GC()
			}
		}
	})
	for round := range 6 {
		if round%2 == 1 { // a changed file is read again: a new set
			f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(f, "# round %d\n", round)
			f.Close()
		}
		s, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		cur.Store(s)
	}
	close(done)
	wg.Wait()
	select {
	case e := <-errs:
		t.Fatal(e)
	default:
	}
}

// TestDenyListChangesAreSeen: the ways a list file is replaced or
// rewritten in place, each keeping the old size and mtime, all make a
// reload read it again rather than share the set loaded before.
func TestDenyListChangesAreSeen(t *testing.T) {
	defer func(now func() time.Time) { listNow = now }(listNow)
	listNow = func() time.Time { return time.Now().Add(time.Hour) } // shared while unchanged
	const newList = "bad.example.org\n"
	for _, tc := range []struct {
		name   string
		change func(dir, path string) error
	}{
		{"renamed over", func(dir, path string) error {
			if err := os.WriteFile(path+".new", []byte(newList), 0o600); err != nil {
				return err
			}
			return os.Rename(path+".new", path)
		}},
		{"truncated and rewritten", func(dir, path string) error {
			return os.WriteFile(path, []byte(newList), 0o600)
		}},
		{"written through a hard link", func(dir, path string) error {
			other := filepath.Join(dir, "other.txt")
			if err := os.Link(path, other); err != nil {
				return err
			}
			f, err := os.OpenFile(other, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.WriteString(newList)
			return err
		}},
		{"deleted and created again", func(dir, path string) error { // may get the same inode
			if err := os.Remove(path); err != nil {
				return err
			}
			return os.WriteFile(path, []byte(newList), 0o600)
		}},
		{"a symlink retargeted", func(dir, path string) error {
			if err := os.WriteFile(filepath.Join(dir, "v2.txt"), []byte(newList), 0o600); err != nil {
				return err
			}
			if err := os.Symlink("v2.txt", path+".new"); err != nil {
				return err
			}
			return os.Rename(path+".new", path)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "list.txt")
			if tc.name == "a symlink retargeted" {
				os.WriteFile(filepath.Join(dir, "v1.txt"), []byte("bad.example.com\n"), 0o600)
				os.Symlink("v1.txt", path)
			} else {
				os.WriteFile(path, []byte("bad.example.com\n"), 0o600)
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			a, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			if b, _ := Load(path); b != a {
				t.Fatal("an unchanged list is not shared")
			}
			waitFileClockPast(t, dir, fi)
			if err := tc.change(dir, path); err != nil {
				t.Fatal(err)
			}
			os.Chtimes(path, fi.ModTime(), fi.ModTime())
			c, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			if c == a || !c.Covers("bad.example.org") || c.Covers("bad.example.com") {
				t.Error("the changed list is not read again")
			}
		})
	}
}

// TestReloadedListsDoNotPileUp: a dropped set's mappings are given back by
// a cleanup, which runs only after a collection; the collector knows
// nothing of memory outside the heap, and a policy of big lists has a
// small heap, so a list changed and reloaded again and again piled up a
// copy per reload until a collection happened to run. A load that maps
// memory while sets are mapped collects first.
func TestReloadedListsDoNotPileUp(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("lists are mapped on Linux only")
	}
	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // a quiet heap: no collection of its own
	path := filepath.Join(t.TempDir(), "list.txt")
	writeList(t, path, 250_000) // over 4 MiB: mapped
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	// A set maps about its file's size. Other tests' dropped sets can only
	// be given back meanwhile, lowering the count, never raising it.
	base := mappedBytes.Load()
	for round := range 8 {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(f, "# round %d\n", round) // changed: read again
		f.Close()
		s, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		runtime.KeepAlive(s) // then dropped, as a replaced policy's list is
	}
	for i := 0; mappedBytes.Load()-base > 3*fi.Size(); i++ { // the last cleanups may still be queued
		if i == 100_000 {
			t.Fatalf("8 reloads of a list of %d bytes hold %d mapped bytes", fi.Size(), mappedBytes.Load()-base)
		}
		runtime.Gosched()
	}
}
