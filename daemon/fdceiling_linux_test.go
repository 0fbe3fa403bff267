package daemon

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestAdminAtFDCeiling: at the process's real descriptor ceiling (a low
// RLIMIT_NOFILE, in a child process so the rest of the suite keeps its
// own), proxy clients are shed with 503 fd-limit while the admin endpoint
// still answers /metrics, which counts them (issue 17.4: the admin
// endpoint went dark exactly when an operator needed it).
func TestAdminAtFDCeiling(t *testing.T) {
	if os.Getenv("EGRESSD_FDCEILING_CHILD") == "1" {
		fdCeilingChild(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestAdminAtFDCeiling$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "EGRESSD_FDCEILING_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS: TestAdminAtFDCeiling")) {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if i := bytes.Index(out, []byte("clients held")); i >= 0 {
		line, _, _ := bytes.Cut(out[max(0, bytes.LastIndexByte(out[:i], '\n')+1):], []byte("\n"))
		t.Log(strings.TrimSpace(string(line)))
	}
}

func fdCeilingChild(t *testing.T) {
	f := start(t)
	var open int
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		open = len(ents)
	}
	// room for about 60 more descriptors above the proxy's reserve of 128
	lim := syscall.Rlimit{Cur: uint64(open + 128 + 60), Max: uint64(open + 128 + 60)}
	var old syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	defer syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old)
	proxyAddr, _, admin := f.d.Addrs()
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	shed := 0
	for i := 0; i < 200 && shed < 5; i++ {
		c, err := net.Dial("tcp", proxyAddr)
		if err != nil {
			t.Fatalf("dial %d: %v (the proxy should shed before the ceiling)", i, err)
		}
		// a request that stays open upstream-free: headers not finished
		io.WriteString(c, "GET "+f.a+"/ HTTP/1.1\r\nHost: x\r\n")
		c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		b := make([]byte, 512)
		n, _ := c.Read(b)
		if strings.Contains(string(b[:n]), "fd-limit") {
			shed++
			c.Close()
			continue
		}
		held = append(held, c)
	}
	if shed == 0 {
		t.Fatalf("no client shed with %d held", len(held))
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}).Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatalf("/metrics at the ceiling (%d clients held): %v", len(held), err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "egressd_connections_shed_total ") {
		t.Errorf("/metrics lacks the shed count")
	}
	t.Logf("%d clients held, %d shed, /metrics %d", len(held), shed, resp.StatusCode)
}
