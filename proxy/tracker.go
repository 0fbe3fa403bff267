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
	tunnels map[string]map[net.Conn]*request
	quar    map[string]bool
}

func newTracker() *tracker {
	return &tracker{open: map[string]int{}, tunnels: map[string]map[net.Conn]*request{}, quar: map[string]bool{}}
}

// acquire takes a connection slot for id; limit <= 0 means no limit.
func (t *tracker) acquire(id string, limit int) (release func(), ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if limit > 0 && t.open[id] >= limit {
		return nil, false
	}
	t.open[id]++
	var once sync.Once
	return func() {
		once.Do(func() {
			t.mu.Lock()
			if t.open[id]--; t.open[id] <= 0 {
				delete(t.open, id)
			}
			t.mu.Unlock()
		})
	}, true
}

// addTunnel records an open tunnel of id on client connection c, with the
// state it was decided with.
func (t *tracker) addTunnel(id string, c net.Conn, rq *request) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.tunnels[id]
	if m == nil {
		m = map[net.Conn]*request{}
		t.tunnels[id] = m
	}
	m[c] = rq
}

// openTunnels returns every open tunnel once, with its state.
func (t *tracker) openTunnels() map[net.Conn]*request {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[net.Conn]*request{}
	for _, m := range t.tunnels {
		for c, rq := range m {
			out[c] = rq
		}
	}
	return out
}

func (t *tracker) removeTunnel(id string, c net.Conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if m := t.tunnels[id]; m != nil {
		delete(m, c)
		if len(m) == 0 {
			delete(t.tunnels, id)
		}
	}
}

func (t *tracker) quarantined(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.quar[id]
}

// quarantine denies everything for id from now on and returns its open
// tunnels, for the caller to close.
func (t *tracker) quarantine(id string) map[net.Conn]*request {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.quar[id] = true
	out := make(map[net.Conn]*request, len(t.tunnels[id]))
	for c, rq := range t.tunnels[id] {
		out[c] = rq
	}
	return out
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
