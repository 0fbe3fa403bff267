package dnsfilter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"

	"github.com/miekg/dns"
)

// listener is one running dns.Server (UDP or TCP).
type listener struct {
	srv      *dns.Server
	ready    chan struct{} // closed once srv serves, or has returned
	done     chan struct{} // closed once srv has returned
	readyOne sync.Once
	stopOne  sync.Once
	stopErr  error
}

func newListener(srv *dns.Server) *listener {
	return &listener{srv: srv, ready: make(chan struct{}), done: make(chan struct{})}
}

func (l *listener) markReady() { l.readyOne.Do(func() { close(l.ready) }) }

// stop shuts l down once; later calls return the first call's result.
// dns.Server.Shutdown must not race its start (it would report "not
// started" and leave it running), hence the wait for ready.
func (l *listener) stop(ctx context.Context) error {
	select {
	case <-l.ready:
	case <-ctx.Done():
		return ctx.Err()
	}
	l.stopOne.Do(func() {
		l.stopErr = l.srv.ShutdownContext(ctx)
		select {
		case <-l.done: // it had already returned (failed to start): nothing to stop
			l.stopErr = nil
		default:
		}
	})
	return l.stopErr
}

// Serve answers queries on already-bound sockets (so the caller can bind
// them in whichever network namespace it likes) until Shutdown. Either
// socket may be nil, not both; Serve closes them. It returns
// ErrServerClosed after Shutdown, or the first error that stopped a socket,
// having stopped the other.
func (s *Server) Serve(pc net.PacketConn, l net.Listener) error {
	var ls []*listener
	if pc != nil {
		// UDPSize: read buffer for queries; one with a large OPT still fits.
		ls = append(ls, newListener(&dns.Server{PacketConn: pc, UDPSize: ednsSize}))
	}
	if l != nil {
		ls = append(ls, newListener(&dns.Server{Listener: l}))
	}
	if len(ls) == 0 {
		return errors.New("dnsfilter: serve: no socket")
	}
	for _, x := range ls {
		x.srv.Handler = s
		x.srv.NotifyStartedFunc = x.markReady
		// Messages that miekg/dns rejects itself never reach ServeDNS;
		// count them here (unlogged: they carry no name to log).
		x.srv.MsgAcceptFunc = s.accept
		x.srv.MsgInvalidFunc = func([]byte, error) { s.queries.WithLabelValues(resultFormErr).Inc() }
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		for _, x := range ls {
			closeSocket(x.srv)
		}
		return ErrServerClosed
	}
	s.listeners = append(s.listeners, ls...)
	s.mu.Unlock()

	errc := make(chan error, len(ls))
	for _, x := range ls {
		go func() {
			err := x.srv.ActivateAndServe()
			close(x.done)
			x.markReady()
			errc <- err
		}()
	}
	var first error
	for range ls {
		if err := <-errc; err != nil && first == nil {
			first = fmt.Errorf("dnsfilter: serve: %w", err)
			for _, x := range ls {
				go func() { _ = x.stop(context.Background()) }() // the error that matters is first
			}
		}
	}
	s.mu.Lock()
	closed := s.closed
	s.listeners = slices.DeleteFunc(s.listeners, func(x *listener) bool { return slices.Contains(ls, x) })
	s.mu.Unlock()
	if first == nil && closed {
		return ErrServerClosed
	}
	return first
}

// accept is dns.DefaultMsgAcceptFunc (responses ignored; opcodes other
// than QUERY and NOTIFY, question counts other than one and stuffed
// sections rejected before parsing), counted.
func (s *Server) accept(dh dns.Header) dns.MsgAcceptAction {
	a := dns.DefaultMsgAcceptFunc(dh)
	switch a {
	case dns.MsgIgnore:
		s.queries.WithLabelValues(resultIgnored).Inc()
	case dns.MsgReject:
		s.queries.WithLabelValues(resultFormErr).Inc()
	case dns.MsgRejectNotImplemented:
		s.queries.WithLabelValues(resultNotImp).Inc()
	}
	return a
}

func closeSocket(srv *dns.Server) {
	if srv.PacketConn != nil {
		srv.PacketConn.Close()
	}
	if srv.Listener != nil {
		srv.Listener.Close()
	}
}

// ListenAndServe binds udpAddr and tcpAddr ("host:port"; either may be
// empty to skip it) in the caller's network namespace and serves on them
// like Serve.
func (s *Server) ListenAndServe(udpAddr, tcpAddr string) error {
	var (
		pc  net.PacketConn
		l   net.Listener
		err error
	)
	if udpAddr != "" {
		if pc, err = net.ListenPacket("udp", udpAddr); err != nil {
			return fmt.Errorf("dnsfilter: listen udp %s: %w", udpAddr, err)
		}
	}
	if tcpAddr != "" {
		if l, err = net.Listen("tcp", tcpAddr); err != nil {
			if pc != nil {
				pc.Close()
			}
			return fmt.Errorf("dnsfilter: listen tcp %s: %w", tcpAddr, err)
		}
	}
	return s.Serve(pc, l)
}

// Shutdown stops every Serve call, waiting for queries in flight until ctx
// ends. Serve returns ErrServerClosed afterwards.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	ls := s.listeners
	s.listeners = nil
	s.mu.Unlock()
	var errs []error
	for _, x := range ls {
		if err := x.stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("dnsfilter: shutdown: %w", err)
	}
	return nil
}
