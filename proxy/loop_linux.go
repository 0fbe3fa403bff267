//go:build linux

package proxy

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A spliced tunnel carrying small messages, or none, is relayed by a
// tunnelLoop: its two sockets leave Go's poller for an epoll set of
// egressd's own, which one goroutine per loop serves, so such a tunnel
// holds no goroutine, no Go poll descriptor and no buffer. The Go runtime
// never gives back the goroutine and poll descriptors of its peak: 10,000
// tunnels relayed by goroutines left 25 MiB behind after they closed
// (82 % of their memory back a minute later). Relayed here, an idle
// tunnel costs 6–7 KiB instead of 14, and its memory is back within
// seconds of its close (bench/RESULTS.md, "Eighth round").
//
// The loop's goroutine waits in Go's poller, where the epoll set itself
// is registered, and so runs on Go's threads: a thread of its own blocked
// in epoll_wait cost 5 % more CPU per short tunnel, a context switch per
// event. It reads once per event, level-triggered: a socket with more data
// is reported again, so no read is spent to learn that it is empty.
//
// A tunnel that streams (a read of relayHot bytes or more) goes back to
// the goroutine relay (pipe), which splices, spins and limits unsent data
// (relay_linux.go), with what the loop read and had not written. It stays
// there until it ends.

// tunnelLoops are the process's loops, one per CPU Go runs on; a tunnel
// goes to one by its client descriptor.
type tunnelLoops []*tunnelLoop

// processLoops starts the process's loops once, for every proxy in it;
// when they cannot start, tunnels are relayed by goroutines and log says
// so, once.
func processLoops(log *slog.Logger) tunnelLoops {
	ls, err := loopsOnce()
	if err != nil && log != nil && loopErrOnce.CompareAndSwap(false, true) {
		log.Warn("tunnel loops not started; quiet tunnels are relayed by goroutines", "error", err)
	}
	return ls
}

var (
	loopsOnce   = sync.OnceValues(newTunnelLoops)
	loopErrOnce atomic.Bool
)

// newTunnelLoops starts the loops; an error leaves tunnels to the
// goroutine relay.
func newTunnelLoops() (tunnelLoops, error) {
	ls := make(tunnelLoops, runtime.GOMAXPROCS(0))
	for i := range ls {
		l, err := newTunnelLoop()
		if err != nil {
			for _, s := range ls[:i] {
				s.close()
			}
			return nil, err
		}
		ls[i] = l
	}
	return ls, nil
}

type tunnelLoop struct {
	ep   int
	file *os.File // ep, in Go's poller: the loop waits there, on no thread of its own
	mu   sync.Mutex
	ends map[int32]*loopEnd // by descriptor
	evs  []unix.EpollEvent
	buf  []byte        // the loop's read buffer
	stop chan struct{} // closed when run returns
}

func newTunnelLoop() (*tunnelLoop, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	if err := unix.SetNonblock(ep, true); err != nil {
		unix.Close(ep)
		return nil, os.NewSyscallError("fcntl", err)
	}
	l := &tunnelLoop{ep: ep, file: os.NewFile(uintptr(ep), "tunnel-loop"), ends: map[int32]*loopEnd{},
		evs: make([]unix.EpollEvent, 128), buf: make([]byte, relayBufSize), stop: make(chan struct{})}
	rc, err := l.file.SyscallConn()
	if err != nil {
		l.file.Close()
		return nil, fmt.Errorf("tunnel loop: %w", err)
	}
	go l.run(rc)
	return l, nil
}

// close ends an empty loop (a failed start); loops that relay live as
// long as the process.
func (l *tunnelLoop) close() {
	l.file.Close()
	<-l.stop
}

// Pair states; each change is made under the pair's mutex.
const (
	pairStarting = iota // adopt is moving the sockets in
	pairLooped          // the loop relays it
	pairHot             // handed to the goroutine relay
	pairDone            // both sockets closed by the loop
)

// loopPair is one tunnel in a loop.
type loopPair struct {
	ls   tunnelLoops
	l    *tunnelLoop // the loop adopt chose
	a, b loopEnd     // a: the client, b: the upstream
	idle *idleWatch

	stay bool // a hand-back failed: the loop relays the pair to its end

	mu     sync.Mutex
	state  int
	cutAsk bool        // cut before the sockets were in place
	hot    [2]net.Conn // pairHot: the goroutine relay's connections

	done     func(out, in int64, idled bool)
	streamed func()
	timeout  time.Duration
}

