package proxy

import (
	"bytes"
	"fmt"
	"net"
	"strconv"
	"sync"

	"github.com/egressd/egressd/policy"
)

// headInfo is what net/http hides from handlers about one request head: it
// drops Content-Length when Transfer-Encoding is present and deletes the
// Host header of absolute-form requests. Both are smuggling signals.
type headInfo struct {
	bad      string // non-empty: why the head is refused with 400
	host     string // Host header value
	hostSeen bool
	size     int // bytes of the head, request line and blank line included
}

// scanConn watches the bytes net/http reads from a client connection and
// records, per request head, the header facts the handler needs. It follows
// HTTP/1.1 message framing (Content-Length and chunked bodies) to find each
// head; after a CONNECT head the connection is a tunnel and scanning stops.
//
// It also enforces the head limits, before net/http buffers anything: a
// head over limits.header_bytes gets 431, a request target over
// policy.MaxURLLen 414, each with X-Egressd-Deny, and the connection ends.
// net/http's own limit is higher, so no head gets past net/http that the
// scanner did not read to its end (the two limits agree).
type scanConn struct {
	net.Conn

	mu       sync.Mutex
	heads    []headInfo // parsed but not yet claimed by a handler
	release  func()     // the client connection slot (admitClient); nil inside tunnels
	refusal  *refusal   // set by scan: the head is over a limit
	refused  error      // returned by every Read once the refusal is sent
	onRefuse func(refusal)
	headSize int // bytes of the current head so far
	lineNo   int // lines of the current head so far

	st        scanState
	line      []byte // current head or chunk-size/trailer line, capped
	bodyLeft  int64
	headLimit int
}

type scanState uint8

const (
	stHead scanState = iota
	stBody
	stChunkSize
	stChunkData
	stChunkEnd
	stTrailer
	stDone // tunnel, upgrade, or lost framing: stop watching
)

// refusal is a head the scanner refuses.
type refusal struct {
	reason policy.Reason
	detail string
}

func newScanConn(c net.Conn, headLimit int) *scanConn {
	return &scanConn{Conn: c, headLimit: headLimit}
}

func (c *scanConn) Read(p []byte) (int, error) {
	if c.refused != nil {
		return 0, c.refused
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		c.scan(p[:n])
		ref := c.refusal
		c.mu.Unlock()
		if ref != nil {
			// None of these bytes reach net/http: it sees a read error
			// and closes without an answer of its own.
			c.refused = &net.OpError{Op: "read", Net: "tcp", Err: fmt.Errorf("egressd: %s: %s", ref.reason, ref.detail)}
			if c.onRefuse != nil {
				c.onRefuse(*ref)
			}
			return 0, c.refused
		}
	}
	return n, err
}

// refuseHead stops scanning and records why the head is refused.
func (c *scanConn) refuseHead(reason policy.Reason, detail string) {
	c.refusal = &refusal{reason, detail}
	c.st = stDone
	c.line = nil
}

// checkHeadSize refuses the current head when it is over a limit: the
// whole head over headLimit, or a request line whose target is over
// policy.MaxURLLen (checked as soon as the line is that long, ended or
// not).
func (c *scanConn) checkHeadSize(lineEnded bool) {
	if c.headSize > c.headLimit {
		c.refuseHead(policy.ReasonHeaderTooLarge, fmt.Sprintf("request head over limits.header_bytes (%d bytes)", c.headLimit))
		return
	}
	if c.lineNo > 0 {
		return
	}
	line := bytes.TrimLeft(c.line, "\r\n")
	if !lineEnded {
		if len(line) > policy.MaxURLLen+maxMethodVersion {
			c.refuseHead(policy.ReasonURLTooLong, fmt.Sprintf("request target over %d bytes", policy.MaxURLLen))
		}
		return
	}
	_, rest, _ := bytes.Cut(bytes.TrimSpace(line), []byte(" "))
	target, _, _ := bytes.Cut(rest, []byte(" "))
	if len(target) > policy.MaxURLLen {
		c.refuseHead(policy.ReasonURLTooLong, fmt.Sprintf("request target over %d bytes", policy.MaxURLLen))
	}
}

// maxMethodVersion is room for a method and version around the request
// target before an unended request line is called too long.
const maxMethodVersion = 64

// next returns the facts about the oldest unclaimed request head.
func (c *scanConn) next() (headInfo, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.heads) == 0 {
		return headInfo{}, false
	}
	h := c.heads[0]
	n := copy(c.heads, c.heads[1:]) // keep the backing array: heads come one at a time
	c.heads[n] = headInfo{}
	c.heads = c.heads[:n]
	return h, true
}

