package proxy

import (
	"encoding/binary"
	"errors"
	"net"

	"github.com/egressd/egressd/honeytoken"
	"github.com/egressd/egressd/policy"
)

// errHoneytokenFrame ends the client→origin direction of a WebSocket
// whose frame carried a honeytoken: the frame is not forwarded.
var errHoneytokenFrame = errors.New("websocket frame carries a honeytoken")

// wsCarry is the fewest payload bytes of earlier frames kept and scanned
// again with the next; the registry's MaxLen raises it, so a token or an
// encoded form of it split across frames (or reads) is still found whole.
const wsCarry = 64

// wsScanner parses the client's WebSocket frames (RFC 6455: client frames
// are masked), unmasks their payloads and scans them for honeytokens. It
// holds no frame: it only keeps the header state and the last wsCarry
// payload bytes.
type wsScanner struct {
	reg *honeytoken.Registry

	head    []byte // header bytes of the frame being read
	need    int    // header length once known (0: not yet)
	left    uint64 // payload bytes of the current frame still to come
	mask    [4]byte
	masked  bool
	off     uint64 // payload offset in the current frame (for the mask)
	carry   []byte // the last payload bytes seen, unmasked
	scratch []byte
	// ctl: the current frame is a control frame (ping, pong, close). Its
	// payload is scanned on its own in ctlBuf: control frames may sit
	// between the fragments of a message, which the server joins without
	// them, so they must not break the data stream carry scans.
	ctl    bool
	ctlBuf []byte
	err    error // why the stream is refused (not a honeytoken)
}

// maxControlPayload is RFC 6455's bound on a control frame's payload.
const maxControlPayload = 125

// errWSExtension refuses a frame that uses an extension: egressd drops
// the client's offer, so none is negotiated, and a compressed payload
// (permessage-deflate's RSV1) would pass the scan unread.
var errWSExtension = errors.New("websocket frame with RSV bits set: an extension egressd did not negotiate (compression) would hide the payload from the honeytoken scan")

// errWSControl refuses a control frame over RFC 6455's 125 bytes.
var errWSControl = errors.New("websocket control frame over 125 bytes")

// feed parses b, the next bytes the client sent, and returns the first
// honeytoken in a payload so far.
func (s *wsScanner) feed(b []byte) (honeytoken.Token, bool) {
	s.scratch = append(s.scratch[:0], s.carry...)
	for len(b) > 0 && s.err == nil {
		if s.left == 0 && !s.inFrameHeaderDone() {
			b = s.readHeader(b)
			continue
		}
		n := min(uint64(len(b)), s.left)
		for i := uint64(0); i < n; i++ {
			c := b[i]
			if s.masked {
				c ^= s.mask[(s.off+i)%4]
			}
			if s.ctl {
				s.ctlBuf = append(s.ctlBuf, c)
			} else {
				s.scratch = append(s.scratch, c)
			}
		}
		if s.ctl {
			if t, ok := s.reg.Scan(s.ctlBuf); ok {
				return t, true
			}
		}
		s.off += n
		s.left -= n
		b = b[n:]
		if s.left == 0 {
			s.head, s.need = s.head[:0], 0 // next frame
		}
	}
	t, ok := s.reg.Scan(s.scratch)
	keep := s.scratch[max(0, len(s.scratch)-max(wsCarry, s.reg.MaxLen())):]
	s.carry = append(s.carry[:0], keep...)
	return t, ok
}

// inFrameHeaderDone reports whether a complete header was read and its
// payload is empty or under way.
func (s *wsScanner) inFrameHeaderDone() bool { return s.need > 0 && len(s.head) == s.need }

// readHeader consumes header bytes from b; once the header is complete it
// sets the payload length and mask (an empty payload starts the next
// frame at once).
func (s *wsScanner) readHeader(b []byte) []byte {
	for len(b) > 0 && (s.need == 0 || len(s.head) < s.need) {
		s.head = append(s.head, b[0])
		b = b[1:]
		if len(s.head) == 2 {
			s.need = 2
			switch s.head[1] & 0x7f {
			case 126:
				s.need += 2
			case 127:
				s.need += 8
			}
			if s.head[1]&0x80 != 0 {
				s.need += 4
			}
		}
	}
	if s.need == 0 || len(s.head) < s.need {
		return b
	}
	if s.head[0]&0x70 != 0 {
		s.err = errWSExtension
		return nil
	}
	s.masked = s.head[1]&0x80 != 0
	s.ctl, s.ctlBuf = s.head[0]&0x08 != 0, s.ctlBuf[:0]
	if s.ctl && s.head[1]&0x7f > maxControlPayload {
		s.err = errWSControl
		return nil
	}
	p := 2
	switch l := s.head[1] & 0x7f; l {
	case 126:
		s.left, p = uint64(binary.BigEndian.Uint16(s.head[2:4])), 4
	case 127:
		s.left, p = binary.BigEndian.Uint64(s.head[2:10]), 10
	default:
		s.left = uint64(l)
	}
	if s.masked {
		copy(s.mask[:], s.head[p:p+4])
	}
	s.off = 0
	if s.left == 0 {
		s.head, s.need = s.head[:0], 0
	}
	return b
}

// wsScanConn is the client side of a relayed WebSocket: what the client
// sends is scanned before the relay forwards it; a read that completes a
// honeytoken returns an error instead of the bytes, so the token never
// reaches the origin whole.
type wsScanConn struct {
	net.Conn
	s      *wsScanner
	hit    func(honeytoken.Token)
	refuse func(error)
}

func (c *wsScanConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		if t, ok := c.s.feed(p[:n]); ok {
			c.hit(t)
			return 0, errHoneytokenFrame
		}
		if c.s.err != nil {
			c.refuse(c.s.err)
			return 0, c.s.err
		}
	}
	return n, err
}

// scanWebSocket wraps the client side of an allowed WebSocket so that its
// frames are scanned for honeytokens; pre (bytes the client sent with the
// handshake) is scanned first and comes back nil when it carried one or
// was refused. A hit, or a frame the scan cannot read (an extension's,
// an oversized control frame), records the refusal on rq and closes both
// sides.
func (x *Proxy) scanWebSocket(rq *request, client, up, hc net.Conn, pre []byte) (net.Conn, []byte) {
	s := &wsScanner{reg: x.honey}
	hit := func(t honeytoken.Token) {
		rq.honey = &honeyHit{t, "websocket"}
		rq.cutBy.Store(&cutInfo{policy.ReasonHoneytoken, honeyDetail(rq.honey)})
		up.Close()
		hc.Close()
	}
	refuse := func(err error) {
		rq.cutBy.Store(&cutInfo{policy.ReasonUpgrade, err.Error()})
		up.Close()
		hc.Close()
	}
	if t, ok := s.feed(pre); ok {
		hit(t)
		return client, nil
	}
	if s.err != nil {
		refuse(s.err)
		return client, nil
	}
	return &wsScanConn{Conn: client, s: s, hit: hit, refuse: refuse}, pre
}
