package nft

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Watch keeps the wall standing: it runs Ensure at once and then every
// interval until ctx ends, and calls onDrift (from Watch's goroutine) each
// time the table differed from s or a check or repair failed, with the drift
// found and the repair's error (nil: repaired). Logging and counting are the
// caller's. Watch returns ctx's error, or at once an error for an invalid
// spec or interval.
func Watch(ctx context.Context, ns int, s Spec, interval time.Duration, onDrift func(drift []string, repairErr error)) error {
	if err := s.Validate(); err != nil {
		return fmt.Errorf("nft: invalid spec: %w", err)
	}
	if interval <= 0 {
		return errors.New("nft: watch interval must be positive")
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if drift, err := Ensure(ns, s); len(drift) > 0 || err != nil {
			onDrift(drift, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
