package main

import (
	"net"
	"net/http"
	"os"
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
	c := &http.Client{Transport: &http.Transport{Dial: func(string, string) (net.Conn, error) { return net.Dial("unix", sock) }}}
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