// loopEnd is one socket of a pair: the loop reads it and writes to peer.
type loopEnd struct {
	fd    int
	p     *loopPair
	peer  *loopEnd
	eof   bool   // its direction ended: read EOF or an error, peer's write side shut
	pend  []byte // read from peer, not yet written here (peer is not read meanwhile)
	n     int64  // bytes read here and written to peer
	mask  uint32 // the epoll events asked for
	hup   bool   // epoll reported a hang-up or an error here
	inSet bool   // in the epoll set (see setMask)
}

// pair makes the loop state of one tunnel, for adopt. done runs once, on
// a goroutine of its own, when the tunnel has ended (both directions, or
// cut, or idle for timeout), with the bytes each way; streamed (may be
// nil) runs on the loop's goroutine when the tunnel goes to the goroutine
// relay. nil: no loops.
func (ls tunnelLoops) pair(timeout time.Duration, done func(out, in int64, idled bool), streamed func()) *loopPair {
	if len(ls) == 0 {
		return nil
	}
	return &loopPair{ls: ls, done: done, streamed: streamed, timeout: timeout}
}

// adopt moves client and up into a loop. It reports false, with nothing
// changed, when either connection is not a socket or its descriptor
// cannot be duplicated; then the caller relays them.
func (p *loopPair) adopt(client, up net.Conn) bool {
	crc, urc := rawConn(client), rawConn(up)
	if crc == nil || urc == nil {
		return false
	}
	cfd, err := dupFD(crc)
	if err != nil {
		return false
	}
	ufd, err := dupFD(urc)
	if err != nil {
		unix.Close(cfd)
		return false
	}
	l := p.ls[cfd%len(p.ls)]
	p.l = l
	p.a = loopEnd{fd: cfd, p: p}
	p.b = loopEnd{fd: ufd, p: p}
	p.a.peer, p.b.peer = &p.b, &p.a
	// The duplicates keep the sockets open; Go's descriptors go, and
	// with them their poll descriptors.
	closeGoSocket(client)
	closeGoSocket(up)
	p.idle = newIdleWatch(p.timeout, p.cut)
	p.a.mask = unix.EPOLLIN | unix.EPOLLRDHUP
	p.b.mask = p.a.mask
	p.a.inSet, p.b.inSet = true, true
	// The loop handles a batch of events under l.mu: once the sockets
	// are in the set it may run at once, and p must be complete.
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ends[int32(cfd)] = &p.a
	l.ends[int32(ufd)] = &p.b
	p.mu.Lock()
	p.state = pairLooped // before the loop can end it (pairDone)
	ask := p.cutAsk
	p.mu.Unlock()
	if ask {
		p.cut()
	}
	err = unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, cfd, &unix.EpollEvent{Events: p.a.mask, Fd: int32(cfd)})
	if err == nil {
		if err = unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, ufd, &unix.EpollEvent{Events: p.b.mask, Fd: int32(ufd)}); err != nil {
			unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, cfd, nil)
		}
	}
	if err != nil {
		// Go's descriptors are closed already: end the tunnel here
		// rather than leave it relayed by nobody.
		l.finish(p)
	}
	return true
}

// closeGoSocket closes c's Go descriptor. A connection whose Close does
// more than that (outConn: it forgets the local address ViaProxy checks)
// closes only the socket here; the rest waits for the tunnel's end
// (closeTunnel), as the socket lives on in the loop.
func closeGoSocket(c net.Conn) {
	if s, ok := c.(interface{ closeSocket() error }); ok {
		s.closeSocket()
		return
	}
	c.Close()
}

