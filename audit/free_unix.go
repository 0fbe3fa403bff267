//go:build unix

package audit

import (
	"os"

	"golang.org/x/sys/unix"
)

// freeBytes is the space left to unprivileged writers on f's file system.
func freeBytes(f *os.File) (int64, bool) {
	var st unix.Statfs_t
	if unix.Fstatfs(int(f.Fd()), &st) != nil {
		return 0, false
	}
	return int64(st.Bavail) * int64(st.Bsize), true
}
