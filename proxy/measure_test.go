package proxy

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The figures of issue 11's note, measured on a separate proxy process
// (this test binary re-executed as TestMeasureProxyProcess) so that its
// RSS is the proxy's alone. Run by hand:
//
//	EGRESSD_MEASURE=1 go test -run TestMeasureCheckpoint -v -timeout 10m ./proxy
func TestMeasureCheckpoint(t *testing.T) {
	// Not parallel: a measurement: figures taken beside other tests would mislead.
	if os.Getenv("EGRESSD_MEASURE") == "" {
		t.Skip("set EGRESSD_MEASURE=1 to measure (minutes, thousands of descriptors)")
	}
	clients := envInt("EGRESSD_MEASURE_CLIENTS", 1000)
	silent := envInt("EGRESSD_MEASURE_SILENT", 2000)
	cmd := exec.Command(os.Args[0], "-test.run=^TestMeasureProxyProcess$")
	cmd.Env = append(os.Environ(), "EGRESSD_MEASURE_CHILD=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	br := bufio.NewReader(out)
	line, err := br.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	var proxyAddr, docs string
	fmt.Sscanf(line, "proxy %s docs %s", &proxyAddr, &docs)
	pid := cmd.Process.Pid
	t.Logf("proxy pid %d at %s; idle RSS %d KiB", pid, proxyAddr, rss(t, pid, "VmRSS"))

	// 1,000 clients, each a 1 MiB header inside an inspected tunnel, all
	// in flight at once.
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[string]int{}
	inFlight := make(chan struct{}, clients)
	release := make(chan struct{})
	for range clients {
		wg.Go(func() {
			code := bigHeadClient(proxyAddr, docs, inFlight, release)
			mu.Lock()
			codes[code]++
			mu.Unlock()
		})
	}
	for range clients {
		<-inFlight
	}
	during := rss(t, pid, "VmRSS")
	close(release)
	wg.Wait()
	t.Logf("%d clients × 1 MiB header in inspected tunnels: RSS %d KiB while all were sending, peak (VmHWM) %d KiB; answers %v",
		clients, during, rss(t, pid, "VmHWM"), codes)

	// 2,000 silent tunnels: how long each stays open.
	var lives []time.Duration
	start := time.Now()
	for i := range silent {
		wg.Go(func() {
			target := docs
			if i%2 == 1 {
				target = strings.Replace(docs, "docs.test", "allowed.test", 1)
			}
			d := silentClient(proxyAddr, target)
			mu.Lock()
			if d >= 0 {
				lives = append(lives, d)
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.Sort(lives)
	if len(lives) == 0 {
		t.Fatal("no silent tunnel opened")
	}
	t.Logf("%d silent tunnels opened of %d (half inspected, half spliced): open min %s median %s max %s; all closed %s after the first opened",
		len(lives), silent, lives[0].Round(time.Millisecond), lives[len(lives)/2].Round(time.Millisecond), lives[len(lives)-1].Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

func envInt(k string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(k)); err == nil {
		return n
	}
	return def
}

// rss reads a VmRSS or VmHWM figure (KiB) of pid.
func rss(t *testing.T, pid int, field string) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return n
		}
	}
	return -1
}

func bigHeadClient(proxyAddr, target string, inFlight chan<- struct{}, release <-chan struct{}) string {
	signal := sync.OnceFunc(func() { inFlight <- struct{}{} })
	defer signal()
	c, err := net.Dial("tcp", proxyAddr)
	if err != nil {
		return "dial: " + err.Error()
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Minute))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"}); err != nil || resp.StatusCode != 200 {
		if err != nil {
			return "connect: " + err.Error()
		}
		return "connect: " + resp.Status
	}
	host, _, _ := net.SplitHostPort(target)
	tc := tls.Client(c, &tls.Config{ServerName: host, InsecureSkipVerify: true})
	if err := tc.Handshake(); err != nil {
		return "handshake: " + err.Error()
	}
	fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: %s\r\nX-Big: ", target)
	chunk := strings.Repeat("a", 16<<10)
	sent := 0
	for ; sent < 16<<10; sent += len(chunk) { // the first 16 KiB: under the limit
		io.WriteString(tc, chunk)
	}
	signal()
	<-release
	go func() {
		for ; sent < 1<<20; sent += len(chunk) {
			if _, err := io.WriteString(tc, chunk); err != nil {
				return
			}
		}
		io.WriteString(tc, "\r\n\r\n")
	}()
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		return "read: " + err.Error()
	}
	return strconv.Itoa(resp.StatusCode) + " " + resp.Header.Get("X-Egressd-Deny")
}

func silentClient(proxyAddr, target string) time.Duration {
	c, err := net.Dial("tcp", proxyAddr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "silent dial:", err)
		return -1
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"}); err != nil || resp.StatusCode != 200 {
		fmt.Fprintln(os.Stderr, "silent connect:", resp, err)
		return -1
	}
	start := time.Now()
	c.SetReadDeadline(time.Now().Add(5 * time.Minute))
	br.ReadByte()
	return time.Since(start)
}

// TestMeasureProxyProcess is the proxy side of TestMeasureCheckpoint.
func TestMeasureProxyProcess(t *testing.T) {
	// Not parallel: the child side of TestMeasureCheckpoint, alone in its own process.
	if os.Getenv("EGRESSD_MEASURE_CHILD") == "" {
		t.Skip("the proxy process of TestMeasureCheckpoint")
	}
	cfg := strings.Replace(testConfig, "identities:\n", "limits:\n  conns_per_identity: 100000\n  header_bytes: 32768\nidentities:\n", 1)
	h := newHarness(t, cfg, testNames)
	fmt.Printf("proxy %s docs docs.test:%s\n", h.proxyURL.Host, h.tlsO.port())
	select {}
}
