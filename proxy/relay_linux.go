//go:build linux

package proxy

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// relayRaw is relay between sockets: rc is the source's raw connection,
// wc the destination's (nil: not a socket, written through dst).
func relayRaw(dst io.Writer, rc, wc syscall.RawConn, idle *idleWatch) (int64, error) {
	rr := &relayRead{}
	read := rr.read // one closure per direction, not one per read
	rw := &relayWrite{}
	write := rw.write
	var n int64
	noSplice := false
	lowat := false // limitUnsent ran on wc
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
		if rr.n >= relayHot && wc != nil && !lowat {
			lowat = true
			limitUnsent(wc)
		}
		if rr.n >= relayHot && wc != nil && !noSplice {
			sn, eof, err := spliceBurst(rc, wc, idle)
			n += sn
			switch {
			case errors.Is(err, syscall.EINVAL) && sn == 0: // not spliceable: read and write
				noSplice = true
			case errors.Is(err, errNoPipe): // this burst reads and writes; the next tries again
			case err != nil:
				return n, err
			case eof:
				return n, nil
			default:
				rr.n = 0 // the burst spun already: the next wait parks at once
			}
		}
	}
}

// relayUnsent is the TCP_NOTSENT_LOWAT a streaming direction sets on its
// destination socket: at most this much written and not yet sent waits in
// the kernel, and a write beyond it returns EAGAIN. Without it the relay
// filled the destination's send buffer (megabytes) while the receiver's
// window was closed, and each window update the receiver sent then pushed
// that queued data out from the receiver's own core: on loopback the
// kernel delivers a segment on the core that transmits it, so a receiver
// on a busy core did both TCP hops' delivery. With the limit, the data
// waits in the source socket and the relay sends it from the proxy's core
// (bench, proxy on one core, client and origin on the other: a 64 MiB
// transfer went from 0.80–0.83 of a direct one just before it to
// 0.92–0.98 with 32 KiB in three interleaved rounds; 16 and 64 KiB did
// about as well, and the relay used a sixth less CPU). Only a direction
// that streams pays the system call.
const relayUnsent = 32 << 10

// limitUnsent sets relayUnsent on a destination socket (above). A socket
// that is not TCP refuses it; that changes nothing but the speed.
func limitUnsent(wc syscall.RawConn) {
	wc.Control(func(fd uintptr) {
		v := int32(relayUnsent)
		syscall.RawSyscall6(syscall.SYS_SETSOCKOPT, fd, syscall.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, uintptr(unsafe.Pointer(&v)), 4, 0)
	})
}

// errNoPipe: a burst could not get a pipe (EMFILE, ENFILE, ENOMEM: a
// sandbox opening many tunnels can run the process out of descriptors).
// The burst then moves with read and write: a pipe only saves CPU, and an
// open tunnel must not be cut for the want of one.
var errNoPipe = errors.New("relay pipe")

// relaySplicedBytes counts the bytes relays moved with splice(2), and
// relayPipesOpen the pipes they hold now (read by tests).
var relaySplicedBytes, relayPipesOpen atomic.Int64

// relayPipeSize is the pipe buffer a burst asks for, and the most one
// splice moves: 256 KiB moved a loopback stream with as little CPU as Go's
// 1 MiB (BenchmarkRelay on one core), and keeps many concurrent bursts
// under the kernel's per-user pipe budget (pipe-user-pages-soft, 64 MiB;
// above it a pipe gets two pages and the burst more calls, never a
// failure). The kernel keeps the default size if it refuses.
const relayPipeSize = 256 << 10

