// Package drivertest holds what driver, sampler and agent tests share to
// replay hardware timing exactly: a simulated clock that implements
// drivers.Clock.
package drivertest

import (
	"context"
	"sort"
	"sync"
	"time"
)

// Epoch is where simulated clocks start unless told otherwise: a fixed,
// recognisable instant so that failures replay byte for byte.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Clock is a simulated drivers.Clock. In auto mode Sleep advances the
// clock by the requested duration and returns at once, which makes a
// single-goroutine simulation (a driver polling a simulated chip) run as
// fast as the CPU allows and exactly the same every time. In manual mode
// Sleep blocks until Advance moves the clock past the sleeper's deadline.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	auto    bool
	waiters []waiter
	changed chan struct{} // closed when the set of sleepers changes
}

type waiter struct {
	at time.Time
	ch chan struct{}
}

// NewClock returns a clock at start; auto selects auto mode.
func NewClock(start time.Time, auto bool) *Clock {
	return &Clock{now: start, auto: auto, changed: make(chan struct{})}
}

// Now implements drivers.Clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Spend moves the clock forward by d in either mode, as a bus transaction
// or a computation that takes time does, waking sleepers it passes.
func (c *Clock) Spend(d time.Duration) {
	if d <= 0 {
		return
	}
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.wakeLocked()
	c.mu.Unlock()
}

// Advance moves the clock forward by d, waking sleepers it passes.
func (c *Clock) Advance(d time.Duration) { c.Spend(d) }

// Set moves the clock to t if t is later than now.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	if t.After(c.now) {
		c.now = t
		c.wakeLocked()
	}
	c.mu.Unlock()
}

// Sleep implements drivers.Clock.
func (c *Clock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	if c.auto {
		if d > 0 {
			c.now = c.now.Add(d)
		}
		c.mu.Unlock()
		return nil
	}
	if d <= 0 {
		c.mu.Unlock()
		return nil
	}
	w := waiter{at: c.now.Add(d), ch: make(chan struct{})}
	c.waiters = append(c.waiters, w)
	sort.Slice(c.waiters, func(i, j int) bool { return c.waiters[i].at.Before(c.waiters[j].at) })
	c.signalLocked()
	c.mu.Unlock()
	select {
	case <-w.ch:
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		for i := range c.waiters {
			if c.waiters[i].ch == w.ch {
				c.waiters = append(c.waiters[:i], c.waiters[i+1:]...)
				break
			}
		}
		c.signalLocked()
		c.mu.Unlock()
		return ctx.Err()
	}
}

// Sleepers is how many goroutines are blocked in Sleep (manual mode).
func (c *Clock) Sleepers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// WaitSleepers blocks until at least n goroutines are blocked in Sleep or
// ctx ends: the Ready-style synchronisation a test uses before Advance.
func (c *Clock) WaitSleepers(ctx context.Context, n int) error {
	for {
		c.mu.Lock()
		if len(c.waiters) >= n {
			c.mu.Unlock()
			return nil
		}
		ch := c.changed
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// AdvanceToNext moves the clock to the earliest sleeper's deadline and
// wakes it; it reports false when nobody sleeps.
func (c *Clock) AdvanceToNext() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.waiters) == 0 {
		return false
	}
	if c.waiters[0].at.After(c.now) {
		c.now = c.waiters[0].at
	}
	c.wakeLocked()
	return true
}

func (c *Clock) wakeLocked() {
	n := 0
	for _, w := range c.waiters {
		if !w.at.After(c.now) {
			close(w.ch)
			continue
		}
		c.waiters[n] = w
		n++
	}
	if n != len(c.waiters) {
		c.waiters = c.waiters[:n]
		c.signalLocked()
	}
}

func (c *Clock) signalLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}
