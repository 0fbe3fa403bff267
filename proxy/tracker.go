package proxy

import (
	"net"
	"sync"
)

// tracker counts open connections per identity, holds the quarantine set,
// and remembers open tunnels so a quarantine can close them at once.
type tracker struct {
	mu      sync.Mutex
	open    map[string]int
	tunnels map[string]map[net.Conn]struct{}
	quar    map[string]bool
}

func newTracker() *tracker {
	return &tracker{open: map[string]int{}, tunnels: map[string]map[net.Conn]struct{}{}, quar: map[string]bool{}}
}

// acquire takes a connection slot for each of ids (the identity named
// and the one the source address gives), or none when one is full; limit
// <= 0 means no limit.
func (t *tracker) acquire(limit int, ids ...string) (release func(), ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range ids {
		if limit > 0 && t.open[id] >= limit {
			return nil, false
		}
	}
	for _, id := range ids {
		t.open[id]++
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			t.mu.Lock()
			for _, id := range ids {
				if t.open[id]--; t.open[id] <= 0 {
					delete(t.open, id)
				}
			}
			t.mu.Unlock()
		})
	}, true
}

// addTunnel remembers c under each of ids, so quarantining any closes it.
func (t *tracker) addTunnel(c net.Conn, ids ...string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range ids {
		m := t.tunnels[id]
		if m == nil {
			m = map[net.Conn]struct{}{}
			t.tunnels[id] = m
		}
		m[c] = struct{}{}
	}
}

func (t *tracker) removeTunnel(c net.Conn, ids ...string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range ids {
		if m := t.tunnels[id]; m != nil {
			delete(m, c)
			if len(m) == 0 {
				delete(t.tunnels, id)
			}
		}
	}
}

// quarantined reports whether any of ids is quarantined.
func (t *tracker) quarantined(ids ...string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range ids {
		if t.quar[id] {
			return true
		}
	}
	return false
}

// quarantine denies everything for id from now on and closes its open
// tunnels; it returns how many it closed.
func (t *tracker) quarantine(id string) int {
	t.mu.Lock()
	t.quar[id] = true
	var conns []net.Conn
	for c := range t.tunnels[id] {
		conns = append(conns, c)
	}
	t.mu.Unlock()
	for _, c := range conns {
		c.Close() // the close hook removes it from tunnels
	}
	return len(conns)
}

func (t *tracker) lift(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	was := t.quar[id]
	delete(t.quar, id)
	return was
}

func (t *tracker) list() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, len(t.quar))
	for id := range t.quar {
		out = append(out, id)
	}
	return out
}

func (t *tracker) closeAll() {
	t.mu.Lock()
	var conns []net.Conn
	for _, m := range t.tunnels {
		for c := range m {
			conns = append(conns, c)
		}
	}
	t.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}
