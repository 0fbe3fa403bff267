package proxy

import (
	"bytes"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/egressd/egressd/policy"
)

// headInfo is what net/http hides from handlers about one request head: it
// drops Content-Length when Transfer-Encoding is present and deletes the
// Host header of absolute-form requests. Both are smuggling signals.
type headInfo struct {
	bad      string // non-empty: why the head is refused with 400
	host     string // Host header value
	hostSeen bool
	size     int    // bytes of the head, request line and blank line included
	line     string // the request line as sent (capped): what a head net/http refuses is decided on
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
	// onGoError decides a head net/http refused itself (goError): it gets
	// the head and the status net/http would have sent, and answers in
	// its place.
	onGoError func(h headInfo, status int)
	// timeouts gives the head and idle timeouts in force, which replace
	// net/http's sentinel deadlines (newHTTPServer).
	timeouts func() (head, idle time.Duration)
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
	head   headInfo // what is known of the head: its request line and Host
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

// SetReadDeadline is net/http's: its sentinel header and idle deadlines
// become the current policy's timeouts (none when 0).
func (c *scanConn) SetReadDeadline(t time.Time) error {
	if c.timeouts != nil && !t.IsZero() {
		if d := time.Until(t); d > sentinelHeaderTimeout/2 {
			head, idle := c.timeouts()
			lim := head
			if d > (sentinelHeaderTimeout+sentinelIdleTimeout)/2 {
				lim = idle
			}
			t = time.Time{}
			if lim > 0 {
				t = time.Now().Add(lim)
			}
		}
	}
	return c.Conn.SetReadDeadline(t)
}

// refuseHead stops scanning and records why the head is refused.
func (c *scanConn) refuseHead(reason policy.Reason, detail string) {
	c.refusal = &refusal{reason: reason, detail: detail, head: c.partialHead()}
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
	var expect string
	h.line = string(truncateBytes(reqLine, maxKeptLine))
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
		if why := foldedFramingName(name); why != "" {
			h.bad = why
		}
		switch {
		case bytes.EqualFold(name, []byte("Expect")):
			expect = string(val)
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
	if expect != "" && !hasToken(expect, "100-continue") {
		// net/http answers any other expectation with a bare 417
		// before a handler runs: refused here, as a decision.
		c.refusal = &refusal{reason: policy.ReasonBadRequest, detail: fmt.Sprintf("Expect: %.40q is not 100-continue", expect), head: h}
		c.st, c.line = stDone, nil
		return
	}
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

// maxKeptLine caps the request line a head keeps for its decision.
const maxKeptLine = policy.MaxURLLen + maxMethodVersion

func truncateBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// foldedFramingName refuses a header name that is not Content-Length or
// Transfer-Encoding but becomes one when a backend folds '_' into '-'
// (CGI, some frameworks) or ignores case and surrounding junk: it would
// frame the body otherwise than egressd did.
func foldedFramingName(name []byte) string {
	if len(name) != len("Content-Length") && len(name) != len("Transfer-Encoding") {
		return ""
	}
	if bytes.EqualFold(name, []byte("Content-Length")) || bytes.EqualFold(name, []byte("Transfer-Encoding")) {
		return ""
	}
	folded := bytes.ReplaceAll(bytes.ToLower(name), []byte("_"), []byte("-"))
	if string(folded) == "content-length" || string(folded) == "transfer-encoding" {
		return fmt.Sprintf("header %.40q folds to a framing header", name)
	}
	return ""
}

// hasToken reports whether the comma-separated list v holds tok (case
// insensitive), as net/http reads Expect.
func hasToken(v, tok string) bool {
	for t := range strings.SplitSeq(v, ",") {
		if strings.EqualFold(strings.TrimSpace(t), tok) {
			return true
		}
	}
	return false
}

// partialHead is what is known of the head being read: its request line
// and Host header so far (a head refused before its end, or one net/http
// gave up on early).
func (c *scanConn) partialHead() headInfo {
	line := bytes.TrimLeft(c.line, "\r\n")
	reqLine, rest, _ := bytes.Cut(line, []byte("\n"))
	h := headInfo{line: string(truncateBytes(bytes.TrimSpace(reqLine), maxKeptLine)), size: c.headSize}
	for len(rest) > 0 {
		var l []byte
		l, rest, _ = bytes.Cut(rest, []byte("\n"))
		if name, val, ok := bytes.Cut(l, []byte(":")); ok && bytes.EqualFold(name, []byte("Host")) {
			h.host, h.hostSeen = string(bytes.TrimSpace(val)), true
			break
		}
	}
	return h
}

// goErrorHeaders are the headers of every answer net/http's server sends
// on its own when it cannot read a request (server.go: 400, 431, 501,
// 505), right after the status line. A handler's response never has them
// there: net/http writes a Date (its own, or the handler's, which sorts
// before Connection) ahead of Connection.
var goErrorHeaders = []byte("\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n")

// goErrorStatus returns the status of p when p is net/http's own answer to
// a head it could not read, else 0.
func goErrorStatus(p []byte) int {
	const prefix = "HTTP/1.1 "
	if len(p) < len(prefix)+3 || string(p[:len(prefix)]) != prefix {
		return 0
	}
	if i := bytes.Index(p, []byte("\r\n")); i < 0 || !bytes.HasPrefix(p[i:], goErrorHeaders) {
		return 0
	}
	code, err := strconv.Atoi(string(p[len(prefix) : len(prefix)+3]))
	if err != nil || code < 400 {
		return 0
	}
	return code
}

// Write passes the handler's bytes on, except net/http's own answer to a
// head it refused before any handler ran: that head is decided by
// onGoError instead (one decision line, X-Egressd-Deny), and net/http's
// bare answer is dropped.
func (c *scanConn) Write(p []byte) (int, error) {
	if c.onGoError != nil && len(p) > 0 && p[0] == 'H' {
		if status := goErrorStatus(p); status != 0 {
			if h, ok := c.failedHead(); ok {
				c.onGoError(h, status)
				return len(p), nil
			}
		}
	}
	return c.Conn.Write(p)
}

// failedHead is the head net/http failed on: the oldest one no handler
// claimed, or the one still being read. None in a tunnel.
func (c *scanConn) failedHead() (headInfo, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.heads) > 0 {
		return c.heads[0], true
	}
	if c.st == stHead && len(bytes.TrimSpace(c.line)) > 0 {
		return c.partialHead(), true
	}
	return headInfo{}, false
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
