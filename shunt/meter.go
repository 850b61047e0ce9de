package shunt

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"meshd/drivers"
	"meshd/wire"
)

// Config tunes a Meter. The zero value is usable.
type Config struct {
	// Capacity is the ring size in readings, rounded up to a multiple of
	// 1024. Zero means ten minutes at the sensor's update period.
	Capacity int
	// Now is the meter's clock; nil means time.Now. Windows opened with
	// Open and the timestamps the sensor returns must come from the same
	// clock. Tests inject a simulated one.
	Now func() time.Time
}

// DefaultSpan is how much history a Meter keeps when Config.Capacity is 0.
const DefaultSpan = 10 * time.Minute

// maxCapacity keeps a misconfigured meter from allocating gigabytes.
const maxCapacity = 1 << 24

// Meter samples one sensor in its own goroutine and answers energy queries
// over what it has recorded. It is safe for concurrent use.
type Meter struct {
	sensor drivers.Sensor
	name   string
	period time.Duration
	acc    drivers.Accuracy
	now    func() time.Time
	epoch  time.Time

	mu      sync.RWMutex
	ring    *ring
	notify  chan struct{} // closed on the next record; nil when nobody waits
	stopped bool
	lastErr error

	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// New starts sampling s. The goroutine runs until ctx is cancelled or Close
// is called; Close must be called in either case to release the sensor.
func New(ctx context.Context, s drivers.Sensor, cfg Config) (*Meter, error) {
	if s == nil {
		return nil, errors.New("shunt: nil sensor")
	}
	name := s.Name()
	period := s.UpdatePeriod()
	if period <= 0 {
		return nil, fmt.Errorf("shunt: sensor %s: update period %v must be positive", name, period)
	}
	// The error budget is read once: a sensor keeps its configuration for
	// the meter's life.
	acc := s.Accuracy()
	if math.IsNaN(acc.GainErr) || acc.GainErr < 0 || acc.GainErr >= 1 {
		return nil, fmt.Errorf("shunt: sensor %s: gain error %v must be in [0, 1)", name, acc.GainErr)
	}
	capacity := cfg.Capacity
	switch {
	case capacity < 0:
		return nil, fmt.Errorf("shunt: sensor %s: ring capacity %d is negative", name, capacity)
	case capacity == 0:
		capacity = int(min(int64(DefaultSpan/period), maxCapacity))
	case capacity > maxCapacity:
		return nil, fmt.Errorf("shunt: sensor %s: ring capacity %d exceeds %d readings", name, capacity, maxCapacity)
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	ctx, cancel := context.WithCancel(ctx)
	m := &Meter{
		sensor: s,
		name:   name,
		period: period,
		acc:    acc,
		now:    now,
		epoch:  now(),
		ring:   newRing(capacity, acc.GainErr),
		cancel: cancel,
		done:   make(chan struct{}),
	}
	go m.run(ctx)
	return m, nil
}

// Name identifies the meter in receipts: the sensor's name.
func (m *Meter) Name() string { return m.name }

// UpdatePeriod is the sensor's update period.
func (m *Meter) UpdatePeriod() time.Duration { return m.period }

func (m *Meter) run(ctx context.Context) {
	defer close(m.done)
	defer func() {
		m.mu.Lock()
		m.stopped = true
		m.wake()
		m.mu.Unlock()
	}()
	for {
		s, err := m.sensor.Next(ctx)
		if ctx.Err() != nil {
			return
		}
		m.record(s, err)
		if err != nil {
			// A failing bus usually fails fast; retry at the update period
			// so that a dead sensor costs no more than a live one.
			t := time.NewTimer(m.period)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}
}

func (m *Meter) record(s drivers.Sample, err error) {
	k := kindValid
	var off float64
	switch {
	case err != nil:
		k = kindReadError
	case s.Overflow:
		k = kindOverflow
	case s.At.IsZero():
		k = kindBadTime
	case m.acc.OffsetUW != nil:
		off = math.Abs(m.acc.OffsetUW(s.BusUV))
		if math.IsNaN(off) || math.IsInf(off, 0) {
			k = kindBadAccuracy
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if k == kindValid {
		m.ring.addValid(s.At.Sub(m.epoch).Nanoseconds(), s.Averaged.Nanoseconds(), s.PowerUW, off)
	} else {
		m.ring.addInvalid(k)
		if err != nil {
			m.lastErr = err
		}
	}
	m.wake()
}

// wake releases everyone waiting for the next record. Callers hold mu.
func (m *Meter) wake() {
	if m.notify != nil {
		close(m.notify)
		m.notify = nil
	}
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

// Stats describes the sampler's health.
type Stats struct {
	// Entries is every outcome recorded since the start; Invalid how many
	// of them carried no measurement (read errors, overflows, bad times).
	Entries, Invalid uint64
	// LastErr is the most recent read error, if any.
	LastErr error
	// Running is false once the sampling goroutine has exited.
	Running bool
}

// Stats reports the sampler's health.
func (m *Meter) Stats() Stats {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return Stats{Entries: uint64(m.ring.next), Invalid: uint64(m.ring.bad), LastErr: m.lastErr, Running: !m.stopped}
}

// Coverage says how well the readings cover a window.
type Coverage struct {
	// Samples counts the valid readings the integral used; Invalid the read
	// errors and overflows that fell among them.
	Samples, Invalid int
	// MaxGap is the largest distance between the middles of consecutive
	// readings used, or from an unbracketed edge to its nearest reading.
	MaxGap time.Duration
	// StartBracketed and EndBracketed say whether a valid reading covers
	// or lies beyond each edge.
	StartBracketed, EndBracketed bool
}

// Report is a window's full result.
type Report struct {
	// Reading is what a receipt carries.
	Reading wire.Reading
	// Start and End bound the interval integrated. They contain the
	// requested window: an edge inside a reading's averaging span moves
	// out to the span's boundary (see the package doc).
	Start, End time.Time
	// EnergyUJ and BoundUJ are the integral and its error bound before
	// rounding to the Reading's integers.
	EnergyUJ, BoundUJ float64
	Coverage          Coverage
}

// Energy integrates the recorded readings over [t0, t1], both read on the
// meter's clock. It does not wait for readings still to come; Window.Close
// does. It returns wire.ErrNoMeasurement (wrapped) when no valid reading
// touches the window.
func (m *Meter) Energy(t0, t1 time.Time) (Report, error) {
	if t1.Before(t0) {
		return Report{}, fmt.Errorf("shunt %s: window ends at %v, before it starts at %v", m.name, t1, t0)
	}
	a, b := t0.Sub(m.epoch).Nanoseconds(), t1.Sub(m.epoch).Nanoseconds()
	if b == a {
		b++ // an instant is measured as the reading around it
	}
	m.mu.RLock()
	res, err := m.ring.query(a, b)
	m.mu.RUnlock()
	if err != nil {
		return Report{}, fmt.Errorf("shunt %s: window %v long: %w: %v", m.name, t1.Sub(t0), wire.ErrNoMeasurement, err)
	}
	rep := Report{
		Start:    m.epoch.Add(time.Duration(res.start)),
		End:      m.epoch.Add(time.Duration(res.end)),
		EnergyUJ: res.ePJ / 1e6,
		BoundUJ:  res.bPJ / 1e6,
		Coverage: Coverage{
			Samples:        int(res.samples),
			Invalid:        int(res.invalid),
			MaxGap:         time.Duration(res.maxGap),
			StartBracketed: res.startOK,
			EndBracketed:   res.endOK,
		},
	}
	prov := wire.ModelBased
	if res.startOK && res.endOK && res.invalid == 0 && res.maxGap <= 2*m.period.Nanoseconds() {
		prov = wire.HwShunt
	}
	energy := math.Round(rep.EnergyUJ)
	if energy < 0 {
		if -rep.EnergyUJ > rep.BoundUJ {
			return rep, fmt.Errorf("shunt %s: net energy %.1f µJ is negative beyond its bound %.1f µJ (reverse flow)", m.name, rep.EnergyUJ, rep.BoundUJ)
		}
		// Zero lies within the bound, so it is a fair reading of a load
		// that drew (next to) nothing.
		energy = 0
	}
	rep.Reading = wire.Reading{
		EnergyUJ:   uint64(energy),
		Provenance: prov,
		Metering: wire.Metering{
			Meter:    m.name,
			WindowNs: uint64(res.end - res.start),
			// Rounding the energy to whole µJ costs up to half of one more.
			ErrorUJ:  uint64(math.Ceil(rep.BoundUJ + math.Abs(energy-rep.EnergyUJ))),
			Samples:  uint64(res.samples),
			MaxGapNs: uint64(res.maxGap),
		},
	}
	return rep, nil
}

// Window is one open energy window. Its method set matches the agent's
// Window interface.
type Window struct {
	m      *Meter
	t0     time.Time
	mu     sync.Mutex
	closed bool
}

// Open starts a window now. Any number may be open at once; they cost
// nothing until closed.
func (m *Meter) Open(ctx context.Context) (*Window, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("shunt %s: opening window: %w", m.name, err)
	}
	m.mu.RLock()
	stopped := m.stopped
	m.mu.RUnlock()
	if stopped {
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

// CloseReport ends the window now, waits for the first reading past its
// end (never longer than two update periods; after that the end is left
// unbracketed) and integrates it.
func (w *Window) CloseReport(ctx context.Context) (Report, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return Report{}, fmt.Errorf("shunt %s: window already closed", w.m.name)
	}
	w.closed = true
	t1 := w.m.now()
	if err := w.m.waitPast(ctx, t1); err != nil {
		return Report{}, err
	}
	return w.m.Energy(w.t0, t1)
}

// waitPast blocks until a valid reading ends at or after t1, the sampler
// stops, or two update periods have passed on either the meter's clock or
// the wall clock.
func (m *Meter) waitPast(ctx context.Context, t1 time.Time) error {
	limit := 2 * m.period
	deadline := t1.Add(limit)
	t1ns := t1.Sub(m.epoch).Nanoseconds()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for {
		m.mu.Lock()
		if m.stopped || (m.ring.haveValid && m.ring.last.end >= t1ns) || !m.now().Before(deadline) {
			m.mu.Unlock()
			return nil
		}
		if m.notify == nil {
			m.notify = make(chan struct{})
		}
		ch := m.notify
		m.mu.Unlock()
		select {
		case <-ctx.Done():
			return fmt.Errorf("shunt %s: closing window: %w", m.name, ctx.Err())
		case <-timer.C:
			return nil
		case <-ch:
		}
	}
}

// Ready blocks until the sampler holds at least one valid reading, so that
// a window opened afterwards can be bracketed. It fails if the sampler
// stops first or ctx ends, naming the sensor's last read error: a sensor
// that never delivers is a configuration fault to report, not a reason to
// seal Estimator receipts in silence.
func (m *Meter) Ready(ctx context.Context) error {
	for {
		m.mu.Lock()
		ok, stopped, last := m.ring.haveValid, m.stopped, m.lastErr
		if !ok && !stopped && m.notify == nil {
			m.notify = make(chan struct{})
		}
		ch := m.notify
		m.mu.Unlock()
		switch {
		case ok:
			return nil
		case stopped:
			return fmt.Errorf("shunt %s: sampler stopped before a valid reading (last error: %v)", m.name, last)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("shunt %s: no valid reading yet (last error: %v): %w", m.name, last, ctx.Err())
		case <-ch:
		}
	}
}
