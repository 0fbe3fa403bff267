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

// wsCarry is how many payload bytes of earlier frames are kept and scanned
// again with the next: more than any honeytoken is long, so one split
// across frames (or reads) is still found whole.
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
}

// feed parses b, the next bytes the client sent, and returns the first
// honeytoken in a payload so far.
func (s *wsScanner) feed(b []byte) (honeytoken.Token, bool) {
	s.scratch = append(s.scratch[:0], s.carry...)
	for len(b) > 0 {
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
			s.scratch = append(s.scratch, c)
		}
		s.off += n
		s.left -= n
		b = b[n:]
		if s.left == 0 {
			s.head, s.need = s.head[:0], 0 // next frame
		}
	}
	t, ok := s.reg.Scan(s.scratch)
	keep := s.scratch[max(0, len(s.scratch)-wsCarry):]
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
	s.masked = s.head[1]&0x80 != 0
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
	s   *wsScanner
	hit func(honeytoken.Token)
}

func (c *wsScanConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		if t, ok := c.s.feed(p[:n]); ok {
			c.hit(t)
			return 0, errHoneytokenFrame
		}
	}
	return n, err
}

// scanWebSocket wraps the client side of an allowed WebSocket so that its
// frames are scanned for honeytokens; pre (bytes the client sent with the
// handshake) is scanned first and comes back nil when it carried one. A
// hit records the refusal on rq and closes both sides.
func (x *Proxy) scanWebSocket(rq *request, client, up, hc net.Conn, pre []byte) (net.Conn, []byte) {
	s := &wsScanner{reg: x.honey}
	hit := func(t honeytoken.Token) {
		rq.honey = &honeyHit{t, "websocket"}
		rq.cutBy.Store(&cutInfo{policy.ReasonHoneytoken, honeyDetail(rq.honey)})
		up.Close()
		hc.Close()
	}
	if t, ok := s.feed(pre); ok {
		hit(t)
		return client, nil
	}
	return &wsScanConn{Conn: client, s: s, hit: hit}, pre
}
