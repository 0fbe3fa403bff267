package proxy

import (
	"errors"
	"io"
	"net"
	"sync"
)

// relayBufSize is the copy size of a tunnel direction: large enough that a
// bulk transfer costs one read and one write per 64 KiB.
const relayBufSize = 64 << 10

// While data streams through a tunnel (the last read returned at least
// relayHot bytes), a read that finds nothing yields and retries up to
// relaySpin times (some 10–20 µs) before the goroutine parks. Parking lets
// a proxy's core go idle and every new segment then has to wake it: in a
// bulk transfer that was 15,700 context switches a second on the proxy's
// core (2,200 with the spin) and 86.8 % of the direct throughput on average
// over five interleaved rounds (92.0 % with it), for 9 points more of one
// core. TLS handshakes and small responses are below relayHot and never
// spin.
const (
	relayHot  = 16 << 10
	relaySpin = 20
)

var relayBufs = sync.Pool{New: func() any {
	b := make([]byte, relayBufSize)
	return &b
}}

// relay copies src to dst until src reports EOF or an error, like io.Copy,
// but takes a buffer from a pool only while src has data ready and gives
// it back before waiting again. An idle tunnel direction is then a parked
// goroutine and nothing more: no buffer, and no splice(2) pipe — io.Copy
// between two TCP sockets splices, and each waiting splice holds a pipe
// (two descriptors and its kernel buffer) for as long as the tunnel is
// quiet, and costs more system time than read and write on short tunnels.
// A streaming burst between sockets splices through a pipe of its own that
// ends with the burst (spliceBurst, Linux).
//
// Each read with data is recorded in idle (nil: not watched).
func relay(dst io.Writer, src net.Conn, idle *idleWatch) (int64, error) {
	rc := rawConn(src)
	if rc == nil {
		return copyPooled(dst, touchReader{src, idle})
	}
	return relayRaw(dst, rc, rawConn(dst), idle)
}

// copyPooled is io.Copy through a pooled buffer for connections that are
// not sockets (tests, wrapped conns).
func copyPooled(dst io.Writer, src io.Reader) (int64, error) {
	buf := relayBufs.Get().(*[]byte)
	defer relayBufs.Put(buf)
	n, err := io.CopyBuffer(writerOnly{dst}, readerOnly{src}, *buf)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return n, err
}

// writerOnly and readerOnly hide ReadFrom and WriteTo, so that CopyBuffer
// uses the pooled buffer.
type (
	writerOnly struct{ io.Writer }
	readerOnly struct{ io.Reader }
)

// touchReader records each read with data in an idleWatch.
type touchReader struct {
	r    io.Reader
	idle *idleWatch
}

func (t touchReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if n > 0 {
		t.idle.touch()
	}
	return n, err
}
