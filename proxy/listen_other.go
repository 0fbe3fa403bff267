//go:build !linux

package proxy

import "net"

// listenConfig off Linux is net's default (keep-alive on accepted
// connections, no deferred accept): egressd serves on Linux, other systems
// build the CLI's offline tools.
func listenConfig() net.ListenConfig { return net.ListenConfig{} }
