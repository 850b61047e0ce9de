package subprocess

import "time"

// backoff is the restart delay policy: start at min, double per consecutive
// failure up to max, and start over after a child that stayed healthy for
// reset, so one crash a day never waits the maximum.
type backoff struct {
	min, max, reset time.Duration
	next            time.Duration
}

func newBackoff(min, max, reset time.Duration) *backoff {
	return &backoff{min: min, max: max, reset: reset, next: min}
}

// afterCrash returns the delay before restarting a child that had been
// healthy for uptime (0 when it never became healthy).
func (b *backoff) afterCrash(uptime time.Duration) time.Duration {
	if uptime >= b.reset {
		b.next = b.min
	}
	return b.step()
}

// afterFailedStart returns the delay before the next attempt after a
// restart attempt that did not become healthy.
func (b *backoff) afterFailedStart() time.Duration { return b.step() }

func (b *backoff) step() time.Duration {
	d := b.next
	b.next = min(b.next*2, b.max)
	return d
}
