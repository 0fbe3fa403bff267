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
	hello, err := parseHello(&readOnlyConn{replayConn{Conn: c, r: rd}})
	if hello == nil {
		// crypto/tls refuses an SNI with a trailing dot (RFC 6066 forbids
		// it; clients send it for "host."): parse a copy without the dot,
		// as hosts are normalized, and replay the client's own bytes.
		if fixed, ok := stripSNIDot(rd.buf); ok {
			if h, ferr := parseHello(&readOnlyConn{replayConn{Conn: c, r: eofReader{}, pre: fixed}}); h != nil {
				return h, rd.buf, ferr
			}
		}
		return nil, rd.buf, err
	}
	return hello, rd.buf, nil
}

// parseHello runs crypto/tls's parser over c up to the ClientHello.
func parseHello(c net.Conn) (*tls.ClientHelloInfo, error) {
	var hello *tls.ClientHelloInfo
	err := tls.Server(c, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			hello = h
			return nil, errHelloRead
		},
	}).Handshake()
	if hello == nil {
		if err == nil {
			err = ErrNotTLS
		}
		return nil, err
	}
	return hello, nil
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

// stripSNIDot returns a copy of rec, a TLS record holding a whole
// ClientHello, with the one trailing dot of its server_name removed and
// every length around it fixed; ok is false when rec is anything else.
// Only the parser sees the copy.
func stripSNIDot(rec []byte) (out []byte, ok bool) {
	u16 := func(b []byte, i int) int { return int(b[i])<<8 | int(b[i+1]) }
	if len(rec) < 9 || rec[0] != 0x16 || rec[5] != 1 {
		return nil, false
	}
	end := 5 + u16(rec, 3)
	if end > len(rec) || 9+(int(rec[6])<<16|int(rec[7])<<8|int(rec[8])) != end {
		return nil, false // not exactly one record holding one whole hello
	}
	p := 9 + 2 + 32 // version, random
	if p >= end {
		return nil, false
	}
	p += 1 + int(rec[p]) // session id
	if p+2 > end {
		return nil, false
	}
	p += 2 + u16(rec, p) // cipher suites
	if p >= end {
		return nil, false
	}
	p += 1 + int(rec[p]) // compression methods
	if p+2 > end {
		return nil, false
	}
	extsAt := p
	p += 2
	if p+u16(rec, extsAt) != end {
		return nil, false
	}
	for p+4 <= end {
		typ, l := u16(rec, p), u16(rec, p+2)
		extAt := p
		p += 4
		if p+l > end {
			return nil, false
		}
		if typ != 0 { // server_name
			p += l
			continue
		}
		// server_name_list: one host_name entry
		if l < 5 || u16(rec, p) != l-2 || rec[p+2] != 0 || u16(rec, p+3) != l-5 {
			return nil, false
		}
		nameEnd := p + l
		if rec[nameEnd-1] != '.' {
			return nil, false
		}
		out = make([]byte, 0, len(rec)-1)
		out = append(out, rec[:nameEnd-1]...)
		out = append(out, rec[nameEnd:]...)
		dec := func(i int) {
			v := u16(out, i) - 1
			out[i], out[i+1] = byte(v>>8), byte(v)
		}
		dec(3) // record
		hl := int(out[6])<<16 | int(out[7])<<8 | int(out[8]) - 1
		out[6], out[7], out[8] = byte(hl>>16), byte(hl>>8), byte(hl)
		dec(extsAt)    // extensions
		dec(extAt + 2) // this extension
		dec(p)         // server_name_list
		dec(p + 3)     // host_name
		return out, true
	}
	return nil, false
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
