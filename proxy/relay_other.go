//go:build !linux

package proxy

import (
	"errors"
	"io"
	"syscall"
)

// rawConn is nil off Linux: relay copies through a pooled buffer there
// (egressd serves on Linux; other systems build the CLI's offline tools).
func rawConn(any) syscall.RawConn { return nil }

// relayRaw is never reached off Linux (rawConn is nil).
func relayRaw(dst io.Writer, _, _ syscall.RawConn, _ *idleWatch) (int64, error) {
	return 0, errors.New("proxy: raw relay is Linux-only")
}
