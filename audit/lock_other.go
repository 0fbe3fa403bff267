//go:build !unix

package audit

import "os"

// lockFile is a no-op where flock does not exist: one writer per file is then
// the operator's duty.
func lockFile(*os.File) error { return nil }
