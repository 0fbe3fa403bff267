//go:build linux

package sandbox

import (
	"strings"
	"testing"
)

func TestUnixSocketPaths(t *testing.T) {
	t.Parallel()
	const list = `Num       RefCount Protocol Flags    Type St Inode Path
000000000011bdb5: 00000003 00000000 00000000 0001 03  1609
0000000000000000: 00000002 00000000 00010000 0001 01 23456 /run/docker.sock
0000000000000000: 00000002 00000000 00010000 0001 01 23457 /tmp/tmux-1000/default
0000000000000000: 00000002 00000000 00000000 0002 01 23458 /run/systemd/journal/dev-log
0000000000000000: 00000002 00000000 00010000 0001 01 23459 @/tmp/.X11-unix/X0
0000000000000000: 00000002 00000000 00010000 0001 01 23460 relative.sock
0000000000000000: 00000003 00000000 00000000 0001 03 23461 /run/docker.sock
0000000000000000: 00000002 00000000 00010000 0001 01 23462 /tmp/with space.sock
`
	got, err := unixSocketPaths(strings.NewReader(list))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/run/docker.sock", "/tmp/tmux-1000/default", "/run/systemd/journal/dev-log", "/tmp/with space.sock"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("got %q, want %q", got, want)
	}
}

func FuzzUnixSocketPaths(f *testing.F) {
	f.Add("Num RefCount Protocol Flags Type St Inode Path\n0: 00000002 0 10000 0001 01 1 /run/a.sock\n")
	f.Add("h\n0: 1 2 3 4 5 6\n")
	f.Fuzz(func(t *testing.T, s string) {
		paths, err := unixSocketPaths(strings.NewReader(s))
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, p := range paths {
			if !strings.HasPrefix(p, "/") || seen[p] {
				t.Fatalf("path %q: not absolute, or twice", p)
			}
			seen[p] = true
		}
	})
}