// spliceBurst moves the rest of a streaming burst from rc to wc with
// splice(2) through a pipe of its own: the kernel passes the socket's
// pages on, where read and write copied each 64 KiB into the process and
// out again (BenchmarkRelay on one core: about 30 % less CPU for the
// writer, the relay and the reader together). The pipe lives only
// as long as the burst: when the source has nothing more after the relay's
// short spin, the burst ends with the pipe empty and closed, and the
// direction waits on read like an idle one, with no buffer and no pipe
// (an idle tunnel holds no descriptors beyond its two sockets). It
// returns the bytes moved, whether the source reached EOF, and the error
// that ended it (EINVAL with nothing moved: the sockets cannot splice).
func spliceBurst(rc, wc syscall.RawConn, idle *idleWatch) (n int64, eof bool, err error) {
	// Raw system calls, as the relay's reads and writes: none of these
	// blocks, and entersyscall would wake sysmon (relayRead).
	var p [2]int32
	if _, _, e := syscall.RawSyscall(syscall.SYS_PIPE2, uintptr(unsafe.Pointer(&p)), syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0); e != 0 {
		return 0, false, fmt.Errorf("%w: %w", errNoPipe, e)
	}
	relayPipesOpen.Add(1)
	defer func() {
		syscall.RawSyscall(syscall.SYS_CLOSE, uintptr(p[0]), 0, 0)
		syscall.RawSyscall(syscall.SYS_CLOSE, uintptr(p[1]), 0, 0)
		relayPipesOpen.Add(-1)
	}()
	syscall.RawSyscall(syscall.SYS_FCNTL, uintptr(p[0]), syscall.F_SETPIPE_SZ, relayPipeSize) // a smaller pipe works, in more calls
	in := &spliceIn{pipe: uintptr(p[1])}
	out := &spliceOut{pipe: uintptr(p[0])}
	fill, drain := in.fill, out.drain // one closure each per burst
	for {
		in.spin = relaySpin
		if err := rc.Read(fill); err != nil {
			return n, false, err
		}
		switch {
		case in.err == syscall.EAGAIN: // quiet after the spin: the burst is over
			return n, false, nil
		case in.err != nil:
			return n, false, in.err
		case in.n == 0:
			return n, true, nil
		}
		idle.touch()
		out.left, out.err = in.n, nil
		werr := wc.Write(drain)
		moved := int64(in.n - out.left)
		n += moved
		relaySplicedBytes.Add(moved)
		if werr == nil {
			werr = out.err
		}
		if werr != nil {
			return n, false, werr
		}
	}
}

// spliceIn is one splice from the source socket into the pipe: it
// reports EAGAIN (done, no wait) once the source stays empty through the
// spin, so that the burst can close its pipe before the direction parks.
type spliceIn struct {
	pipe uintptr
	spin int
	n    int
	err  error
}

func (s *spliceIn) fill(fd uintptr) bool {
	for {
		r, _, e := syscall.RawSyscall6(syscall.SYS_SPLICE, fd, 0, s.pipe, 0, relayPipeSize, spliceFlags)
		s.n, s.err = int(r), nil
		if e != 0 {
			s.n, s.err = 0, e
		}
		switch {
		case e == syscall.EAGAIN && s.spin > 0:
			s.spin--
			runtime.Gosched()
		case e != syscall.EINTR:
			return true
		}
	}
}

// spliceOut empties the pipe into the destination socket, waiting for
// writability (false) on EAGAIN.
type spliceOut struct {
	pipe uintptr
	left int
	err  error
}

func (s *spliceOut) drain(fd uintptr) bool {
	for s.left > 0 {
		r, _, e := syscall.RawSyscall6(syscall.SYS_SPLICE, s.pipe, 0, fd, 0, uintptr(s.left), spliceFlags)
		switch e {
		case 0:
			if r == 0 {
				s.err = io.ErrShortWrite
				return true
			}
			s.left -= int(r)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			s.err = e
			return true
		}
	}
	return true
}

// spliceFlags: SPLICE_F_MOVE (a hint) and SPLICE_F_NONBLOCK (the pipe end
// never blocks; the sockets are non-blocking already).
const spliceFlags = 0x1 | 0x2

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
