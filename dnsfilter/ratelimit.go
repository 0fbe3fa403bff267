package dnsfilter

import (
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

const (
	// maxClients bounds the limiter table: UDP sources can be forged, and
	// each new one must not cost memory without end.
	maxClients = 4096
	// burstSeconds is how many seconds of queries a quiet client may send
	// at once: a page load or a build resolves a few dozen names together.
	burstSeconds = 2
	// defaultQPS applies when the policy gives no rate (it always should).
	defaultQPS = 50
	// logEvery is how often a client's rate-limited queries are logged.
	logEvery = time.Second
	// A client's denied names are logged once per denyLogEvery each, and at
	// most denyLinesPerInterval of them: a flood of denials (one name
	// repeated, or a new name each query) costs a few lines, and the next
	// line counts the denials left out ("suppressed").
	denyLogEvery         = 10 * time.Second
	denyLinesPerInterval = 10
)

// limiters holds one token bucket per client address.
type limiters struct {
	mu        sync.Mutex
	clients   map[netip.Addr]*client
	overflow  *client // shared by new clients while the table is full
	lastSweep time.Time

	// later runs fn after d (time.AfterFunc; tests run it at once).
	later func(d time.Duration, fn func())
	// flushed logs the count a client's last line left out once the client
	// has gone quiet: without it the tail of a flood is never logged.
	flushed func(a netip.Addr, result string, n int)
}

type client struct {
	lim     *rate.Limiter
	logged  time.Time // last rate-limited query logged
	skipped int       // rate-limited queries not logged since

	denyStart   time.Time           // start of the current denial log interval
	denyNames   map[string]struct{} // names logged in it (at most denyLinesPerInterval)
	denySkipped int                 // denials not logged since the last denial line
	denyLine    time.Time           // the last denial line
}

// denial says whether to log a denial of name for client a, and how many
// of a's denials went unlogged before it. A client not in the table (its
// query was not counted by allow) is logged.
func (l *limiters) denial(a netip.Addr, name string, now time.Time) (logIt bool, skipped int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.clients[a]
	if c == nil {
		c = l.overflow
	}
	if c == nil {
		return true, 0
	}
	if now.Sub(c.denyStart) >= denyLogEvery {
		c.denyStart = now
		clear(c.denyNames)
	}
	if _, seen := c.denyNames[name]; seen || len(c.denyNames) >= denyLinesPerInterval {
		if c.denySkipped++; c.denySkipped == 1 {
			l.flushLater(denyLogEvery, a, &c.denySkipped, &c.denyLine, now, resultNXDomain)
		}
		return false, 0
	}
	if c.denyNames == nil {
		c.denyNames = make(map[string]struct{}, denyLinesPerInterval)
	}
	c.denyNames[name] = struct{}{}
	skipped, c.denySkipped, c.denyLine = c.denySkipped, 0, now
	return true, skipped
}

// allow takes one token from a's bucket, which refills at qps a second.
// When the query is refused, logIt says whether to log it and skipped how
// many refusals went unlogged before it.
func (l *limiters) allow(a netip.Addr, qps int, now time.Time) (ok, logIt bool, skipped int) {
	if qps <= 0 {
		qps = defaultQPS
	}
	limit, burst := rate.Limit(qps), qps*burstSeconds
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.clients[a]
	if c == nil {
		if len(l.clients) >= maxClients && now.Sub(l.lastSweep) >= time.Second {
			l.sweep(now)
		}
		switch {
		case len(l.clients) < maxClients:
			c = &client{lim: rate.NewLimiter(limit, burst)}
			l.clients[a] = c
		case l.overflow == nil:
			l.overflow = &client{lim: rate.NewLimiter(limit, burst)}
			c = l.overflow
		default:
			c = l.overflow
		}
	}
	if c.lim.Limit() != limit || c.lim.Burst() != burst { // the policy was reloaded
		c.lim.SetLimitAt(now, limit)
		c.lim.SetBurstAt(now, burst)
	}
	if c.lim.AllowN(now, 1) {
		return true, false, 0
	}
	if now.Sub(c.logged) < logEvery {
		if c.skipped++; c.skipped == 1 {
			l.flushLater(logEvery, a, &c.skipped, &c.logged, now, resultRateLimited)
		}
		return false, false, 0
	}
	skipped, c.skipped, c.logged = c.skipped, 0, now
	return false, true, skipped
}

// flushLater makes sure the count at *pending (a client's, guarded by
// l.mu, just become 1 at time since) reaches the log: the client's next
// line carries it (*line, the time of its last line, moves past since; the
// next refusal then arms a flush of its own), and if no line comes within
// d, the count is logged on its own. One flush is armed per count, so a
// flood costs a timer an interval. Called with l.mu held.
func (l *limiters) flushLater(d time.Duration, a netip.Addr, pending *int, line *time.Time, since time.Time, result string) {
	if l.flushed == nil {
		return
	}
	later := l.later
	if later == nil {
		later = func(d time.Duration, fn func()) { time.AfterFunc(d, fn) }
	}
	later(d, func() {
		l.mu.Lock()
		if line.After(since) { // a line took the count since; the next refusal arms anew
			l.mu.Unlock()
			return
		}
		n := *pending
		*pending = 0
		l.mu.Unlock()
		if n > 0 {
			l.flushed(a, result, n)
		}
	})
}

// sweep forgets clients whose bucket has refilled: a fresh bucket would
// behave the same, so nothing is lost.
func (l *limiters) sweep(now time.Time) {
	l.lastSweep = now
	for a, c := range l.clients {
		if c.lim.TokensAt(now) >= float64(c.lim.Burst()) {
			delete(l.clients, a)
		}
	}
}
