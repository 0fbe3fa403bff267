package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/egressd/egressd/policy"
)

// Descriptor reserve. At the process's descriptor ceiling everything that
// opens a file fails at once — the admin endpoint an operator needs then,
// the walls' netlink socket, the audit log. So the proxy stops accepting
// clients while fewer than FDReserve descriptors are left: a new client is
// answered 503 fd-limit and closed (counted in
// egressd_connections_shed_total), and the descriptors in reserve stay for
// the rest. The count of open descriptors is sampled every fdSampleEvery
// (reading /proc/self/fd off the request path); between samples each
// accepted client is counted as two (its socket and an upstream's).
const (
	defaultFDReserve = 128
	fdSampleEvery    = 100 * time.Millisecond
)

// shedResponse is the whole answer to a shed client, sent before its
// request is read.
var shedResponse = func() string {
	body := "egressd: denied: " + policy.ReasonFDLimit.String() + ": " + policy.ReasonFDLimit.Help() + "\n"
	return fmt.Sprintf("HTTP/1.1 503 Service Unavailable\r\nX-Egressd-Deny: %s\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		policy.ReasonFDLimit, len(body), body)
}()

// fdGuard decides whether another client connection may be accepted.
type fdGuard struct {
	limit   func() int // the descriptor ceiling (soft RLIMIT_NOFILE); 0: unknown
	count   func() int // open descriptors now; -1: unknown
	reserve int

	mu      sync.Mutex
	sampled time.Time
	open    int          // at the last sample
	lim     int          // the ceiling at the last sample (a system call: not per client)
	since   atomic.Int64 // clients accepted since the last sample
}

// admit reports whether a new client fits above the reserve.
func (g *fdGuard) admit(now time.Time) bool {
	g.mu.Lock()
	if now.Sub(g.sampled) >= fdSampleEvery {
		g.sampled, g.open, g.lim = now, g.count(), g.limit()
		g.since.Store(0)
	}
	open, lim := g.open, g.lim
	g.mu.Unlock()
	if lim <= 0 || open < 0 {
		return true
	}
	if open+2*int(g.since.Load())+2 > lim-g.reserve {
		return false
	}
	g.since.Add(1)
	return true
}

// shedListener sheds clients that do not fit above the reserve.
type shedListener struct {
	net.Listener
	g    *fdGuard
	shed func()
}

func (l *shedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil || l.g.admit(time.Now()) {
			return c, err
		}
		l.shed()
		go func() { // never hold up the accept loop on a slow client
			c.SetWriteDeadline(time.Now().Add(time.Second))
			io.WriteString(c, shedResponse)
			c.Close()
		}()
	}
}

// GuardListener puts the connections of another egressd server that
// sandboxes reach (the DNS filter's TCP socket) under the descriptor
// reserve and its source identity's client connections
// (limits.client_conns_per_identity, shared with the proxy's listeners):
// one that does not fit is closed at once (there is no 503 to send in that
// protocol), counted in egressd_connections_shed_total or logged as a
// conn-limit denial.
// Temporary accept errors (out of descriptors) are logged and counted, and
// retried after a backoff here, so the server's own accept loop never
// spins on them.
func (x *Proxy) GuardListener(l net.Listener) net.Listener {
	return &guardedListener{Listener: l, x: x}
}

type guardedListener struct {
	net.Listener
	x *Proxy
}

func (l *guardedListener) Accept() (net.Conn, error) {
	var backoff time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			var ne net.Error
			//lint:ignore SA1019 net/http's Server retries on the same test
			if errors.Is(err, net.ErrClosed) || !errors.As(err, &ne) || !ne.Temporary() {
				return nil, err
			}
			l.x.acceptError(l.Addr().String(), err)
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		if !l.x.fds.admit(time.Now()) {
			l.x.m.shed.Inc()
			c.Close()
			continue
		}
		release, ok := l.x.admitClient(c, false)
		if !ok {
			continue
		}
		return &releaseConn{Conn: c, release: release}, nil
	}
}
