//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// hideFlags takes the leading --hide=PATH flags off args.
func hideFlags(args []string) (hide, rest []string) {
	for len(args) > 0 {
		p, ok := strings.CutPrefix(args[0], "--hide=")
		if !ok {
			break
		}
		hide, args = append(hide, p), args[1:]
	}
	return hide, args
}

// hidePaths hides each path in the current (private) mount namespace: an
// empty read-only tmpfs over a directory, /dev/null read-only over a
// regular file. A symlink's target is what gets hidden (mount follows it);
// a path that does not exist, or is a device or pipe, is skipped; a
// relative path is refused.
func hidePaths(paths []string) error {
	for _, p := range paths {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("hide %q: not an absolute path", p)
		}
		fi, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("hide %s: %w", p, err)
		}
		switch {
		case !fi.IsDir() && !fi.Mode().IsRegular():
			continue // a device or pipe (--log /dev/stderr): nothing of egressd's to hide
		case fi.IsDir():
			err = unix.Mount("tmpfs", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,mode=0555")
		default:
			if err = unix.Mount("/dev/null", p, "", unix.MS_BIND, ""); err == nil {
				err = unix.Mount("", p, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, "")
			}
		}
		if err != nil {
			return fmt.Errorf("hide %s: %w", p, err)
		}
	}
	return nil
}
