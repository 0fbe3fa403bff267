package policy

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestHostIndexMatchesMap checks the index against a Go map over random
// names, with overwrites, through several doublings of the table.
func TestHostIndexMatchesMap(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var x hostIndex
	want := map[string]int32{}
	alphabet := "ab.-1"
	for i := range 20000 {
		b := make([]byte, r.IntN(8))
		for j := range b {
			b[j] = alphabet[r.IntN(len(alphabet))]
		}
		name := string(b)
		if !x.set(name, int32(i)) {
			t.Fatalf("set %q refused", name)
		}
		want[name] = int32(i)
	}
	if x.Len() != len(want) {
		t.Fatalf("Len = %d, want %d", x.Len(), len(want))
	}
	for name, v := range want {
		if got, ok := x.get(name); !ok || got != v {
			t.Fatalf("get(%q) = %d, %v; want %d, true", name, got, ok, v)
		}
	}
	for _, name := range []string{"abcdefghi", "zzz", "a.b.c.d.e.f", "\x00"} {
		if _, ok := want[name]; ok {
			continue
		}
		if v, ok := x.get(name); ok {
			t.Errorf("get(%q) = %d, true for a name never set", name, v)
		}
	}
	if 2*x.n > len(x.slots) {
		t.Errorf("table %d/%d more than half full", x.n, len(x.slots))
	}
}

func TestHostIndexEmpty(t *testing.T) {
	var x hostIndex
	for _, name := range []string{"", "example.com"} {
		if _, ok := x.get(name); ok || x.has(name) {
			t.Errorf("empty index has %q", name)
		}
	}
	x.set("", 7) // the empty name is a name like any other
	if v, ok := x.get(""); !ok || v != 7 {
		t.Errorf("get(\"\") = %d, %v", v, ok)
	}
	if x.has("a") {
		t.Error("has(a) after set(\"\")")
	}
}

func TestHostList(t *testing.T) {
	in := []string{"example.com", "*.example.org", "*", "a", "xn--bcher-kva.example"}
	var l HostList
	for _, h := range in {
		l.add(h)
	}
	if l.Len() != len(in) {
		t.Fatalf("Len = %d", l.Len())
	}
	for i, h := range in {
		if got := l.At(i); got != h {
			t.Errorf("At(%d) = %q, want %q", i, got, h)
		}
	}
	if got := l.Strings(); !slices.Equal(got, in) {
		t.Errorf("Strings = %q", got)
	}
	var empty HostList
	if empty.Len() != 0 || len(empty.Strings()) != 0 {
		t.Error("zero HostList not empty")
	}
}

// TestRuleHostsInOrder checks that a compiled rule keeps its patterns,
// normalized, in config order.
func TestRuleHostsInOrder(t *testing.T) {
	p, err := Parse(strings.NewReader("version: 1\nallow:\n  - hosts: [B.Example.com, \"*.x.org\", bücher.example, \"*\"]\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"b.example.com", "*.x.org", "xn--bcher-kva.example", "*"}
	if got := p.Rules[0].Hosts.Strings(); !slices.Equal(got, want) {
		t.Errorf("Hosts = %q, want %q", got, want)
	}
}

func BenchmarkHostIndexGet(b *testing.B) {
	var x hostIndex
	m := map[string]int32{}
	names := make([]string, 100000)
	for i := range names {
		names[i] = fmt.Sprintf("host%d.example%d.com", i, i%997)
		x.set(names[i], int32(i))
		m[names[i]] = int32(i)
	}
	b.Run("index", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			x.get(names[i%len(names)])
		}
	})
	b.Run("map", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			_ = m[names[i%len(names)]]
		}
	})
}

// TestSharedArenaIndex: the rules' lists and both tables share one arena;
// a name several rules list (exact, wildcard, both, repeated in one rule)
// must still map to every rule naming it, in order, and each rule's list
// must read back as written: for a few names, and for enough that the
// table is filled in slot order.
func TestSharedArenaIndex(t *testing.T) {
	checkIndex(t, [][]string{
		{"a.example.com", "*.example.com", "a.example.com", "b.example.org"},
		{"*.example.com", "c.example.net"},
		{"b.example.org", "a.example.com", "*", "*.example.com"},
		{"example.com"},
	})
	big := make([][]string, 4)
	for i := range 6000 {
		h := fmt.Sprintf("h%d.example.com", i)
		if i%3 == 0 {
			h = "*." + h
		}
		big[0] = append(big[0], h)
		if i >= 3000 {
			big[1] = append(big[1], h)
		}
		if i%7 == 0 {
			big[2] = append(big[2], h, h)
		}
		big[3] = append(big[3], fmt.Sprintf("x%d.example.org", i))
	}
	checkIndex(t, big)
}

func checkIndex(t *testing.T, rules [][]string) {
	t.Helper()
	var b strings.Builder
	b.WriteString("version: 1\nallow:\n")
	for i, hs := range rules {
		fmt.Fprintf(&b, "  - name: r%d\n    pages: [\"*\"]\n    hosts: [%q", i, hs[0])
		for _, h := range hs[1:] {
			fmt.Fprintf(&b, ", %q", h)
		}
		b.WriteString("]\n")
	}
	p, err := Parse(strings.NewReader(b.String()), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := map[[2]string][]int32{} // (table, key) → rules in order, once each
	for i, hs := range rules {
		if got := p.Rules[i].Hosts.Strings(); !slices.Equal(got, hs) {
			t.Errorf("rule %d hosts %q, want %q", i, got, hs)
		}
		for _, h := range hs {
			k := [2]string{"exact", h}
			if s, ok := strings.CutPrefix(h, "*."); ok {
				k = [2]string{"suffix", s}
			} else if h == "*" {
				continue
			}
			if l := want[k]; len(l) == 0 || l[len(l)-1] != int32(i) {
				want[k] = append(l, int32(i))
			}
		}
	}
	for k, rs := range want {
		x := &p.exact
		if k[0] == "suffix" {
			x = &p.suffix
		}
		v, ok := x.get(k[1])
		var got []int32
		switch {
		case !ok:
		case v >= 0:
			got = []int32{v}
		default:
			got = p.multi[-v-1]
		}
		if !slices.Equal(got, rs) {
			t.Errorf("%s %q: rules %v, want %v", k[0], k[1], got, rs)
		}
	}
	if p.exact.Len()+p.suffix.Len() != len(want) {
		t.Errorf("%d names indexed, want %d", p.exact.Len()+p.suffix.Len(), len(want))
	}
}
