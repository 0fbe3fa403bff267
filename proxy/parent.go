package proxy

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/egressd/egressd/inject"
	"github.com/egressd/egressd/policy"
)

// parentDialer reaches checked upstream addresses through a parent proxy
// (upstream_proxy): a TCP connection to the parent, then CONNECT to the
// address egressd resolved and checked — never to a name, which the
// parent would resolve by itself, to an answer egressd never saw.
type parentDialer struct {
	up      *policy.UpstreamProxy
	secrets *inject.Store
}

// maxParentHead bounds the parent's answer to CONNECT.
const maxParentHead = 16 << 10

func (pd *parentDialer) dial(ctx context.Context, nd *net.Dialer, target netip.AddrPort) (net.Conn, error) {
	auth := ""
	if pd.up.AuthFile != "" {
		cred, err := pd.secrets.Secret(pd.up.AuthFile)
		if err != nil {
			return nil, fmt.Errorf("upstream proxy credentials: %w", err)
		}
		auth = "Basic " + base64.StdEncoding.EncodeToString([]byte(cred))
	}
	c, err := nd.DialContext(ctx, "tcp", pd.up.Addr)
	if err != nil {
		return nil, fmt.Errorf("upstream proxy %s: %w", pd.up.Addr, err)
	}
	var deadline time.Time // the CONNECT exchange gets the dial timeout too
	if nd.Timeout > 0 {
		deadline = time.Now().Add(nd.Timeout)
	}
	if d, ok := ctx.Deadline(); ok && (deadline.IsZero() || d.Before(deadline)) {
		deadline = d
	}
	if !deadline.IsZero() {
		c.SetDeadline(deadline)
	}
	hp := target.String()
	req := "CONNECT " + hp + " HTTP/1.1\r\nHost: " + hp + "\r\n"
	if auth != "" {
		req += "Proxy-Authorization: " + auth + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		c.Close()
		return nil, fmt.Errorf("upstream proxy %s: write CONNECT: %w", pd.up.Addr, err)
	}
	br := bufio.NewReaderSize(io.LimitReader(c, maxParentHead), 4<<10)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("upstream proxy %s: read CONNECT answer: %w", pd.up.Addr, err)
	}
	if resp.StatusCode != http.StatusOK {
		c.Close()
		// the status only: a parent's error page might echo the request
		return nil, fmt.Errorf("upstream proxy %s refused CONNECT %s: %s", pd.up.Addr, hp, resp.Status)
	}
	c.SetDeadline(time.Time{})
	if n := br.Buffered(); n > 0 {
		// bytes of the tunnel that arrived with the answer
		pre, _ := br.Peek(n)
		return &parentConn{Conn: c, pre: append([]byte(nil), pre...)}, nil
	}
	return c, nil
}

// parentConn reads pre before the socket.
type parentConn struct {
	net.Conn
	pre []byte
}

func (c *parentConn) Read(p []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(p, c.pre)
		c.pre = c.pre[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}
