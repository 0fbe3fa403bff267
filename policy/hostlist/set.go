package hostlist

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"math/bits"
	"os"
	"path/filepath"
	"runtime"
	"unsafe"
)

// Set is a large, read-only set of domain names loaded from a list
// file: a category or threat list of tens of millions
// of names, each of which is denied together with every name under it.
//
// It is built for that scale, not for the config's own lists: no pointer
// per name (the garbage collector sees three allocations whatever the
// size) and no random writes while loading. The names sit back to back in
// one arena, each ended by '\n'. Each name has one 8-byte entry (the top
// 32 bits of its hash, then its arena offset); the entries are radix-sorted
// by the top bits of the hash, which number the buckets, and a directory
// gives where each bucket's entries start. 40 million names of 18 bytes
// take about 760 MB of arena, 320 MB of entries and 128 MiB of directory; a
// lookup is one hash per label of the name asked about, each reading two
// neighbouring directory words and about one entry.
type Set struct {
	seed  maphash.Seed
	arena []byte   // the names, each followed by '\n'
	ents  []uint64 // hash>>32<<32 | arena offset, sorted by hash>>shift
	dir   []uint32 // bucket b's entries are ents[dir[b]:dir[b+1]]
	shift uint     // 64 - log2(number of buckets)
}

// Len is the number of distinct names in the set.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.ents)
}

// Covers reports whether name (normalized: lower case, no trailing dot)
// or a domain it is under is in the set.
func (s *Set) Covers(name string) bool {
	if s == nil || len(s.ents) == 0 {
		return false
	}
	found := s.covers(name)
	runtime.KeepAlive(s) // its arrays may be mappings, unmapped once s is unreachable
	return found
}

func (s *Set) covers(name string) bool {
	for {
		if s.has(name) {
			return true
		}
		i := indexDot(name)
		if i < 0 {
			return false
		}
		name = name[i+1:]
	}
}

func indexDot(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] == '.' {
			return i
		}
	}
	return -1
}

func (s *Set) has(name string) bool {
	h := maphash.String(s.seed, name)
	b := h >> s.shift
	for _, e := range s.ents[s.dir[b]:s.dir[b+1]] {
		if e>>32 == h>>32 && s.nameAt(uint32(e), name) {
			return true
		}
	}
	return false
}

// nameAt reports whether the arena holds exactly name at off.
func (s *Set) nameAt(off uint32, name string) bool {
	end := int(off) + len(name)
	return end < len(s.arena) && s.arena[end] == '\n' && string(s.arena[off:end]) == name
}

// maxSetArena keeps arena offsets within 32 bits.
const maxSetArena = 1<<32 - 1

// Load reads a list file: one domain name per line; blank lines
// and lines starting with '#' are skipped; a leading "*." or a trailing dot
// is dropped (a name always covers the names under it). Names must be
// ASCII (IDNs in their xn-- form) and at most 253 bytes, labels of 1 to 63
// letters, digits, '-' or '_'. A bad line fails the load with its line
// number: a list is never partly applied.
func Load(path string) (*Set, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("host list: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("host list: %w", err)
	}
	st, stamped := fileStamp(fi)
	if abs, err := filepath.Abs(path); err == nil && stamped {
		path = abs
		if s := cachedList(path, st); s != nil {
			return s, nil
		}
	}
	if fi.Size() >= hugeMapMin/4 && mappedBytes.Load() > 0 {
		// This list will be mapped too. Sets already dropped (a replaced
		// policy's) give their mappings back in cleanups, after a
		// collection; the collector does not see memory outside the heap
		// and a policy of big lists has a small heap, so without this a
		// list changed and reloaded again and again piles up a copy per
		// reload until a collection happens to run.
		runtime.GC()
	}
	s, err := read(f, fi.Size())
	if err != nil {
		return nil, fmt.Errorf("host list %s: %w", path, err)
	}
	if fi, err := f.Stat(); err == nil && stamped {
		if after, ok := fileStamp(fi); ok {
			rememberList(path, st, after, s)
		}
	}
	return s, nil
}

