package policy

import (
	"hash/maphash"
	"iter"
	"slices"
)

// hostIndex maps host names to an int32 and holds no pointer per name: the
// names live back to back in one byte arena and the open-addressing table
// holds offsets into it. A map[string]int32 of a million names is a million
// pointers the garbage collector marks on every cycle, which slowed every
// request while a large policy was loaded (bench/RESULTS.md); this index is
// two pointer-free allocations however many names it holds.
//
// It is built once while a policy compiles and only read afterwards, so it
// needs no locking and supports no deletion.
type hostIndex struct {
	seed  maphash.Seed
	arena []byte
	slots []hostSlot // len is 0 or a power of two, at most half full
	n     int
}

type hostSlot struct {
	hash uint32
	off  uint32 // offset of the name in arena
	n    uint32 // name length + 1; 0 marks an empty slot
	val  int32
}

// maxArena bounds the arena so offsets fit a uint32; a policy that large is
// refused at compile time, never truncated.
const maxArena = 1<<32 - 1

// Len is the number of names in the index.
func (x *hostIndex) Len() int { return x.n }

// find returns the slot holding name, or the empty slot where it would go.
func (x *hostIndex) find(name string, h uint32) int {
	mask := len(x.slots) - 1
	for i := int(h) & mask; ; i = (i + 1) & mask {
		s := &x.slots[i]
		if s.n == 0 || s.hash == h && int(s.n-1) == len(name) && string(x.arena[s.off:s.off+s.n-1]) == name {
			return i
		}
	}
}

// findBytes is find for a name in the arena itself (the build), without
// a string made of it.
func (x *hostIndex) findBytes(name []byte, h uint32) int {
	mask := len(x.slots) - 1
	for i := int(h) & mask; ; i = (i + 1) & mask {
		s := &x.slots[i]
		if s.n == 0 || s.hash == h && int(s.n-1) == len(name) && string(x.arena[s.off:s.off+s.n-1]) == string(name) {
			return i
		}
	}
}

func (x *hostIndex) hash(name string) uint32 { return uint32(maphash.String(x.seed, name)) }

// hashBytes is hash of string(name), without the copy.
func (x *hostIndex) hashBytes(name []byte) uint32 { return uint32(maphash.Bytes(x.seed, name)) }

// get returns the value stored for name.
func (x *hostIndex) get(name string) (int32, bool) {
	if x.n == 0 {
		return 0, false
	}
	s := &x.slots[x.find(name, x.hash(name))]
	return s.val, s.n != 0
}

// has reports whether name is in the index.
func (x *hostIndex) has(name string) bool {
	_, ok := x.get(name)
	return ok
}

// set stores v for name, adding name if it is new. It reports false, and
// stores nothing, when the arena would outgrow 4 GiB.
func (x *hostIndex) set(name string, v int32) bool {
	x.init()
	h := x.hash(name)
	i := x.find(name, h)
	if x.slots[i].n == 0 {
		if len(x.arena)+len(name) > maxArena {
			return false
		}
		off := len(x.arena)
		x.arena = append(x.arena, name...)
		i = x.insert(i, h, uint32(off), uint32(len(name)))
	}
	x.slots[i].val = v
	return true
}

// share makes arena, which holds the names the index will refer to, the
// index's own (a policy's lookup tables and its rules' host lists share
// one: every name is stored once), and sizes the table for n names.
func (x *hostIndex) share(arena []byte, n int) {
	x.init()
	size := len(x.slots)
	for (x.n+n)*2 > size {
		size *= 2
	}
	if size != len(x.slots) {
		x.resize(size)
	}
	x.arena = arena
}

// putShared returns where the value of the name at arena[off:off+n], of
// hash h, is stored, adding it with the value 0 (added true) if it is
// new, without copying it: one probe of the table where a get and a set
// would take two. The pointer is valid until the next put.
func (x *hostIndex) putShared(off, n, h uint32) (val *int32, added bool) {
	name := x.arena[off : off+n]
	i := x.findBytes(name, h)
	if x.slots[i].n != 0 {
		return &x.slots[i].val, false
	}
	i = x.insert(i, h, off, n)
	return &x.slots[i].val, true
}

// hostRef is a name in a shared arena on its way into a table: its hash,
// where it is, and the rule that names it.
type hostRef struct {
	h, off, n uint32
	rule      int32
}