// dupFD duplicates rc's descriptor (close-on-exec; it shares the socket
// and its non-blocking mode).
func dupFD(rc syscall.RawConn) (int, error) {
	fd, derr := -1, error(nil)
	if err := rc.Control(func(f uintptr) { fd, derr = unix.FcntlInt(f, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return -1, err
	}
	if derr != nil {
		return -1, os.NewSyscallError("fcntl", derr)
	}
	return fd, nil
}

// cut ends the tunnel: a quarantine, a reload's re-decision, the drain at
// shutdown, or the idle watch. In the loop, both sockets are shut down,
// and the loop sees both directions end; in the goroutine relay, its
// connections are closed.
func (p *loopPair) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch p.state {
	case pairStarting:
		p.cutAsk = true
	case pairLooped:
		unix.Shutdown(p.a.fd, unix.SHUT_RDWR)
		unix.Shutdown(p.b.fd, unix.SHUT_RDWR)
	case pairHot:
		p.cutAsk = true
		for _, c := range p.hot {
			if c != nil {
				c.Close()
			}
		}
	}
}

// run waits in Go's poller until the epoll set has events (a thread of
// its own cost 5 % more CPU per short tunnel: a context switch per
// event), then handles them until none is left.
func (l *tunnelLoop) run(rc syscall.RawConn) {
	defer close(l.stop)
	for {
		err := rc.Read(l.drain)
		if err != nil {
			return // closed (a failed start)
		}
	}
}

// drain handles the set's events until there are none; it returns false
// to wait for more (Go's poller reports the set edge-triggered: it must
// be empty before the wait), and true on an error.
func (l *tunnelLoop) drain(uintptr) bool {
	for {
		// A wait that does not block, without the runtime's syscall
		// bookkeeping (see relayRead).
		r, _, errno := syscall.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(l.ep), uintptr(unsafe.Pointer(&l.evs[0])), uintptr(len(l.evs)), 0, 0, 0)
		n := int(r)
		switch {
		case errno == syscall.EINTR:
			continue
		case errno != 0:
			return true
		case n == 0:
			return false
		}
		// A batch runs under l.mu, so adopt cannot add a tunnel on a
		// descriptor number closed earlier in the batch: a later event
		// of the batch on that number finds no tunnel.
		l.mu.Lock()
		for i := range l.evs[:n] {
			if e := l.ends[l.evs[i].Fd]; e != nil {
				l.event(e, l.evs[i].Events)
			}
		}
		l.mu.Unlock()
	}
}

const (
	evRead  = unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLERR | unix.EPOLLHUP
	evWrite = unix.EPOLLOUT | unix.EPOLLERR | unix.EPOLLHUP
)

// event advances e's pair after readiness ev on e.
func (l *tunnelLoop) event(e *loopEnd, ev uint32) {
	p := e.p
	if ev&(unix.EPOLLERR|unix.EPOLLHUP) != 0 {
		e.hup = true
	}
	if e.pend != nil && ev&evWrite != 0 {
		l.flush(e)
	}
	if !e.eof && e.peer.pend == nil && ev&evRead != 0 {
		if hot := l.read(e); hot && l.handBack(p) {
			return
		}
	}
	if e.eof && e.hup && e.pend == nil && !e.peer.eof {
		// e has nothing more to read and is gone both ways (a reset,
		// or both sides shut): the direction into it can deliver
		// nothing either.
		l.end(e.peer)
	}
	if p.a.eof && p.b.eof && p.a.pend == nil && p.b.pend == nil {
		l.finish(p)
		return
	}
	l.setMask(e)
	l.setMask(e.peer)
}

// read reads e once and writes what it got to e.peer, keeping what the
// peer did not take; hot reports a read of relayHot bytes or more, which
// leaves the bytes in e.peer.pend for the goroutine relay.
func (l *tunnelLoop) read(e *loopEnd) (hot bool) {
	b := l.buf
	n, _, errno := syscall.RawSyscall(syscall.SYS_READ, uintptr(e.fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	switch {
	case errno == syscall.EAGAIN || errno == syscall.EINTR:
		return false
	case errno != 0 || n == 0:
		l.end(e)
		return false
	}
	e.p.idle.touch()
	if int(n) >= relayHot && !e.p.stay {
		e.peer.pend = append([]byte(nil), b[:n]...)
		return true
	}
	w, err := sendNoSignal(e.peer.fd, b[:n])
	e.n += int64(w)
	if err != nil {
		l.end(e) // the peer is gone: this direction can deliver nothing
		return false
	}
	if w < int(n) {
		e.peer.pend = append([]byte(nil), b[w:n]...)
	}
	return false
}

// flush writes what waits for e.
func (l *tunnelLoop) flush(e *loopEnd) {
	w, err := sendNoSignal(e.fd, e.pend)
	e.peer.n += int64(w)
	switch {
	case err != nil:
		e.pend = nil
		l.end(e.peer)
	case w == len(e.pend):
		e.pend = nil
	default:
		e.pend = e.pend[w:]
	}
}

// sendNoSignal writes b to a socket without SIGPIPE (see relayWrite):
// how much it took; EAGAIN is no error.
func sendNoSignal(fd int, b []byte) (int, error) {
	for {
		n, _, errno := syscall.RawSyscall6(syscall.SYS_SENDTO, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), syscall.MSG_NOSIGNAL, 0, 0)
		switch errno {
		case 0:
			return int(n), nil
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return 0, nil
		default:
			return 0, errno
		}
	}
}

// end ends the direction out of e: nothing more is read from e, and the
// peer's write side is shut (nothing from e waits for the peer: e is not
// read while something does, and a failed write drops it).
func (l *tunnelLoop) end(e *loopEnd) {
	if e.eof {
		return
	}
	e.eof = true
	unix.Shutdown(e.peer.fd, unix.SHUT_WR)
}

// setMask asks epoll for what e can use now: reads while its direction is
// open and the peer has taken everything, writes while data waits for it.
// A hang-up is reported on every wait whatever the mask, so a hung-up
// socket that has nothing to do until its peer takes data leaves the set
// until then.
func (l *tunnelLoop) setMask(e *loopEnd) {
	var m uint32
	if !e.eof && e.peer.pend == nil {
		m |= unix.EPOLLIN | unix.EPOLLRDHUP
	}
	if e.pend != nil {
		m |= unix.EPOLLOUT
	}
	switch {
	case m == 0 && e.hup:
		if e.inSet {
			unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, e.fd, nil)
			e.inSet = false
		}
	case !e.inSet:
		e.mask, e.inSet = m, true
		unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, e.fd, &unix.EpollEvent{Events: m, Fd: int32(e.fd)})
	case m != e.mask:
		e.mask = m
		unix.EpollCtl(l.ep, unix.EPOLL_CTL_MOD, e.fd, &unix.EpollEvent{Events: m, Fd: int32(e.fd)})
	}
}

