package shunt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"meshd/drivers"
	"meshd/wire"
)

// Meter samples one sensor in its own goroutine into a Series and opens
// energy windows over it. It is safe for concurrent use.
type Meter struct {
	*Series
	sensor drivers.Sensor
	log    *slog.Logger
	after  func(time.Duration) <-chan time.Time

	mu      sync.Mutex
	stopped bool
	healthy bool // as last logged

	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// MeterConfig tunes a Meter.
type MeterConfig struct {
	Config
	// Logger receives the sensor's health transitions (a stall, a
	// recovery); nil discards them.
	Logger *slog.Logger
	// After bounds the wait for a window's closing reading on the wall
	// clock; nil means time.After. Tests on simulated clocks pass one that
	// never fires.
	After func(time.Duration) <-chan time.Time
}

// New starts sampling s. The goroutine runs until ctx is cancelled or Close
// is called; Close must be called in either case to release the sensor.
func New(ctx context.Context, s drivers.Sensor, cfg MeterConfig) (*Meter, error) {
	if s == nil {
		return nil, errors.New("shunt: nil sensor")
	}
	series, err := NewSeries(s.Name(), s.Info(), cfg.Config)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(ctx)
	after := cfg.After
	if after == nil {
		after = time.After
	}
	m := &Meter{Series: series, sensor: s, log: log, after: after, cancel: cancel, done: make(chan struct{}), healthy: true}
	go m.run(ctx)
	return m, nil
}

func (m *Meter) run(ctx context.Context) {
	defer close(m.done)
	defer func() {
		m.mu.Lock()
		m.stopped = true
		m.mu.Unlock()
		m.Series.mu.Lock()
		if m.Series.notify != nil {
			close(m.Series.notify)
			m.Series.notify = nil
		}
		m.Series.mu.Unlock()
	}()
	for {
		smp, err := m.sensor.Next(ctx)
		if ctx.Err() != nil {
			return
		}
		m.Record(smp, err)
		m.logHealth(err)
		if err != nil && !errors.Is(err, drivers.ErrStalled) {
			// A failing bus usually fails fast; retry at the period so a
			// dead sensor costs no more than a live one. A stall has
			// already waited its three periods.
			t := time.NewTimer(m.info.Period)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}
}

// logHealth logs once per transition between delivering and not.
func (m *Meter) logHealth(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case err != nil && errors.Is(err, drivers.ErrStalled) && m.healthy:
		m.healthy = false
		m.log.Warn("meter stalled: windows are not hardware-measured until it recovers", "meter", m.name, "err", err)
	case err == nil && !m.healthy:
		m.healthy = true
		m.log.Info("meter recovered", "meter", m.name)
	}
}

// Running is false once the sampling goroutine has exited.
func (m *Meter) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return !m.stopped
}

// Close stops sampling, waits for the goroutine to exit and closes the
// sensor. Recorded readings stay queryable. It is idempotent.
func (m *Meter) Close() error {
	m.closeOnce.Do(func() {
		m.cancel()
		<-m.done
		if err := m.sensor.Close(); err != nil {
			m.closeErr = fmt.Errorf("shunt: closing sensor %s: %w", m.name, err)
		}
	})
	return m.closeErr
}

// Window is one open energy window.
type Window struct {
	m      *Meter
	t0     time.Time
	mu     sync.Mutex
	closed bool
}

// Open starts a window now. Any number may be open at once; they cost
// nothing until closed. Spans (see Span) decide whether overlapping serves
// may share a meter.
func (m *Meter) Open(ctx context.Context) (*Window, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("shunt %s: opening window: %w", m.name, err)
	}
	if !m.Running() {
		return nil, fmt.Errorf("shunt %s: opening window: meter is not sampling", m.name)
	}
	return &Window{m: m, t0: m.now()}, nil
}

// Start is when the window was opened, on the meter's clock.
func (w *Window) Start() time.Time { return w.t0 }

// Close ends the window now and returns its reading; see CloseReport.
func (w *Window) Close(ctx context.Context) (wire.Reading, error) {
	rep, err := w.CloseReport(ctx)
	return rep.Reading, err
}

// CloseReport ends the window now, waits for the reading that surely ends
// past it (see WaitPast) and integrates it.
func (w *Window) CloseReport(ctx context.Context) (Report, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return Report{}, fmt.Errorf("shunt %s: window already closed", w.m.name)
	}
	w.closed = true
	t1 := w.m.now()
	if err := w.m.WaitPast(ctx, t1); err != nil {
		return Report{}, err
	}
	return w.m.Energy(w.t0, t1)
}

// WaitPast blocks until a valid reading that surely ends at or after t has
// been recorded (for averaged readings, one surely latched a longest
// averaging window after t), the sampler stops, or two longest periods
// (plus that window) have passed on
// either the meter's clock or the wall clock (then the window's end is left
// to the pro-rata rule, which bounds what nobody saw).
func (m *Meter) WaitPast(ctx context.Context, t time.Time) error {
	limit := 2*m.info.MaxPeriod + m.closeLag()
	deadline := t.Add(limit)
	tns := m.ns(t)
	timeout := m.after(limit)
	for {
		m.Series.mu.Lock()
		done := m.coversLocked(tns) || !m.now().Before(deadline)
		var ch <-chan struct{}
		if !done {
			ch = m.waitLocked()
		}
		m.Series.mu.Unlock()
		if done || !m.Running() {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("shunt %s: closing window: %w", m.name, ctx.Err())
		case <-timeout:
			return nil
		case <-ch:
		}
	}
}

// Ready blocks until the sampler holds at least one valid reading, so that
// a window opened afterwards can be measured. It fails if the sampler
// stops first or ctx ends, naming the sensor's last read error: a sensor
// that never delivers is a configuration fault to report, not a reason to
// seal Estimator receipts in silence.
func (m *Meter) Ready(ctx context.Context) error {
	for {
		m.Series.mu.Lock()
		ok, last := m.ring.haveValid, m.lastErr
		var ch <-chan struct{}
		if !ok {
			ch = m.waitLocked()
		}
		m.Series.mu.Unlock()
		if ok {
			return nil
		}
		if !m.Running() {
			return fmt.Errorf("shunt %s: sampler stopped before a valid reading (last error: %v)", m.name, last)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("shunt %s: no valid reading yet (last error: %v): %w", m.name, last, ctx.Err())
		case <-ch:
		}
	}
}
