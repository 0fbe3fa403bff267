//go:build !linux

package runbox

import (
	"errors"

	"github.com/egressd/egressd/sandbox"
)

// Sweep is Linux-only.
func Sweep(_ *sandbox.NS, _, _ string, _ bool) (Swept, error) {
	return Swept{}, errors.New("needs Linux")
}

// Swept is what a sweep found.
type Swept struct{ Removed, Live []string }