// slotOrder returns refs (sized for the table: no growth to come) in the
// order of the slots they hash to, and otherwise in their own order (a
// stable counting sort on the slot's high bits). Added in that order, a
// million names fill the table front to back instead of at random: each
// probe finds its slot in cache (the random order took a quarter of a
// hosts file's load).
func (x *hostIndex) slotOrder(refs []hostRef) []hostRef {
	if len(refs) < 1<<12 {
		return refs
	}
	bits := 0
	for 1<<(bits+1) <= len(x.slots) && bits < 16 {
		bits++
	}
	shift := 0
	for len(x.slots)>>shift > 1<<bits {
		shift++
	}
	mask := uint32(len(x.slots) - 1)
	count := make([]int, 1<<bits+1)
	for _, r := range refs {
		count[(r.h&mask)>>shift+1]++
	}
	for i := 1; i < len(count); i++ {
		count[i] += count[i-1]
	}
	out := make([]hostRef, len(refs))
	for _, r := range refs {
		b := (r.h & mask) >> shift
		out[count[b]] = r
		count[b]++
	}
	return out
}

// insert fills the empty slot i with the name at arena[off:off+n] of hash
// h, growing the table first if it would be over half full, and returns
// the slot it went to.
func (x *hostIndex) insert(i int, h, off, n uint32) int {
	if (x.n+1)*2 > len(x.slots) {
		x.resize(2 * len(x.slots))
		i = x.findBytes(x.arena[off:off+n], h)
	}
	x.slots[i] = hostSlot{hash: h, off: off, n: n + 1}
	x.n++
	return i
}

// init gives an empty index its seed and first table.
func (x *hostIndex) init() {
	if len(x.slots) == 0 {
		x.seed = maphash.MakeSeed()
		x.slots = make([]hostSlot, 16)
	}
}

// resize moves the slots into a table of size slots (a power of two).
func (x *hostIndex) resize(size int) {
	old := x.slots
	x.slots = make([]hostSlot, size)
	mask := len(x.slots) - 1
	for _, s := range old {
		if s.n == 0 {
			continue
		}
		i := int(s.hash) & mask
		for x.slots[i].n != 0 {
			i = (i + 1) & mask
		}
		x.slots[i] = s
	}
}

// HostList is a rule's normalized host patterns ("example.com",
// "*.example.com", "*"), in config order, stored without a pointer per name
// for the same reason as hostIndex.
type HostList struct {
	names []byte
	ends  []uint32 // end offset of each name in names
}

// grow makes room for n more names of nbytes in all, so that a long
// list is not copied again and again as it grows.
func (l *HostList) grow(n, nbytes int) {
	l.names = slices.Grow(l.names, nbytes)
	l.ends = slices.Grow(l.ends, n)
}

// trim gives back the room grow reserved for ends and the list did not
// use (a hosts file of mostly comments), when it is more than a quarter
// (the names' room is the policy's arena, which index trims).
func (l *HostList) trim() {
	if cap(l.ends)-len(l.ends) > len(l.ends)/4+1024 {
		l.ends = slices.Clone(l.ends)
	}
}

func (l *HostList) add(name string) bool {
	if len(l.names)+len(name) > maxArena {
		return false
	}
	l.names = append(l.names, name...)
	l.ends = append(l.ends, uint32(len(l.names)))
	return true
}

// Len is the number of patterns.
func (l HostList) Len() int { return len(l.ends) }

// At returns pattern i.
func (l HostList) At(i int) string { return string(l.bytesAt(i)) }

// bytesAt returns pattern i without copying it.
func (l HostList) bytesAt(i int) []byte {
	start := uint32(0)
	if i > 0 {
		start = l.ends[i-1]
	}
	return l.names[start:l.ends[i]]
}

// All yields the patterns in order.
func (l HostList) All() iter.Seq[string] {
	return func(yield func(string) bool) {
		for i := range l.ends {
			if !yield(l.At(i)) {
				return
			}
		}
	}
}

// Strings returns the patterns as a slice (for display; it allocates).
func (l HostList) Strings() []string {
	out := make([]string, 0, l.Len())
	for h := range l.All() {
		out = append(out, h)
	}
	return out
}
