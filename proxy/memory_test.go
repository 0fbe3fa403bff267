package proxy

import (
	"net"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/testutil"
)

// TestMemoryReleaser: a release is scheduled once the open tunnels fell
// by at least the drop and to half their peak or less, once per wave;
// running it frees memory and starts a new peak.
func TestMemoryReleaser(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		open, close int
		scheduled   bool
	}{
		{"a wave closed", 10, 10, true},
		{"half closed", 10, 5, true},
		{"fewer than the drop", 10, 3, false},
		{"not down to half", 20, 9, false},
		{"nothing opened", 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var scheduled []func()
			frees := 0
			m := &memoryReleaser{
				drop:  4,
				after: func(d time.Duration, f func()) { scheduled = append(scheduled, f) },
				free:  func() { frees++ },
			}
			for range tt.open {
				m.opened()
			}
			for range tt.close {
				m.closed()
			}
			if got := len(scheduled) > 0; got != tt.scheduled {
				t.Fatalf("release scheduled: %v, want %v", got, tt.scheduled)
			}
			if len(scheduled) > 1 {
				t.Fatalf("%d releases scheduled for one wave, want 1", len(scheduled))
			}
			if !tt.scheduled {
				return
			}
			scheduled[0]()
			if frees != 1 || m.peak.Load() != m.open.Load() || m.armed.Load() {
				t.Fatalf("after the release: %d frees, peak %d, open %d, armed %v", frees, m.peak.Load(), m.open.Load(), m.armed.Load())
			}
			// the next release is measured from the new peak: fewer than
			// the drop closing after it schedule none
			for range min(tt.open-tt.close, int(m.drop)-1) {
				m.closed()
			}
			if len(scheduled) != 1 {
				t.Fatalf("a release scheduled without a drop from the new peak")
			}
		})
	}
}

// TestTunnelCloseReleasesMemory: closeTunnel, the one place tunnels end,
// feeds the releaser: a closed wave of tunnels schedules a release.
func TestTunnelCloseReleasesMemory(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	var scheduled int
	h.px.mem.drop = 3
	h.px.mem.after = func(time.Duration, func()) { scheduled++ }
	var tns []*tunnel
	for range 4 {
		c, s := net.Pipe()
		defer s.Close()
		tn := &tunnel{rq: &request{identity: "agent"}, client: c, raw: c}
		h.px.openTunnel(tn)
		tns = append(tns, tn)
	}
	if len(h.px.ids.openTunnels()) != 4 {
		t.Fatalf("%d tunnels tracked, want 4", len(h.px.ids.openTunnels()))
	}
	for _, tn := range tns {
		h.px.closeTunnel(tn)
		h.px.closeTunnel(tn) // once only
	}
	if n := len(h.px.ids.openTunnels()); n != 0 || scheduled != 1 || h.px.mem.open.Load() != 0 {
		t.Fatalf("after closing: %d tracked, %d releases scheduled, %d counted open; want 0, 1, 0", n, scheduled, h.px.mem.open.Load())
	}
}

// TestTunnelKeepsNoResponseWriter: an open tunnel keeps nothing of
// net/http's. Its request once kept the CONNECT's ResponseWriter, and with
// it the connection's 4 KiB read and write buffers, for the tunnel's whole
// life: about half of an idle tunnel's heap.
func TestTunnelKeepsNoResponseWriter(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig, testNames)
	_, port := splitPort(testutil.EchoServer(t))
	c := h.connect(t, "ssh.test:"+port)
	defer c.Close()
	open := h.px.ids.openTunnels()
	if len(open) != 1 {
		t.Fatalf("%d tunnels tracked, want 1", len(open))
	}
	for _, rq := range open {
		if rq.w != nil {
			t.Errorf("the open tunnel's request keeps the CONNECT's ResponseWriter (%T)", rq.w)
		}
	}
}
