package proxy

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"slices"
	"time"
)

// errHelloRead stops the TLS handshake once the ClientHello is parsed.
var errHelloRead = errors.New("client hello read")

// ErrNotTLS means the client did not start with a TLS ClientHello.
var ErrNotTLS = errors.New("not a TLS client hello")

// maxHelloBytes bounds what peekClientHello buffers; real ClientHellos
// (post-quantum key shares included) stay well under 16 KiB.
const maxHelloBytes = 64 << 10

// helloFirstRead is the first read's size: one system call brings in a
// whole typical ClientHello (1.5 to 2 KiB with a post-quantum key share);
// a larger one takes more reads.
const helloFirstRead = 2 << 10

// peekClientHello reads the client's TLS ClientHello without answering it
// and returns it with the bytes read, which must be replayed upstream. It
// uses crypto/tls's own parser rather than a hand-written one.
func peekClientHello(c net.Conn, timeout time.Duration) (*tls.ClientHelloInfo, []byte, error) {
	if timeout > 0 {
		c.SetReadDeadline(time.Now().Add(timeout))
		defer c.SetReadDeadline(time.Time{})
	}
	rd := &helloReader{c: c, buf: make([]byte, 0, helloFirstRead)}
	if err := rd.fill(); err != nil {
		return nil, rd.buf, err
	}
	// Check the record type first: a non-TLS client must not be fed to the
	// TLS parser, which would answer it with an alert.
	if rd.buf[0] != 0x16 {
		return nil, rd.buf, ErrNotTLS
	}
	var hello *tls.ClientHelloInfo
	err := tls.Server(&readOnlyConn{replayConn{Conn: c, r: rd}}, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			hello = h
			return nil, errHelloRead
		},
	}).Handshake()
	if hello == nil {
		if err == nil {
			err = ErrNotTLS
		}
		return nil, rd.buf, err
	}
	return hello, rd.buf, nil
}

// helloReader feeds the TLS parser from buf and reads more from c into
// buf when the parser wants it, so that every byte taken from the client
// is kept for the replay; it stops at maxHelloBytes.
type helloReader struct {
	c   net.Conn
	buf []byte
	off int // bytes of buf the parser has read
}

func (r *helloReader) Read(p []byte) (int, error) {
	if r.off == len(r.buf) {
		if err := r.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, r.buf[r.off:])
	r.off += n
	return n, nil
}

// fill appends at least one byte from c to buf.
func (r *helloReader) fill() error {
	if len(r.buf) >= maxHelloBytes {
		return io.EOF
	}
	if len(r.buf) == cap(r.buf) {
		r.buf = slices.Grow(r.buf, min(cap(r.buf), maxHelloBytes-len(r.buf)))
	}
	for {
		n, err := r.c.Read(r.buf[len(r.buf):min(cap(r.buf), maxHelloBytes)])
		r.buf = r.buf[:len(r.buf)+n]
		if n > 0 {
			return nil
		}
		if err != nil {
			return err
		}
	}
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
