// Package runbox is `egressd run`: one command in a fresh sandbox
// namespace whose only way out is a gateway built for it alone — a veth, a
// wall table for that link, and the proxy and the DNS filter on the link's
// gateway address, assembled by [daemon.NewGateway] exactly as `egressd
// serve` assembles its own, so every config key means the same in both.
// cmd/egressd parses the flags and calls [Run].
package runbox
