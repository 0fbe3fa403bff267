//go:build !unix

package proxy

// defaultMaxConns is a fixed cap where the descriptor limit cannot be read.
func defaultMaxConns() int64 { return 1024 }
