package policy

import (
	"reflect"
	"slices"
)

// Same reports whether q is the same policy as p: the same config, read
// from the same file, normalized alike (every key, the rules in order,
// the identities, the hosts of every rule and deny list), and the same
// deny lists. A deny list counts as the same only if it is the very list
// p holds: the list cache shares a loaded list while its file keeps its
// device, inode, size and times, so an edited list is never Same. A
// reload of a Same config has nothing to verify.
func (p *Policy) Same(q *Policy) bool {
	if p == q {
		return true
	}
	if p == nil || q == nil || !slices.Equal(p.denyLists, q.denyLists) {
		return false
	}
	// The indexes are hash tables with a random seed each: compared by
	// content, then left out of the field-by-field comparison.
	for _, ix := range [][2]*hostIndex{{&p.exact, &q.exact}, {&p.suffix, &q.suffix}, {&p.denyExact, &q.denyExact}, {&p.denySuffix, &q.denySuffix}} {
		if !ix[0].same(ix[1]) {
			return false
		}
	}
	a, b := *p, *q
	for _, x := range []*Policy{&a, &b} {
		x.exact, x.suffix, x.denyExact, x.denySuffix, x.denyLists = hostIndex{}, hostIndex{}, hostIndex{}, hostIndex{}, nil
	}
	return reflect.DeepEqual(a, b)
}

// same reports whether y holds exactly the names of x with the same values.
func (x *hostIndex) same(y *hostIndex) bool {
	if x.n != y.n {
		return false
	}
	for _, s := range x.slots {
		if s.n == 0 {
			continue
		}
		if v, ok := y.get(string(x.arena[s.off : s.off+s.n-1])); !ok || v != s.val {
			return false
		}
	}
	return true
}
