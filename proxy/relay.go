package proxy

import (
	"errors"
	"io"
	"net"
	"runtime"
	"sync"
	"syscall"
	"unsafe"
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
//
// Each read with data is recorded in idle (nil: not watched).
func relay(dst io.Writer, src net.Conn, idle *idleWatch) (int64, error) {
	rc := rawConn(src)
	if rc == nil {
		return copyPooled(dst, touchReader{src, idle})
	}
	wc := rawConn(dst)
	rr := &relayRead{}
	read := rr.read // one closure per direction, not one per read
	rw := &relayWrite{}
	write := rw.write
	var n int64
	for {
		rr.spin = 0
		if rr.n >= relayHot {
			rr.spin = relaySpin
		}
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
		idle.touch()
		var nw int
		var werr error
		if wc != nil {
			rw.p, rw.n, rw.err = (*buf)[:rr.n], 0, nil
			werr = wc.Write(write)
			if werr == nil {
				werr = rw.err
			}
			nw = rw.n
			rw.p = nil
		} else {
			nw, werr = dst.Write((*buf)[:rr.n])
		}
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

func rawConn(c any) syscall.RawConn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// relayRead is one read attempt: it borrows a buffer, reads, and gives
// the buffer back when there was nothing to read (EAGAIN), so that the
// wait for readability happens without it.
//
// The relay reads and writes with syscall.RawSyscall, which skips the
// runtime's entersyscall/exitsyscall. The sockets are non-blocking (the
// netpoller does the waiting), so each call returns at once; and
// entersyscall is what wakes the runtime's sysmon thread when the process
// was idle, which then polls every 20 µs: on a proxy pinned to one core that
// preempted the relay thousands of times a second (bench/RESULTS.md: CPU per
// tunnel -11 %, proxy CPU in a bulk transfer -20 %).
type relayRead struct {
	spin int
	buf  *[]byte
	n    int
	err  error
}

func (r *relayRead) read(fd uintptr) bool {
	r.buf = relayBufs.Get().(*[]byte)
	for {
		b := *r.buf
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
		r.n, r.err = int(n), nil
		if e != 0 {
			r.n, r.err = -1, e
		}
		if r.err == syscall.EAGAIN && r.spin > 0 {
			r.spin--
			runtime.Gosched()
			continue
		}
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

// relayWrite writes p in full, returning false (wait for writability) on
// EAGAIN.
type relayWrite struct {
	p   []byte
	n   int
	err error
}

func (w *relayWrite) write(fd uintptr) bool {
	for len(w.p) > 0 {
		r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&w.p[0])), uintptr(len(w.p)))
		n := int(r)
		switch e {
		case 0:
			if n == 0 {
				w.err = io.ErrShortWrite
				return true
			}
			w.p = w.p[n:]
			w.n += n
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			w.err = e
			return true
		}
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