// read builds a set from r; sizeHint (the file size, or 0) sizes
// the arena once, since no name is longer in the arena than on its line.
func read(r io.Reader, sizeHint int64) (*Set, error) {
	s := &Set{seed: maphash.MakeSeed()}
	var mem bigAlloc
	built := false
	defer func() {
		if built {
			mem.freeWith(s)
		} else { // nothing holds the arrays of a set that failed to load
			mem.freeAll()
		}
	}()
	var ents []uint64 // per name: its hash's top 32 bits, then its offset
	if sizeHint > 0 && sizeHint <= maxSetArena {
		s.arena = mem.bytes(int(sizeHint)+1, true)[:0]
		// A line holds at least a byte and '\n': room for every name the
		// file may hold, of which only the pages used are ever touched.
		ents = mem.uint64sUpTo(int(sizeHint/2) + 1)
	}
	br := bufio.NewReaderSize(r, 1<<20)
	for line := 1; ; line++ {
		b, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			return nil, fmt.Errorf("line %d: longer than 1 MiB", line)
		}
		if len(b) > 0 {
			name, bad := normalizeListName(b)
			if bad != "" {
				return nil, fmt.Errorf("line %d: %s", line, bad)
			}
			if len(name) > 0 {
				if len(s.arena)+len(name)+1 > maxSetArena {
					return nil, errors.New("over 4 GiB of names: split the list")
				}
				h := maphash.Bytes(s.seed, name) // while the name is in the cache
				ents = append(ents, h>>32<<32|uint64(len(s.arena)))
				s.arena = append(s.arena, name...)
				s.arena = append(s.arena, '\n')
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	// The arena was sized by the file: what comments, prefixes and line
	// ends took there is given back, not held while the set lives.
	mem.trimBytes(unsafe.Pointer(unsafe.SliceData(s.arena)), len(s.arena))
	s.arena = s.arena[:len(s.arena):len(s.arena)]
	mem.trim(ents)
	s.index(ents[:len(ents):len(ents)], &mem)
	built = true
	return s, nil
}

// index sorts the entries, one per name in the arena, and builds the
// directory over them, dropping duplicates. Every pass reads and writes
// memory in order (a hash table filled name by name takes a cache and TLB
// miss per name: most of a 40-million-name load).
func (s *Set) index(ents []uint64, mem *bigAlloc) {
	bucketBits := max(bits.Len(uint(len(ents)))-1, 1) // about one name per bucket
	s.shift = uint(64 - bucketBits)
	s.dir = mem.uint32s(1<<bucketBits+1, false)
	ents = radixSortTop(ents, mem.uint64s(len(ents), false), s.shift, mem)
	w, next := 0, uint64(0) // ents kept so far; the first bucket not yet started
	for i := 0; i < len(ents); {
		b := ents[i] >> s.shift
		for ; next <= b; next++ {
			s.dir[next] = uint32(w)
		}
		start := w
		for ; i < len(ents) && ents[i]>>s.shift == b; i++ {
			if !s.holds(ents[start:w], ents[i]) {
				ents[w] = ents[i]
				w++
			}
		}
	}
	for ; next < uint64(len(s.dir)); next++ {
		s.dir[next] = uint32(w)
	}
	s.ents = ents[:w:w]
}

// holds reports whether one of ents names the same name as e.
func (s *Set) holds(ents []uint64, e uint64) bool {
	for _, k := range ents {
		if k>>32 == e>>32 {
			off := uint32(e) // read the name only on a tag match: it is a cache miss
			name := s.arena[off : int(off)+bytes.IndexByte(s.arena[off:], '\n')]
			if s.nameAt(uint32(k), string(name)) {
				return true
			}
		}
	}
	return false
}

// radixSortTop sorts ents by their bits from shift up (LSD radix sort, at
// most 8 bits a pass: 256 write streams stay within the TLB), using tmp
// (as long as ents) as scratch; it returns the sorted one of the two and
// gives the other back to mem.
func radixSortTop(ents, tmp []uint64, shift uint, mem *bigAlloc) []uint64 {
	defer func() { mem.free(tmp) }()
	width := 64 - shift
	passes := (width + 7) / 8
	var count [1 << 8]int
	for p := range passes {
		lo := shift + p*width/passes
		hi := shift + (p+1)*width/passes
		mask := uint64(1)<<(hi-lo) - 1
		clear(count[:])
		for _, e := range ents {
			count[e>>lo&mask]++
		}
		sum := 0
		for i, c := range count[:mask+1] {
			count[i] = sum
			sum += c
		}
		for _, e := range ents {
			d := e >> lo & mask
			tmp[count[d]] = e
			count[d]++
		}
		ents, tmp = tmp, ents
	}
	return ents
}

// normalizeListName lower-cases one list line in place and checks it;
// an empty name is a blank or comment line.
func normalizeListName(b []byte) (name []byte, bad string) {
	b = trimListLine(b)
	if len(b) == 0 || b[0] == '#' {
		return nil, ""
	}
	if len(b) > 2 && b[0] == '*' && b[1] == '.' {
		b = b[2:]
	}
	if b[len(b)-1] == '.' {
		b = b[:len(b)-1]
	}
	if len(b) == 0 || len(b) > 253 {
		return nil, fmt.Sprintf("%.80q: want a domain name of 1 to 253 bytes", b)
	}
	if bad := lowerListLabels(b); bad != "" {
		return nil, bad
	}
	return b, ""
}

// trimListLine drops the line end and the blanks around a list line.
func trimListLine(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r' || b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	return b
}

// lowerListLabels lower-cases the name b in place, label by label, and
// says what is wrong with it: a byte outside [a-z0-9-_.], an empty or
// over-long label, or digits only (an address). The message quotes b as
// lower-cased so far.
func lowerListLabels(b []byte) string {
	label, digitsOnly := 0, true
	for i, c := range b {
		switch {
		case 'A' <= c && c <= 'Z':
			b[i] = c + 'a' - 'A'
			digitsOnly = false
		case 'a' <= c && c <= 'z', c == '-', c == '_':
			digitsOnly = false
		case '0' <= c && c <= '9':
		case c == '.':
			if label == 0 {
				return fmt.Sprintf("%.80q: empty label", b)
			}
			label = 0
			continue
		default:
			return fmt.Sprintf("%.80q: byte %q is not allowed in a name (IDNs go in their xn-- form)", b, c)
		}
		label++
		if label > 63 {
			return fmt.Sprintf("%.80q: a label over 63 bytes", b)
		}
	}
	if label == 0 {
		return fmt.Sprintf("%.80q: empty label", b)
	}
	if digitsOnly {
		return fmt.Sprintf("%.80q is an address, not a name: put addresses in deny.cidrs", b)
	}
	return ""
}
