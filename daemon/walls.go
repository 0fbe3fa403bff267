package daemon

import (
	"context"
	"errors"
	"net/netip"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/egressd/egressd/nft"
	"github.com/egressd/egressd/policy"
)

// Walls are the kernel walls the daemon keeps in step with its policy.
type Walls interface {
	// Apply puts p's walls in force for every sandbox and ends any trial
	// (one transaction). Called at start, by a reload without a
	// self-test, and by the swap of a reload whose tried walls sealed.
	Apply(ctx context.Context, p *policy.Policy) error
	// Check reads the walls back and repairs drift (tampering, or a trial
	// left behind), every WallsInterval; never during a reload.
	Check(ctx context.Context, p *policy.Policy) (drift []string, err error)
	// Same reports whether a and b need the same walls: then a reload
	// needs no trial.
	Same(a, b *policy.Policy) bool
	// Try puts cand's walls on the self-test's probe link iface alone; the
	// walls in force stay for every sandbox. EndTry takes them off and
	// leaves the walls in force as they were.
	Try(ctx context.Context, cand *policy.Policy, iface string) error
	EndTry(ctx context.Context) error
}

// nftWalls are a gateway's walls: the table spec renders for a policy, in
// namespace ns.
type nftWalls struct {
	spec func(*policy.Policy) (nft.Spec, error)
	ns   int
	// inForce is the table in force (Apply, Check) and trial the one on
	// the probe link (Try): the DNS filter's answers for allowed names go
	// into the redirect sets of those that redirect (transparent mode).
	inForce, trial atomic.Pointer[nft.Spec]
	// left is the trial the last Apply found left beside the walls and
	// removed (LeftTrial hands it over once).
	left atomic.Pointer[[]string]
}

// LeftTrial hands over, once, the trial the last Apply found left beside
// the walls in force and removed: drift the start reports
// (Daemon.Run), since the drift check will not see it.
func (w *nftWalls) LeftTrial() []string {
	if l := w.left.Swap(nil); l != nil {
		return *l
	}
	return nil
}

func (w *nftWalls) Apply(_ context.Context, p *policy.Policy) error {
	s, err := w.spec(p)
	if err != nil {
		return err
	}
	// Ensure: a table that already holds s (a restart) is kept as it is,
	// counters and the redirect set too; any other, or a trial beside it,
	// is replaced by Settle in one transaction
	left := nft.LeftTrial(w.ns, s.TableName())
	if _, err := nft.Ensure(w.ns, s); err != nil {
		return err // the walls and any trial stand as they were
	}
	if len(left) > 0 {
		w.left.Store(&left)
	}
	w.trial.Store(nil)
	w.inForce.Store(&s)
	return nil
}

func (w *nftWalls) Check(_ context.Context, p *policy.Policy) ([]string, error) {
	s, err := w.spec(p)
	if err != nil {
		return nil, err
	}
	w.inForce.Store(&s)
	return nft.Ensure(w.ns, s)
}

func (w *nftWalls) Same(a, b *policy.Policy) bool {
	sa, errA := w.spec(a)
	sb, errB := w.spec(b)
	return errA == nil && errB == nil && reflect.DeepEqual(sa, sb)
}

func (w *nftWalls) Try(_ context.Context, cand *policy.Policy, iface string) error {
	in := w.inForce.Load()
	if in == nil {
		return errors.New("no walls in force to try a candidate's beside")
	}
	s, err := w.spec(cand)
	if err != nil {
		return err
	}
	if err := nft.TryOn(w.ns, in.TableName(), s, iface); err != nil {
		return err
	}
	s.Table = nft.TrialTable(in.TableName())
	w.trial.Store(&s)
	return nil
}

func (w *nftWalls) EndTry(context.Context) error {
	in := w.inForce.Load()
	if in == nil {
		return nil // nothing was in force, so nothing was tried beside it
	}
	if err := nft.EndTry(w.ns, in.TableName()); err != nil {
		return err
	}
	w.trial.Store(nil)
	return nil
}

// answered puts the DNS filter's answers for allowed names into the
// redirect sets of the walls in force and of a trial, where they redirect.
func (w *nftWalls) answered(addrs []netip.Addr, ttl time.Duration) error {
	var errs []error
	for _, s := range []*nft.Spec{w.inForce.Load(), w.trial.Load()} {
		if s != nil && len(s.Redirects) > 0 {
			errs = append(errs, nft.AddRedirect(w.ns, s.TableName(), addrs, ttl))
		}
	}
	return errors.Join(errs...)
}
