//go:build linux

package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// A network namespace does not scope unix sockets bound to a path: a
// sandbox that shares the host's files could connect to any host daemon's
// socket its user may open (the Docker socket, a tmux or screen server,
// the user's systemd, systemd-resolved, nscd) and have that daemon, in the
// host's network namespace, reach the network for it. maskHostSockets
// hides them in the sandbox's private mount namespace.

// unixSocketPaths returns the paths of the path-bound unix sockets listed
// in r (the format of /proc/net/unix: a header line, then "Num RefCount
// Protocol Flags Type St Inode [Path]"). Abstract sockets ("@...") are
// left out: they belong to a network namespace, which the sandbox does not
// share. Each path appears once.
func unixSocketPaths(r io.Reader) ([]string, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	seen := map[string]bool{}
	var paths []string
	first := true
	for sc.Scan() {
		if first {
			first = false
			continue
		}
		line := sc.Text()
		// the path is what follows the seventh field
		rest := line
		for range 7 {
			rest = strings.TrimLeft(rest, " ")
			i := strings.IndexByte(rest, ' ')
			if i < 0 {
				rest = ""
				break
			}
			rest = rest[i:]
		}
		p := strings.TrimLeft(rest, " ")
		if !strings.HasPrefix(p, "/") || seen[p] {
			continue // no path, an abstract name, or a path relative to its binder's directory
		}
		seen[p] = true
		paths = append(paths, p)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read unix socket list: %w", err)
	}
	return paths, nil
}

// maskHostSockets bind-mounts /dev/null over every path-bound unix socket
// of this network namespace (the host's, before the sandbox's is entered)
// that exists as a socket in this mount namespace, which must be the
// sandbox's private one: connect(2) to it is then refused. It returns how
// many it masked. A socket it cannot mask is an error: the command must
// not start with a way out.
func maskHostSockets() (int, error) {
	f, err := os.Open("/proc/self/net/unix")
	if err != nil {
		return 0, fmt.Errorf("list host unix sockets: %w", err)
	}
	paths, err := unixSocketPaths(f)
	f.Close()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, p := range paths {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
				continue // bound in another mount namespace or root, or gone
			}
			return n, fmt.Errorf("mask host unix socket %s: %w", p, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
			continue
		}
		if err := unix.Mount("/dev/null", p, "", unix.MS_BIND, ""); err != nil {
			return n, fmt.Errorf("mask host unix socket %s: %w", p, err)
		}
		n++
	}
	return n, nil
}
