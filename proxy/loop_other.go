//go:build !linux

package proxy

import (
	"log/slog"
	"net"
	"time"
)

// tunnelLoops relay quiet tunnels on Linux (loop_linux.go); elsewhere
// every tunnel is relayed by goroutines.
type tunnelLoops []struct{}

func processLoops(*slog.Logger) tunnelLoops { return nil }

// loopPair is never made off Linux.
type loopPair struct{}

func (tunnelLoops) pair(time.Duration, func(out, in int64, idled bool), func()) *loopPair {
	return nil
}

func (*loopPair) adopt(net.Conn, net.Conn) bool { return false }

func (*loopPair) cut() {}
