//go:build linux

package proxy

import (
	"fmt"
	"net"
	"syscall"
)

// listenConfig sets keep-alive and TCP_DEFER_ACCEPT on the listening
// socket (see Listen).
func listenConfig() net.ListenConfig {
	return net.ListenConfig{
		KeepAlive: -1, // set on the listening socket below, inherited
		Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) {
				for _, o := range []struct{ level, opt, v int }{
					{syscall.SOL_SOCKET, syscall.SO_KEEPALIVE, 1},
					{syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE, keepAliveIdle},
					{syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL, keepAliveInterval},
					{syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT, keepAliveCount},
					{syscall.IPPROTO_TCP, syscall.TCP_DEFER_ACCEPT, deferAcceptSeconds},
				} {
					if serr = syscall.SetsockoptInt(int(fd), o.level, o.opt, o.v); serr != nil {
						serr = fmt.Errorf("setsockopt %d/%d: %w", o.level, o.opt, serr)
						return
					}
				}
			})
			if err != nil {
				return err
			}
			return serr
		},
	}
}
