package proxy

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// TestCloseStorm (red team): spliced tunnels, silent and
// streaming (hand-back from the loop to goroutines), while the drain's
// closeAll fires at random moments, so tracker closes land anywhere from
// openTunnel through splice's onCut, adopt, the loop, the hand-back and the
// goroutine relay. Every tunnel must end (OpenTunnels 0, gauge 0), and each
// must have exactly one decision line beside its open and close records.
// Run it with -race.
func TestCloseStorm(t *testing.T) {
	h := newHarness(t, testConfig, testNames)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var ups sync.WaitGroup
	var upMu sync.Mutex
	var upConns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			upMu.Lock()
			upConns = append(upConns, c)
			upMu.Unlock()
			ups.Go(func() {
				b := make([]byte, 1)
				if _, err := io.ReadFull(c, b); err != nil {
					return
				}
				if b[0] == 'E' {
					io.Copy(c, c) // echo until the proxy closes
					c.Close()
					return
				}
				io.Copy(io.Discard, c) // silent: reads, never speaks, never closes
			})
		}
	}()
	t.Cleanup(func() {
		upMu.Lock()
		for _, c := range upConns {
			c.Close()
		}
		upMu.Unlock()
	})
	_, port := splitPort(l.Addr().String())

	stop := make(chan struct{})
	var closer sync.WaitGroup
	closer.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(rand.IntN(3000)) * time.Microsecond):
				// The drain's close, without its end: tunnels
				// keep opening after it, so closes land in every state.
				h.px.ids.closeAll()
				h.px.ids.mu.Lock()
				h.px.ids.closed = false
				h.px.ids.mu.Unlock()
			}
		}
	})
	const n = 300
	var clients sync.WaitGroup
	for i := range n {
		clients.Go(func() {
			c, err := net.Dial("tcp", h.proxyURL.Host)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			mode := "S"
			if i%2 == 0 {
				mode = "E"
			}
			fmt.Fprintf(c, "CONNECT ssh.test:%s HTTP/1.1\r\nHost: ssh.test\r\nProxy-Authorization: Basic %s\r\n\r\n%s", port, basic("agent-a"), mode)
			if mode == "E" {
				go c.Write(make([]byte, 256<<10)) // streams: the loop hands it back
			}
			c.SetReadDeadline(time.Now().Add(15 * time.Second))
			io.Copy(io.Discard, c)
		})
		time.Sleep(time.Duration(rand.IntN(1000)) * time.Microsecond)
	}
	time.Sleep(50 * time.Millisecond)
	close(stop)
	closer.Wait()
	h.px.ids.closeAll() // what opened after the last one
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.px.waitTunnels(ctx); err != nil {
		t.Fatalf("%d tunnel(s) never wrote their close record after the drain closed them", h.px.OpenTunnels())
	}
	clients.Wait()
	var m dto.Metric
	h.px.m.tunnels.Write(&m)
	if g := m.GetGauge().GetValue(); g != 0 {
		t.Errorf("egressd_open_tunnels = %v after every tunnel closed, want 0", g)
	}
	var open, closed, decided int
	for _, ln := range strings.Split(h.logs.String(), "\n") {
		if !strings.Contains(ln, `"host":"ssh.test"`) {
			continue
		}
		switch {
		case strings.Contains(ln, `"tunnel":"open"`):
			open++
		case strings.Contains(ln, `"tunnel":"close"`):
			closed++
		default:
			decided++
		}
	}
	t.Logf("%d tunnels: %d open records, %d close records, %d decision lines", n, open, closed, decided)
	if open != closed || decided != open {
		t.Errorf("%d open records, %d close records, %d decision lines: want one of each per tunnel", open, closed, decided)
	}
}
