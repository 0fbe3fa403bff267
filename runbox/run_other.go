//go:build !linux

package runbox

import (
	"context"
	"errors"

	"github.com/egressd/egressd/sandbox"
)

// Run is Linux-only: it needs network namespaces and nftables.
func Run(context.Context, Config) (int, error) {
	return 0, errors.New("egressd run: needs Linux (network namespaces, nftables)")
}

// Sweep is Linux-only.
func Sweep(_ *sandbox.NS, _, _ string, _ bool) (Swept, error) {
	return Swept{}, errors.New("needs Linux")
}

// Swept is what a sweep found.
type Swept struct{ Removed, Live []string }