func (c *scanConn) scan(b []byte) {
	for len(b) > 0 && c.st != stDone {
		switch c.st {
		case stHead:
			i := bytes.IndexByte(b, '\n')
			if i < 0 {
				c.appendLine(b)
				c.headSize += len(b)
				c.checkHeadSize(false)
				return
			}
			c.appendLine(b[:i+1])
			c.headSize += i + 1
			b = b[i+1:]
			if c.checkHeadSize(true); c.refusal != nil {
				return
			}
			if bytes.HasSuffix(c.line, []byte("\r\n\r\n")) || bytes.HasSuffix(c.line, []byte("\n\n")) {
				c.endHead()
			} else if len(bytes.TrimSpace(c.line)) == 0 {
				c.line = c.line[:0] // blank lines before a request line are allowed
			} else {
				c.lineNo++
			}
		case stBody:
			n := int64(len(b))
			if n > c.bodyLeft {
				n = c.bodyLeft
			}
			c.bodyLeft -= n
			b = b[n:]
			if c.bodyLeft == 0 {
				c.st = stHead
			}
		case stChunkSize, stChunkEnd, stTrailer:
			i := bytes.IndexByte(b, '\n')
			if i < 0 {
				c.appendLine(b)
				return
			}
			c.appendLine(b[:i+1])
			b = b[i+1:]
			c.endLine()
		case stChunkData:
			n := int64(len(b))
			if n > c.bodyLeft {
				n = c.bodyLeft
			}
			c.bodyLeft -= n
			b = b[n:]
			if c.bodyLeft == 0 {
				c.st = stChunkEnd
			}
		}
	}
}

func (c *scanConn) appendLine(b []byte) {
	if len(c.line)+len(b) <= c.headLimit+4 {
		c.line = append(c.line, b...)
	} else {
		c.line = append(c.line, b[:max(0, c.headLimit+4-len(c.line))]...)
		c.line = append(c.line, 'x') // mark overflow
	}
}

func (c *scanConn) endLine() {
	line := bytes.TrimRight(c.line, "\r\n")
	c.line = c.line[:0]
	switch c.st {
	case stChunkSize:
		if i := bytes.IndexByte(line, ';'); i >= 0 {
			line = line[:i]
		}
		n, err := strconv.ParseInt(string(bytes.TrimSpace(line)), 16, 64)
		if err != nil || n < 0 {
			c.st = stDone // net/http rejects the body too
			return
		}
		if n == 0 {
			c.st = stTrailer
			return
		}
		c.bodyLeft, c.st = n, stChunkData
	case stChunkEnd:
		c.st = stChunkSize
	case stTrailer:
		if len(line) == 0 {
			c.st = stHead
		}
	}
}

// endHead records the facts of a complete head and sets up body framing.
func (c *scanConn) endHead() {
	head := c.line
	var h headInfo
	reqLine, rest, _ := bytes.Cut(head, []byte("\n"))
	reqLine = bytes.TrimSpace(reqLine)
	var cl, te int
	var chunked bool
	var length int64
	for len(rest) > 0 {
		var l []byte
		l, rest, _ = bytes.Cut(rest, []byte("\n"))
		l = bytes.TrimRight(l, "\r")
		if len(l) == 0 {
			continue
		}
		name, val, ok := bytes.Cut(l, []byte(":"))
		if !ok {
			continue
		}
		if len(name) > 0 && (name[len(name)-1] == ' ' || name[len(name)-1] == '\t') {
			h.bad = "whitespace before colon in header"
		}
		val = bytes.TrimSpace(val)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			cl++
			length, _ = strconv.ParseInt(string(val), 10, 64)
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			te++
			chunked = bytes.EqualFold(lastToken(val), []byte("chunked"))
		case bytes.EqualFold(name, []byte("Host")):
			if h.hostSeen {
				h.bad = "more than one Host header"
			}
			h.hostSeen = true
			h.host = string(val)
		}
	}
	switch {
	case cl > 0 && te > 0:
		h.bad = "both Content-Length and Transfer-Encoding"
	case te > 1:
		h.bad = "more than one Transfer-Encoding header"
	}
	h.size = c.headSize
	c.headSize, c.lineNo = 0, 0
	c.heads = append(c.heads, h)
	// head (and reqLine) alias c.line: reuse it for the next head, unless
	// it grew large or the connection stops being HTTP.
	c.line = c.line[:0]
	if cap(c.line) > 4<<10 {
		c.line = nil
	}
	switch {
	case bytes.HasPrefix(reqLine, []byte("CONNECT ")):
		c.st = stDone
	case te > 0 && chunked:
		c.st = stChunkSize
	case te > 0:
		c.st = stDone // not chunked: net/http refuses it
	case cl > 0 && length > 0:
		c.st, c.bodyLeft = stBody, length
	default:
		c.st = stHead
	}
	if c.st == stDone {
		c.line = nil // a tunnel from here on: nothing more to scan
	}
}

func lastToken(v []byte) []byte {
	if i := bytes.LastIndexByte(v, ','); i >= 0 {
		v = v[i+1:]
	}
	return bytes.TrimSpace(v)
}

// Close closes the connection and gives back its slot once.
func (c *scanConn) Close() error {
	err := c.Conn.Close()
	c.mu.Lock()
	rel := c.release
	c.release = nil
	c.mu.Unlock()
	if rel != nil {
		rel()
	}
	return err
}
