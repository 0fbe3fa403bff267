package proxy

import (
	"context"
	"net"
)

// Keep-alive of client connections: the values Go's net package uses by
// default, so that a dead client of an idle tunnel is noticed.
const (
	keepAliveIdle     = 15 // seconds
	keepAliveInterval = 15
	keepAliveCount    = 9
)

// deferAcceptSeconds: accept a connection only once its first bytes are
// in (TCP_DEFER_ACCEPT). Every client of these listeners speaks first (a
// request head or a ClientHello), so accept and the first read happen in
// one wake-up instead of two.
const deferAcceptSeconds = 10

// Listen opens a TCP listener for the proxy (or a transparent port). TCP
// keep-alive is set once on the listening socket, which Linux copies to
// every accepted connection, instead of by net's Accept with four
// setsockopt calls per connection; and accept waits for the client's first
// bytes (deferAcceptSeconds), which any later data also completes.
func Listen(addr string) (net.Listener, error) {
	lc := listenConfig()
	return lc.Listen(context.Background(), "tcp", addr)
}
