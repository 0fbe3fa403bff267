package policy

import (
	"bufio"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"math/bits"
	"os"
)

// DomainSet is a large, read-only set of domain names loaded from a list
// file (deny.hosts_files): a category or threat list of tens of millions
// of names, each of which is denied together with every name under it.
//
// It is built for that scale, not for the config's own lists: no pointer
// per name (the garbage collector sees two allocations whatever the size),
// names back to back in one arena behind a length byte, and an
// open-addressing table of 8-byte slots (32 bits of hash, 32 bits of arena
// offset) kept at most 70 % full. 40 million names of 20 bytes take about
// 840 MB of arena and 512 MiB of table; a lookup is one hash and, usually,
// one probe per label of the name asked about.
type DomainSet struct {
	seed  maphash.Seed
	arena []byte   // per name: its length (1 byte), then the name
	slots []uint64 // hash>>32<<32 | (offset+1); 0 marks an empty slot
	n     int
}

// Len is the number of distinct names in the set.
func (s *DomainSet) Len() int {
	if s == nil {
		return 0
	}
	return s.n
}

// Covers reports whether name (normalized: lower case, no trailing dot)
// or a domain it is under is in the set.
func (s *DomainSet) Covers(name string) bool {
	if s == nil || s.n == 0 {
		return false
	}
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

func (s *DomainSet) has(name string) bool {
	h := maphash.String(s.seed, name)
	tag := h >> 32 << 32
	mask := uint64(len(s.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		v := s.slots[i]
		if v == 0 {
			return false
		}
		if v>>32<<32 == tag {
			off := uint32(v) - 1
			n := uint32(s.arena[off])
			if string(s.arena[off+1:off+1+n]) == name {
				return true
			}
		}
	}
}

// maxSetArena keeps arena offsets (plus one) within 32 bits.
const maxSetArena = 1<<32 - 2

// LoadDomainSet reads a list file: one domain name per line; blank lines
// and lines starting with '#' are skipped; a leading "*." or a trailing dot
// is dropped (a name always covers the names under it). Names must be
// ASCII (IDNs in their xn-- form) and at most 253 bytes, labels of 1 to 63
// letters, digits, '-' or '_'. A bad line fails the load with its line
// number: a list is never partly applied.
func LoadDomainSet(path string) (*DomainSet, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("host list: %w", err)
	}
	defer f.Close()
	var size int64
	if fi, err := f.Stat(); err == nil {
		size = fi.Size()
	}
	s, err := readDomainSet(f, size)
	if err != nil {
		return nil, fmt.Errorf("host list %s: %w", path, err)
	}
	return s, nil
}

// readDomainSet builds a set from r; sizeHint (the file size, or 0) sizes
// the arena once, since no name is longer in the arena than on its line.
func readDomainSet(r io.Reader, sizeHint int64) (*DomainSet, error) {
	s := &DomainSet{seed: maphash.MakeSeed()}
	if sizeHint > 0 && sizeHint <= maxSetArena {
		s.arena = make([]byte, 0, sizeHint)
	}
	br := bufio.NewReaderSize(r, 1<<20)
	offs := make([]uint32, 0, sizeHint/12) // names average 12+ bytes a line
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
				if len(s.arena)+1+len(name) > maxSetArena {
					return nil, errors.New("over 4 GiB of names: split the list")
				}
				offs = append(offs, uint32(len(s.arena)))
				s.arena = append(s.arena, byte(len(name)))
				s.arena = append(s.arena, name...)
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	s.index(offs)
	return s, nil
}

// index builds the table over the names at offs, dropping duplicates.
func (s *DomainSet) index(offs []uint32) {
	size := 1 << bits.Len(uint(len(offs)*10/7+1))
	s.slots = make([]uint64, size)
	mask := uint64(size - 1)
	for _, off := range offs {
		n := uint32(s.arena[off])
		name := s.arena[off+1 : off+1+n]
		h := maphash.Bytes(s.seed, name)
		tag := h >> 32 << 32
		i := h & mask
		for ; s.slots[i] != 0; i = (i + 1) & mask {
			v := s.slots[i]
			if v>>32<<32 == tag {
				o := uint32(v) - 1
				if string(s.arena[o+1:o+1+uint32(s.arena[o])]) == string(name) {
					goto dup
				}
			}
		}
		s.slots[i] = tag | uint64(off+1)
		s.n++
	dup:
	}
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
