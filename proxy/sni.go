package proxy

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"time"
)

// errHelloRead stops the TLS handshake once the ClientHello is parsed.
var errHelloRead = errors.New("client hello read")

// ErrNotTLS means the client did not start with a TLS ClientHello.
var ErrNotTLS = errors.New("not a TLS client hello")

// maxHelloBytes bounds what peekClientHello buffers; real ClientHellos
// (post-quantum key shares included) stay well under 16 KiB.
const maxHelloBytes = 64 << 10

// peekClientHello reads the client's TLS ClientHello without answering it
// and returns it with the bytes read, which must be replayed upstream. It
// uses crypto/tls's own parser rather than a hand-written one.
func peekClientHello(c net.Conn, timeout time.Duration) (*tls.ClientHelloInfo, []byte, error) {
	var buf bytes.Buffer
	if timeout > 0 {
		c.SetReadDeadline(time.Now().Add(timeout))
		defer c.SetReadDeadline(time.Time{})
	}
	// Check the record type first: a non-TLS client must not be fed to the
	// TLS parser, which would answer it with an alert.
	var first [1]byte
	if _, err := io.ReadFull(c, first[:]); err != nil {
		return nil, nil, err
	}
	buf.Write(first[:])
	if first[0] != 0x16 {
		return nil, buf.Bytes(), ErrNotTLS
	}
	var hello *tls.ClientHelloInfo
	ro := &readOnlyConn{replayConn{Conn: c, r: io.TeeReader(io.LimitReader(c, maxHelloBytes), &buf), pre: first[:]}}
	err := tls.Server(ro, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			hello = h
			return nil, errHelloRead
		},
	}).Handshake()
	if hello == nil {
		if err == nil {
			err = ErrNotTLS
		}
		return nil, buf.Bytes(), err
	}
	return hello, buf.Bytes(), nil
}

// replayConn returns pre before reading from r (Conn when r is nil): the
// bytes already taken off the connection, such as a peeked ClientHello.
type replayConn struct {
	net.Conn
	r   io.Reader
	pre []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(p, c.pre)
		c.pre = c.pre[n:]
		return n, nil
	}
	if c.r != nil {
		return c.r.Read(p)
	}
	return c.Conn.Read(p)
}

// readOnlyConn lets the TLS parser read and swallows its writes, so the
// client sees nothing of the aborted handshake.
type readOnlyConn struct{ replayConn }

func (c *readOnlyConn) Write(p []byte) (int, error) { return len(p), nil }
