package main

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// TestRunHostSocketsMasked: a network namespace does not scope unix
// sockets bound to a path, and `egressd run` shares the host's files, so
// CMD could connect to any host daemon's socket its user may open: the
// Docker socket (a user in the docker group starts a container on the
// host's network), a tmux or screen server (a new window runs outside the
// sandbox), the user's systemd, systemd-resolved or nscd (names resolved on
// the host: DNS out). Every such daemon lives in the namespace egressd run
// is started in (its own, here the topology's gateway): each path socket
// bound there when the run starts is masked in the sandbox's mount
// namespace (connect is refused), while the command still reaches the
// allowed origin through the proxy.
func TestRunHostSocketsMasked(t *testing.T) {
	t.Parallel()
	l := newRunLab(t, runConfig)
	dir := filepath.Join(l.dir, "daemon")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "daemon.sock")
	var ln net.Listener
	if err := l.topo.DoInGateway(func() error {
		var err error
		ln, err = net.Listen("unix", sock)
		return err
	}); err != nil {
		t.Fatalf("a host daemon's socket in the gateway namespace: %v", err)
	}
	defer ln.Close()
	os.Chmod(sock, 0o666) // as the Docker socket is to its group, resolved's to all
	var hits atomic.Int32
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.Write([]byte("outside the sandbox\n"))
	}))
	// Baseline: the socket answers a client outside the sandbox.
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := c.Get("http://daemon/")
	if err != nil {
		t.Fatalf("baseline: the daemon's socket does not answer: %v", err)
	}
	resp.Body.Close()
	hits.Store(0)

	out, code := l.run(t, nil, "sh", "-c", "curl -sS -m 5 --unix-socket "+sock+" http://daemon/; echo unix=$?; curl -sS -m 10 -o /dev/null http://allowed.test/; echo proxy=$?")
	if hits.Load() != 0 || strings.Contains(out, "outside the sandbox") || !strings.Contains(out, "unix=7") {
		t.Errorf("the command inside egressd run reached a host daemon's unix socket %s (%d requests served; curl exit 7 expected: refused)\n%s", sock, hits.Load(), out)
	}
	if !strings.Contains(out, "proxy=0") || code != 0 {
		t.Errorf("the command no longer reaches the allowed origin through the proxy (exit %d)\n%s", code, out)
	}
	l.assertNothingLeft(t)
}

// TestRunNoVsock: the walls judge IP packets, and AF_VSOCK is neither IP
// nor scoped by a network namespace: inside a virtual machine (this CI
// machine is one) the command could open a vsock socket to the
// hypervisor's host (CID 2) from the sandbox, around every wall. Under
// `egressd run` the command's socket(AF_VSOCK) fails with EAFNOSUPPORT, as
// on a machine without vsock, and io_uring (whose IORING_OP_SOCKET makes
// sockets no socket(2) filter sees) is ENOSYS; the command runs under
// that seccomp filter. Only socket creation is tried: nothing is sent.
func TestRunNoVsock(t *testing.T) {
	t.Parallel()
	const python = "/usr/bin/python3" // the system's: a user's (pyenv) is out of the sandbox user's reach
	if _, err := exec.LookPath(python); err != nil {
		t.Fatalf("%s is needed", python)
	}
	l := newRunLab(t, runConfig)
	const script = `
import socket, errno
try:
    socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM).close(); print("vsock=open")
except OSError as e:
    print("vsock=" + errno.errorcode.get(e.errno, str(e.errno)))
print([l.strip() for l in open("/proc/self/status") if l.startswith("Seccomp:")][0])
`
	out, code := l.run(t, nil, python, "-c", script)
	if code != 0 || !strings.Contains(out, "vsock=EAFNOSUPPORT") || !strings.Contains(out, "Seccomp:\t2") {
		t.Errorf("inside egressd run: exit %d, want vsock=EAFNOSUPPORT under a seccomp filter (Seccomp: 2)\n%s", code, out)
	}
	l.assertNothingLeft(t)
}
