//go:build linux

package proxy

import (
	"io"
	"runtime"
	"syscall"
	"unsafe"
)

// relayRaw is relay between sockets: rc is the source's raw connection,
// wc the destination's (nil: not a socket, written through dst).
func relayRaw(dst io.Writer, rc, wc syscall.RawConn, idle *idleWatch) (int64, error) {
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
//
// It sends with MSG_NOSIGNAL: most tunnels end with one side gone while
// the other direction still writes, and a plain write(2) then raises
// SIGPIPE, a round trip through the kernel and the runtime's signal
// handler per tunnel (the write fails with EPIPE either way). A
// destination that is not a socket (ENOTSOCK) is written to plainly.
type relayWrite struct {
	p       []byte
	n       int
	err     error
	notSock bool
}

func (w *relayWrite) write(fd uintptr) bool {
	for len(w.p) > 0 {
		var r uintptr
		var e syscall.Errno
		if w.notSock {
			r, _, e = syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&w.p[0])), uintptr(len(w.p)))
		} else {
			r, _, e = syscall.RawSyscall6(syscall.SYS_SENDTO, fd, uintptr(unsafe.Pointer(&w.p[0])), uintptr(len(w.p)), syscall.MSG_NOSIGNAL, 0, 0)
		}
		n := int(r)
		switch e {
		case syscall.ENOTSOCK:
			w.notSock = true
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
