package selftest

import (
	"context"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// silentConn is a connected datagram socket to a wall that never answers:
// writes are counted, a read blocks until its deadline, then fails as a
// real socket's does (at once when the deadline has passed).
type silentConn struct {
	net.Conn // nil: only the methods below are used
	writes   atomic.Int32
	deadline atomic.Value // time.Time
}

func (c *silentConn) Write(b []byte) (int, error) { c.writes.Add(1); return len(b), nil }
func (c *silentConn) Close() error                { return nil }
func (c *silentConn) SetDeadline(t time.Time) error {
	return c.SetReadDeadline(t)
}
func (c *silentConn) SetReadDeadline(t time.Time) error { c.deadline.Store(t); return nil }
func (c *silentConn) Read([]byte) (int, error) {
	d, _ := c.deadline.Load().(time.Time)
	<-time.After(time.Until(d)) // a blocking read that times out: the fake kernel's clock
	return 0, os.ErrDeadlineExceeded
}

// lateContext reports deadline but ends only at end, later: a context's
// timer fires after its deadline, by as much as a loaded machine delays
// it.
type lateContext struct {
	context.Context
	deadline time.Time
}

func (c lateContext) Deadline() (time.Time, bool) { return c.deadline, true }

// TestExchangeUDPStopsAtDeadline: a datagram probe sends again every
// resendEvery while it waits, and once its deadline has passed it stops,
// even before its context's timer has fired. It used to send in a tight
// loop until then (a flood of hundreds of datagrams at every blocked
// probe's end, each one taking a refusal from the kernel's per-address
// ICMP budget).
func TestExchangeUDPStopsAtDeadline(t *testing.T) {
	conn := &silentConn{}
	deadline := time.Now().Add(600 * time.Millisecond)
	inner, cancel := context.WithDeadline(context.Background(), deadline.Add(200*time.Millisecond))
	defer cancel()
	dial := func(context.Context, string, string) (net.Conn, error) { return conn, nil }
	_, err := exchangeUDP(lateContext{inner, deadline}, dial, netip.MustParseAddrPort("203.0.113.10:123"), []byte("x"), nil)
	if res, ok := blockedErr(err); !ok {
		t.Errorf("err %v, want one that reads as blocked", err)
	} else {
		t.Logf("%s", res)
	}
	// 600 ms at one send per 250 ms: 3 (a fourth at the deadline at most).
	if n := conn.writes.Load(); n > 4 {
		t.Errorf("%d datagrams sent in 600 ms, want at most 4 (one every %v)", n, resendEvery)
	}
}

// TestTCPProbeSendsAgain: a direct TCP probe whose first SYN is lost
// (here: a first dial that never completes) tries again after
// tcpResendAfter instead of waiting for the kernel's retransmission at
// 1 s, so one lost packet on a path out cannot read as blocked within a
// short timeout. Connected on the second try is a leak.
func TestTCPProbeSendsAgain(t *testing.T) {
	var dials atomic.Int32
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if dials.Add(1) == 1 {
			<-ctx.Done() // the lost SYN: no answer until the probe ends
			return nil, ctx.Err()
		}
		c1, c2 := net.Pipe()
		c2.Close()
		return c1, nil
	}
	r := &runner{c: Config{Dial: dial, Timeout: time.Second}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	o := r.tcp(ctx, netip.MustParseAddrPort("203.0.113.10:443"))
	if o.status != Leak || dials.Load() != 2 {
		t.Errorf("got %s %q after %d dials, want a leak on the second", o.status, o.result, dials.Load())
	}
}
