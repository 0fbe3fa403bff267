package proxy

import (
	"testing"
	"time"
)

// TestFDGuardReadsTheLimitPerSample: the descriptor ceiling is read with
// the descriptor count, once a sample period, not on every accepted client
// (a getrlimit system call per new tunnel before).
func TestFDGuardReadsTheLimitPerSample(t *testing.T) {
	limits, counts := 0, 0
	g := &fdGuard{
		limit:   func() int { limits++; return 1000 },
		count:   func() int { counts++; return 10 },
		reserve: 100,
	}
	t0 := time.Unix(1000, 0)
	for i := range 50 {
		if !g.admit(t0.Add(time.Duration(i) * time.Millisecond)) {
			t.Fatalf("client %d refused far below the ceiling", i)
		}
	}
	if limits != 1 || counts != 1 {
		t.Errorf("50 clients in one sample period read the limit %d times and the count %d times, want 1 and 1", limits, counts)
	}
	if !g.admit(t0.Add(fdSampleEvery + 50*time.Millisecond)) {
		t.Fatal("client after the next sample refused")
	}
	if limits != 2 || counts != 2 {
		t.Errorf("after the next sample: limit read %d times, count %d times, want 2 and 2", limits, counts)
	}
}
