//go:build linux

package selftest

import (
	"bufio"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/testnet"
	"github.com/egressd/egressd/sandbox"
	"golang.org/x/sys/unix"
)

// TestHostSocketProbe: the in-sandbox probe's host-socket check reports a
// daemon in another network namespace answering on a path (the Docker
// socket mounted into an agent's container: a way out the walls never
// see) as a leak, and passes no socket and the sandbox's own daemon.
func TestHostSocketProbe(t *testing.T) {
	t.Parallel()
	if path := os.Getenv("EGRESSD_HOSTSOCK_CHILD"); path != "" {
		l, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		os.Stdout.WriteString("ready\n")
		io.Copy(io.Discard, os.Stdin) // until the parent is done
		return
	}
	dir := t.TempDir()
	r := &runner{c: Config{Timeout: time.Second}}
	check := func(path string, want Status, wantResult string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		o := r.hostSocket(ctx, path)
		if o.status != want || !strings.Contains(o.result, wantResult) {
			t.Errorf("%s: %s %q (%s), want %s %q", path, o.status, o.result, o.detail, want, wantResult)
		}
	}
	check(filepath.Join(dir, "none.sock"), Pass, "no socket")

	own := filepath.Join(dir, "own.sock")
	l, err := net.Listen("unix", own)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	check(own, Pass, "same network namespace")

	testnet.RequireRoot(t)
	host := filepath.Join(dir, "host.sock")
	cmd := exec.Command("unshare", "--net", "--", os.Args[0], "-test.run=^TestHostSocketProbe$", "-test.count=1")
	cmd.Env = append(os.Environ(), "EGRESSD_HOSTSOCK_CHILD="+host)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatalf("a daemon in another network namespace: %v", err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if line != "ready\n" {
		t.Fatalf("the daemon in another network namespace did not start: %q", line)
	}
	check(host, Leak, "network namespace")
}

// TestVsockProbe: the in-sandbox probe reports an AF_VSOCK socket opened
// on a virtual machine's guest as a leak (this CI machine is one: the
// unfiltered case), and passes under egressd run's seccomp filter.
// Nothing is sent.
func TestVsockProbe(t *testing.T) {
	t.Parallel()
	if os.Getenv("EGRESSD_VSOCK_CHILD") == "1" {
		unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
		if err := sandbox.DenyNonIP(); err != nil {
			os.Stdout.WriteString("filter: " + err.Error() + "\n")
		}
		o := (&runner{}).vsock(context.Background())
		os.Stdout.WriteString("status=" + string(o.status) + "\n")
		return
	}
	o := (&runner{}).vsock(context.Background())
	transport := false
	for _, m := range vsockTransports {
		if _, err := os.Stat("/sys/module/" + m); err == nil {
			transport = true
		}
	}
	if want := map[bool]Status{true: Leak, false: Pass}[transport && openVsock() == nil]; o.status != want {
		t.Errorf("unfiltered (guest transport %v): %s %q, want %s", transport, o.status, o.result, want)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestVsockProbe$", "-test.count=1")
	cmd.Env = append(os.Environ(), "EGRESSD_VSOCK_CHILD=1")
	out, _ := cmd.CombinedOutput()
	if !strings.Contains(string(out), "status="+string(Pass)+"\n") {
		t.Errorf("under egressd run's seccomp filter: want a pass\n%s", out)
	}
}
