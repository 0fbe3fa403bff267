package proxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
)

// relayBufSize is the copy size of a tunnel direction: large enough that a
// bulk transfer costs one read and one write per 64 KiB.
const relayBufSize = 64 << 10

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
func relay(dst io.Writer, src net.Conn) (int64, error) {
	sc, ok := src.(syscall.Conn)
	if !ok {
		return copyPooled(dst, src)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return copyPooled(dst, src)
	}
	rr := &relayRead{}
	read := rr.read // one closure per direction, not one per read
	var n int64
	for {
		err := rc.Read(read)
		buf := rr.buf
		rr.buf = nil
		switch {
		case err != nil: // closed, or a deadline
			if buf != nil {
				relayBufs.Put(buf)
			}
			return n, err
		case rr.err != nil:
			relayBufs.Put(buf)
			return n, rr.err
		case rr.n <= 0: // EOF
			relayBufs.Put(buf)
			return n, nil
		}
		nw, werr := dst.Write((*buf)[:rr.n])
		relayBufs.Put(buf)
		n += int64(nw)
		if werr == nil && nw != rr.n {
			werr = io.ErrShortWrite
		}
		if werr != nil {
			return n, werr
		}
	}
}

// relayRead is one read attempt: it borrows a buffer, reads, and gives
// the buffer back when there was nothing to read (EAGAIN), so that the
// wait for readability happens without it.
type relayRead struct {
	buf *[]byte
	n   int
	err error
}

func (r *relayRead) read(fd uintptr) bool {
	r.buf = relayBufs.Get().(*[]byte)
	for {
		r.n, r.err = syscall.Read(int(fd), *r.buf)
		if r.err != syscall.EINTR {
			break
		}
	}
	if r.err == syscall.EAGAIN {
		relayBufs.Put(r.buf)
		r.buf = nil
		return false
	}
	return true
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
