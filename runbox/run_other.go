//go:build !linux

package runbox

import (
	"context"
	"errors"
)

// Run is Linux-only: it needs network namespaces and nftables.
func Run(context.Context, Config) (int, error) {
	return 0, errors.New("egressd run: needs Linux (network namespaces, nftables)")
}
