package proxy

import (
	"os"
	"syscall"
)

// fdLimit is the soft RLIMIT_NOFILE.
func fdLimit() int {
	var r syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r) != nil || r.Cur > 1<<30 {
		return 0
	}
	return int(r.Cur)
}

// fdCount counts the entries of /proc/self/fd without making strings.
func fdCount() int {
	f, err := os.Open("/proc/self/fd")
	if err != nil {
		return -1
	}
	defer f.Close()
	buf := make([]byte, 32<<10)
	n := 0
	for {
		k, err := syscall.ReadDirent(int(f.Fd()), buf)
		if err != nil {
			return -1
		}
		if k <= 0 {
			return n - 2 // "." and ".."
		}
		for b := buf[:k]; len(b) > 0; {
			reclen := int(b[16]) | int(b[17])<<8 // linux_dirent64.d_reclen
			if reclen == 0 {
				break
			}
			n++
			b = b[reclen:]
		}
	}
}
