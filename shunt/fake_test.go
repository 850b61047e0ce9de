package shunt

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"meshd/drivers"
	"meshd/shunt/shunttest"
)

// trace is a synthetic load: power in µW at t ns, and its exact integral.
type trace interface {
	power(t float64) float64
	energy(a, b float64) float64 // µW·ns over [a, b]
}

type constTrace struct{ p float64 }

func (c constTrace) power(float64) float64       { return c.p }
func (c constTrace) energy(a, b float64) float64 { return c.p * (b - a) }

// squareTrace is lo, with bursts to hi for duty×period starting at phase
// plus every multiple of period.
type squareTrace struct{ lo, hi, period, duty, phase float64 }

func (s squareTrace) high(t float64) float64 {
	u := t - s.phase
	k := math.Floor(u / s.period)
	return k*s.duty*s.period + math.Min(u-k*s.period, s.duty*s.period)
}

func (s squareTrace) power(t float64) float64 {
	u := t - s.phase
	if u-math.Floor(u/s.period)*s.period < s.duty*s.period {
		return s.hi
	}
	return s.lo
}

func (s squareTrace) energy(a, b float64) float64 {
	return s.lo*(b-a) + (s.hi-s.lo)*(s.high(b)-s.high(a))
}

// rampTrace is p0 + slope·t.
type rampTrace struct{ p0, slope float64 }

func (r rampTrace) power(t float64) float64 { return r.p0 + r.slope*t }
func (r rampTrace) energy(a, b float64) float64 {
	return r.p0*(b-a) + r.slope*(b*b-a*a)/2
}

// sineTrace is mean + amp·sin(2π·freq·t + phase), freq in Hz.
type sineTrace struct{ mean, amp, freq, phase float64 }

func (s sineTrace) power(t float64) float64 {
	return s.mean + s.amp*math.Sin(2*math.Pi*s.freq*t/1e9+s.phase)
}

func (s sineTrace) energy(a, b float64) float64 {
	w := 2 * math.Pi * s.freq / 1e9
	return s.mean*(b-a) - s.amp/w*(math.Cos(w*b+s.phase)-math.Cos(w*a+s.phase))
}

// simClock is a clock that only the fake sensor moves.
type simClock struct {
	base time.Time
	ns   atomic.Int64
}

func newSimClock() *simClock                      { return &simClock{base: time.Now()} }
func (c *simClock) Now() time.Time                { return c.base.Add(time.Duration(c.ns.Load())) }
func (c *simClock) at(ns int64) time.Time         { return c.base.Add(time.Duration(ns)) }
func (c *simClock) set(ns int64)                  { c.ns.Store(ns) }
func (c *simClock) sinceBase(t time.Time) float64 { return float64(t.Sub(c.base).Nanoseconds()) }

var errBus = errors.New("i2c: remote I/O error")

// fakeSensor replays a trace as an averaging chip would: sample i ends at
// origin+(i+1)·period and reads the mean over the preceding avg (the
// instantaneous power when avg is 0), distorted by a fixed gain and offset
// error and rounded to the µW. Time is simulated: it moves when a sample
// is returned. After n samples Next blocks until ctx is done.
type fakeSensor struct {
	clock          *simClock
	origin         int64 // ns on clock
	period, avg    time.Duration
	tr             trace
	gain, offUW    float64 // injected errors
	acc            drivers.Accuracy
	n              int
	fail, overflow func(i int) bool

	i        int
	drained  chan struct{}
	drainOne sync.Once
	closed   atomic.Int32
}

func newFake(clock *simClock, period, avg time.Duration, tr trace, n int) *fakeSensor {
	return &fakeSensor{
		clock: clock, period: period, avg: avg, tr: tr, n: n,
		acc:     drivers.Accuracy{GainErr: 0.002, OffsetUW: func(int64) float64 { return 1000 }},
		drained: make(chan struct{}),
	}
}

