package proxy

import (
	"net"
	"net/netip"
	"sync"
)

// tracker counts open connections per identity, holds the quarantine set,
// and remembers open tunnels so a quarantine can close them at once.
type tracker struct {
	mu      sync.Mutex
	open    map[string]int
	tunnels map[string]map[net.Conn]*request
	quar    map[string]bool
	closed  bool // closeAll ran (the drain): no tunnel opens after it
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

// addTunnel records an open tunnel on client connection c under each of
// ids, with the state it was decided with, unless one of ids is
// quarantined (that id is returned) or closeAll ran: then it records
// nothing and reports false, under the same lock as quarantine and
// closeAll, so a tunnel is either closed by them or refused here.
func (t *tracker) addTunnel(ids []string, c net.Conn, rq *request) (quarantined string, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return "", false
	}
	for _, id := range ids {
		if t.quar[id] {
			return id, false
		}
	}
	for _, id := range ids {
		m := t.tunnels[id]
		if m == nil {
			m = map[net.Conn]*request{}
			t.tunnels[id] = m
		}
		m[c] = rq
	}
	return "", true
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

// closeAll closes every open tunnel, and every tunnel that would open
// after it (the drain's end).
func (t *tracker) closeAll() {
	t.mu.Lock()
	t.closed = true
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

// setUpAddr records the upstream address a tracked tunnel dialed, under
// the lock a reload's re-decision reads it with (upAddr).
func (t *tracker) setUpAddr(rq *request, ap netip.AddrPort) {
	t.mu.Lock()
	rq.upAddr = ap
	t.mu.Unlock()
}

// upAddr is the upstream address a tunnel reached (none yet: invalid).
func (t *tracker) upAddr(rq *request) netip.AddrPort {
	t.mu.Lock()
	defer t.mu.Unlock()
	return rq.upAddr
}
