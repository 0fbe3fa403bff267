package daemon

import (
	"sync"
	"testing"
)

// leftTrialWalls are fakeWalls whose first Apply finds a reload's trial
// left beside the walls in force (egressd stopped during a reload) and
// removes it, as nft.Ensure does.
type leftTrialWalls struct {
	fakeWalls
	once sync.Once
	left []string
}

func (w *leftTrialWalls) LeftTrial() []string {
	var left []string
	w.once.Do(func() { left = w.left })
	return left
}

// TestStartCountsALeftTrial: a trial left by a crash during a reload is
// removed when egressd starts (Apply settles it), and that is drift: the
// start counts it in egressd_walls_drift_total (and logs it), as the drift
// check would, instead of removing it without a trace.
func TestStartCountsALeftTrial(t *testing.T) {
	walls := &leftTrialWalls{left: []string{"table inet egressd_try: a trial left beside the walls in force"}}
	f := startWith(t, func(o *Options) { o.Walls = walls })
	if n := counter(t, f, "egressd_walls_drift_total"); n != 1 {
		t.Fatalf("egressd_walls_drift_total after a start that removed a left trial: %d, want 1", n)
	}
}