func (f *fakeSensor) Name() string                { return "fake@test" }
func (f *fakeSensor) UpdatePeriod() time.Duration { return f.period }
func (f *fakeSensor) Accuracy() drivers.Accuracy  { return f.acc }
func (f *fakeSensor) Close() error                { f.closed.Add(1); return nil }

// endOf is when sample i completes, ns on the clock.
func (f *fakeSensor) endOf(i int) int64 { return f.origin + int64(i+1)*f.period.Nanoseconds() }

func (f *fakeSensor) Next(ctx context.Context) (drivers.Sample, error) {
	if f.i >= f.n {
		f.drainOne.Do(func() { close(f.drained) })
		<-ctx.Done()
		return drivers.Sample{}, ctx.Err()
	}
	i := f.i
	f.i++
	end := f.endOf(i)
	f.clock.set(end)
	if f.fail != nil && f.fail(i) {
		return drivers.Sample{}, errBus
	}
	e, a := float64(end), float64(f.avg.Nanoseconds())
	mean := f.tr.power(e)
	if a > 0 {
		mean = f.tr.energy(e-a, e) / a
	}
	s := drivers.Sample{
		At:       f.clock.at(end),
		Averaged: f.avg,
		BusUV:    12_000_000,
		PowerUW:  int64(math.Round(mean*(1+f.gain) + f.offUW)),
	}
	if f.overflow != nil && f.overflow(i) {
		s.Overflow, s.PowerUW = true, 1<<40
	}
	return s, nil
}

// truthUJ is the trace's exact energy over [a, b] (meter clock), in µJ.
func (f *fakeSensor) truthUJ(a, b time.Time) float64 {
	return f.tr.energy(f.clock.sinceBase(a), f.clock.sinceBase(b)) / 1e9
}

// stepSensor hands out its fake's samples one at a time, when the test
// says so. The meter asks for a sample only after recording the previous
// one, so a completed hand-off proves the previous sample is recorded.
type stepSensor struct {
	*fakeSensor
	step chan bool // true releases a sample; false is only a barrier
}

func newStep(f *fakeSensor) *stepSensor {
	return &stepSensor{fakeSensor: f, step: make(chan bool)}
}

func (s *stepSensor) Next(ctx context.Context) (drivers.Sample, error) {
	for {
		select {
		case release := <-s.step:
			if release {
				return s.fakeSensor.Next(ctx)
			}
		case <-ctx.Done():
			return drivers.Sample{}, ctx.Err()
		}
	}
}

// advance releases n samples and returns once the meter has recorded all
// of them.
func (s *stepSensor) advance(t testing.TB, n int) {
	t.Helper()
	shunttest.Release(t, s.step, n)
}

// waitRecorded blocks until m has recorded at least n outcomes, woken by the
// meter's own notification.
func waitRecorded(t testing.TB, m *Meter, n uint64) {
	t.Helper()
	timeout := time.NewTimer(10 * time.Second) // reports a hang only
	defer timeout.Stop()
	for {
		m.mu.Lock()
		got, stopped := uint64(m.ring.next), m.stopped
		if got < n && !stopped && m.notify == nil {
			m.notify = make(chan struct{})
		}
		ch := m.notify
		m.mu.Unlock()
		switch {
		case got >= n:
			return
		case stopped:
			t.Fatalf("sampler stopped after %d of %d outcomes", got, n)
		}
		select {
		case <-ch:
		case <-timeout.C:
			t.Fatalf("%d of %d outcomes recorded", got, n)
		}
	}
}

// waitForWaiter returns once someone (a closing window) is blocked waiting
// for m's next record. The meter announces no such event, so its state is
// polled; the condition holds until the next record, which only the test
// releases.
func waitForWaiter(t testing.TB, m *Meter) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second) // reports a hang only
	for {
		m.mu.RLock()
		waiting := m.notify != nil
		m.mu.RUnlock()
		if waiting {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("nobody waits for the next reading")
		}
		time.Sleep(50 * time.Microsecond)
	}
}
