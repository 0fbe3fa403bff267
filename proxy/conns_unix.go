//go:build unix

package proxy

import "syscall"

// defaultMaxConns derives the connection cap from the descriptor limit:
// two descriptors per connection (client and upstream) after the reserve.
func defaultMaxConns() int64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == 0 {
		return 1024
	}
	n := (int64(rl.Cur) - fdReserve) / 2
	if rl.Cur > 1<<30 {
		n = 1 << 29
	}
	return max(n, 16)
}
