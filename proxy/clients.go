package proxy

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/egressd/egressd/policy"
)

// admitClient takes one of the client connection slots of c's source
// identity (limits.client_conns_per_identity). Over the limit, c is
// refused: answered 429 conn-limit first when speaksHTTP (a proxy client
// reads it before its request), logged as a denial, and closed. release
// gives the slot back; call it once c is closed.
func (x *Proxy) admitClient(c net.Conn, speaksHTTP bool) (release func(), ok bool) {
	ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
	if err != nil {
		return func() {}, true // not an IP client (a test pipe): nothing to count by
	}
	id := x.sourceIdentity(ap.Addr())
	limit := x.Policy().Limits.ClientConns
	if release, ok := x.clients.acquire(id, limit); ok {
		return release, true
	}
	rq := &request{start: time.Now(), identity: id}
	detail := fmt.Sprintf("identity %s holds %d open client connections (limits.client_conns_per_identity)", orNone(id), limit)
	status := 0
	if speaksHTTP {
		status = policy.ReasonConnLimit.Status()
	}
	x.logDecisionReason(context.Background(), rq, status, policy.ReasonConnLimit, detail, 0, 0)
	go func() { // never hold up the accept loop on a slow client
		if speaksHTTP {
			body := fmt.Sprintf("egressd: %d %s: %s\n", policy.ReasonConnLimit.Status(), policy.ReasonConnLimit, detail)
			c.SetWriteDeadline(time.Now().Add(time.Second))
			fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nX-Egressd-Deny: %s\r\nConnection: close\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\n\r\n%s",
				policy.ReasonConnLimit.Status(), http.StatusText(policy.ReasonConnLimit.Status()), policy.ReasonConnLimit, len(body), body)
		}
		c.Close()
	}()
	return nil, false
}

// releaseConn gives its client slot back when closed.
type releaseConn struct {
	net.Conn
	release func()
}

func (c *releaseConn) Close() error {
	err := c.Conn.Close()
	c.release() // once: the tracker's release is idempotent
	return err
}