// forget takes p's sockets out of the loop's map (l.mu held).
func (l *tunnelLoop) forget(p *loopPair) {
	delete(l.ends, int32(p.a.fd))
	delete(l.ends, int32(p.b.fd))
}

// finish closes an ended pair and reports it (l.mu held).
func (l *tunnelLoop) finish(p *loopPair) {
	l.forget(p)
	p.mu.Lock()
	p.state = pairDone
	// Out of the set first: a close takes a socket out only with its
	// last reference, and another (a child between fork and exec) would
	// leave an item whose hang-up is reported on every wait.
	for _, e := range []*loopEnd{&p.a, &p.b} {
		if e.inSet {
			unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, e.fd, nil)
		}
		unix.Close(e.fd)
	}
	p.mu.Unlock()
	idled := p.idle.stop()
	go p.done(p.a.n, p.b.n, idled)
}

// handBack (l.mu held) gives a streaming pair to the goroutine relay:
// its sockets become Go connections again (net.FileConn), leave the loop,
// and pipeFrom runs the rest of the tunnel, the bytes the loop read and
// did not write first. It reports false when the connections cannot be
// made (out of descriptors: FileConn duplicates): the pair then stays in
// the loop for good, which relays what it read as any other bytes — an
// open tunnel is not cut for want of a descriptor.
func (l *tunnelLoop) handBack(p *loopPair) bool {
	client, err := fileConn(p.a.fd)
	if err != nil {
		p.stay = true
		return false
	}
	up, err := fileConn(p.b.fd)
	if err != nil {
		client.Close()
		p.stay = true
		return false
	}
	l.forget(p)
	for _, e := range []*loopEnd{&p.a, &p.b} {
		if e.inSet {
			unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, e.fd, nil)
		}
	}
	p.mu.Lock()
	p.state = pairHot
	p.hot = [2]net.Conn{client, up}
	cut := p.cutAsk
	p.mu.Unlock()
	// The Go connections hold their own descriptors of the sockets.
	unix.Close(p.a.fd)
	unix.Close(p.b.fd)
	p.idle.stop()
	if p.streamed != nil {
		p.streamed()
	}
	go p.relayHot(client, up, cut)
	return true
}

// relayHot runs a handed-back pair on the goroutine relay to its end.
func (p *loopPair) relayHot(client, up net.Conn, cut bool) {
	if cut {
		client.Close()
		up.Close()
		p.done(p.a.n, p.b.n, false)
		return
	}
	// What the loop read and the peer has not taken goes first, on
	// each direction's own goroutine (a blocking write of one would
	// wait on a peer that waits for the other).
	o, i, idled := pipeFrom(client, up, p.timeout,
		halfPipe{pre: p.b.pend, done: p.a.eof},
		halfPipe{pre: p.a.pend, done: p.b.eof})
	client.Close()
	up.Close()
	p.done(p.a.n+o, p.b.n+i, idled)
}

// fileConn makes a Go connection of a socket the loop holds, on a
// descriptor of its own (fd stays the loop's).
func fileConn(fd int) (net.Conn, error) {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("fcntl", err)
	}
	f := os.NewFile(uintptr(dup), "tunnel")
	defer f.Close() // net.FileConn keeps a duplicate of its own
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("tunnel socket back to Go: %w", err)
	}
	return c, nil
}
