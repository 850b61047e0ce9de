package drivers

import (
	"context"
	"time"
)

// Clock is the time source a driver stamps readings with and paces its
// polling by. Production drivers use System; tests drive a simulated clock
// (drivers/drivertest) so that timing faults replay exactly.
type Clock interface {
	Now() time.Time
	// Sleep waits for d or until ctx ends, returning ctx's error then.
	Sleep(ctx context.Context, d time.Duration) error
}

// System is the monotonic wall clock.
type System struct{}

// Now implements Clock.
func (System) Now() time.Time { return time.Now() }

// Sleep implements Clock.
func (System) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// ClockOr returns c, or System when c is nil.
func ClockOr(c Clock) Clock {
	if c == nil {
		return System{}
	}
	return c
}

// Pacer spaces periodic reads of a sensor that has no ready flag: Wait
// returns at most once per interval, and a late caller is not let through
// in a burst to catch up (each reading must stand for its own interval).
type Pacer struct {
	clock Clock
	every time.Duration
	next  time.Time
}

// NewPacer paces reads every interval on clock (nil means System).
func NewPacer(clock Clock, every time.Duration) *Pacer {
	return &Pacer{clock: ClockOr(clock), every: every}
}

// Every is the pacing interval.
func (p *Pacer) Every() time.Duration { return p.every }

// Wait blocks until the next read is due (the first is due at once) and
// returns the time it let the caller through.
func (p *Pacer) Wait(ctx context.Context) (time.Time, error) {
	now := p.clock.Now()
	if !p.next.IsZero() && now.Before(p.next) {
		if err := p.clock.Sleep(ctx, p.next.Sub(now)); err != nil {
			return time.Time{}, err
		}
		now = p.clock.Now()
	} else if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	p.next = now.Add(p.every)
	return now, nil
}
