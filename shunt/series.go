package shunt

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"periph.io/x/conn/v3/physic"

	"meshd/drivers"
	"meshd/wire"
)

// Config tunes a Series or a Meter. The zero value is usable.
type Config struct {
	// Capacity is the ring size in readings, rounded up to a multiple of
	// 1024. Zero means DefaultSpan at the sensor's period.
	Capacity int
	// Now is the meter's clock; nil means time.Now. Windows and the
	// timestamps the sensor returns must come from the same clock.
	Now func() time.Time
	// Epoch anchors the ring's integer timeline; zero means Now() at
	// construction.
	Epoch time.Time
}

// DefaultSpan is how much history a meter keeps when Config.Capacity is 0.
const DefaultSpan = 5 * time.Minute

// maxCapacity keeps a misconfigured meter from allocating gigabytes.
const maxCapacity = 1 << 24

// Series is the record of one sensor's readings and the energy queries
// over it, without a sampling goroutine: a Meter feeds one from a live
// sensor, and tests and offline tools feed one directly. It is safe for
// concurrent use.
type Series struct {
	name     string
	info     drivers.Info
	declared uint64 // ppm
	epoch    time.Time
	now      func() time.Time

	mu      sync.RWMutex
	ring    *ring
	avg     *avgStore // the averaged-reading model's readings; nil unless Info.Averaging
	lastErr error
	stalls  uint64
	lastAt  time.Time // when the newest valid reading was recorded
	notify  chan struct{}
}

// NewSeries checks a sensor's self-description and returns an empty
// record for it.
func NewSeries(name string, info drivers.Info, cfg Config) (*Series, error) {
	if info.Period <= 0 {
		return nil, fmt.Errorf("shunt: sensor %s: period %v must be positive", name, info.Period)
	}
	if info.MaxPeriod < info.Period {
		return nil, fmt.Errorf("shunt: sensor %s: longest period %v is shorter than the period %v", name, info.MaxPeriod, info.Period)
	}
	switch info.Kind {
	case drivers.KindConversion, drivers.KindCounter, drivers.KindPoint, drivers.KindModel:
	default:
		return nil, fmt.Errorf("shunt: sensor %s: unknown kind %d", name, info.Kind)
	}
	acc := info.Accuracy
	if math.IsNaN(acc.GainErr) || acc.GainErr < 0 || acc.GainErr >= 1 {
		return nil, fmt.Errorf("shunt: sensor %s: gain error %v must be in [0, 1)", name, acc.GainErr)
	}
	if acc.FullScale == nil {
		return nil, fmt.Errorf("shunt: sensor %s: no full scale: unobserved time could not be bounded", name)
	}
	declared := uint64(acc.DeclaredPPM)
	if declared == 0 || declared > wire.MaxHwAccuracyPPM {
		declared = wire.MaxHwAccuracyPPM
	}
	capacity := cfg.Capacity
	switch {
	case capacity < 0:
		return nil, fmt.Errorf("shunt: sensor %s: ring capacity %d is negative", name, capacity)
	case capacity == 0:
		capacity = int(min(int64(DefaultSpan/info.Period), maxCapacity))
	case capacity > maxCapacity:
		return nil, fmt.Errorf("shunt: sensor %s: ring capacity %d exceeds %d readings", name, capacity, maxCapacity)
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	epoch := cfg.Epoch
	if epoch.IsZero() {
		epoch = now()
	}
	sr := &Series{name: name, info: info, declared: declared, epoch: epoch, now: now,
		ring: newRing(capacity, acc.GainErr)}
	if av := info.Averaging; av.Enabled() && info.Kind == drivers.KindPoint {
		if math.IsNaN(av.Tolerance) || av.Tolerance < 0 || av.Tolerance >= 1 {
			return nil, fmt.Errorf("shunt: sensor %s: averaging clock tolerance %v must be in [0, 1)", name, av.Tolerance)
		}
		tLo, tHi := av.Bounds()
		if tLo <= 0 {
			return nil, fmt.Errorf("shunt: sensor %s: averaging window %v is too short to bound", name, av.Window)
		}
		sr.avg = newAvgStore(len(sr.ring.buf), av.Window.Nanoseconds(), tLo.Nanoseconds(), tHi.Nanoseconds())
		sr.avg.gain = acc.GainErr
	}
	return sr, nil
}

// Name is the sensor's name.
func (s *Series) Name() string { return s.name }

// Info is the sensor's self-description.
func (s *Series) Info() drivers.Info { return s.info }

func (s *Series) ns(t time.Time) int64 { return t.Sub(s.epoch).Nanoseconds() }

// Record appends one outcome of the sensor, recorded at the series'
// clock's now. A read error, an overflow, an impossible timestamp or an
// accuracy the budget cannot evaluate becomes an invalid entry, never a
// zero.
func (s *Series) Record(smp drivers.Sample, err error) { s.RecordAt(smp, err, s.now()) }

// RecordAt is Record with the recording time given.
func (s *Series) RecordAt(smp drivers.Sample, err error, at time.Time) {
	k := kindValid
	var off, fs float64
	switch {
	case err != nil && errors.Is(err, drivers.ErrStalled):
		k = kindStalled
	case err != nil:
		k = kindReadError
	case smp.Overflow:
		k = kindOverflow
	case smp.Start.IsZero() || smp.End.IsZero() || smp.End.Before(smp.Start) || smp.Uncertainty < 0 || smp.Dead < 0:
		k = kindBadTime
	default:
		acc := s.info.Accuracy
		if acc.Offset != nil {
			off = math.Abs(float64(acc.Offset(smp.Bus)))
		}
		fs = math.Abs(float64(acc.FullScale(smp.Bus)))
		if math.IsNaN(off) || math.IsInf(off, 0) || math.IsNaN(fs) || math.IsInf(fs, 0) {
			k = kindBadAccuracy
		} else if p := math.Abs(float64(smp.Power)); p > fs || (acc.MaxPower > 0 && p > float64(acc.MaxPower)) {
			// Beyond full scale: the assumption that bounds unobserved time
			// is broken, so this reading cannot be trusted either.
			k = kindOverflow
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if k == kindValid {
		bad := s.ring.bad
		s.ring.add(reading{
			start: s.ns(smp.Start), end: s.ns(smp.End), u: smp.Uncertainty.Nanoseconds(), at: s.ns(at),
			p: int64(smp.Power), off: int64(math.Ceil(off)), fs: int64(math.Ceil(fs)),
			dead: smp.Dead.Nanoseconds(), quantum: float64(s.info.Accuracy.Quantum),
			contiguous: smp.Contiguous, maxPeriod: s.info.MaxPeriod.Nanoseconds(),
		})
		if s.ring.bad == bad {
			s.lastAt = at
		}
		if s.avg != nil {
			s.recordAvg(smp, off, fs)
		}
	} else {
		s.ring.addInvalid(k, s.ns(at))
		if s.avg != nil {
			s.avg.invalid()
		}
		if err != nil {
			s.lastErr = err
		}
		if k == kindStalled {
			s.stalls++
		}
	}
	if s.notify != nil {
		close(s.notify)
		s.notify = nil
	}
}

// Coverage says how well the readings cover a window.
type Coverage struct {
	// Samples counts the valid readings the integral used; Invalid the
	// invalid entries that fell among them.
	Samples, Invalid int
	// MaxGap is the largest distance between the ends of consecutive
	// readings used, or from an edge nobody observed to its nearest
	// reading.
	MaxGap time.Duration
	// Covered is how much of the integrated interval lay inside readings'
	// spans; Chained reports that whole, chained conversions covered all
	// of it.
	Covered time.Duration
	Chained bool
}

// Report is a window's full result.
type Report struct {
	// Reading is what a receipt carries.
	Reading wire.Reading
	// Start and End bound the interval integrated (the gross window). For
	// a chained window they are whole conversions containing the requested
	// interval; otherwise they are the requested interval itself.
	Start, End time.Time
	// EnergyUJ and BoundUJ are the integral and its bound before rounding.
	EnergyUJ, BoundUJ float64
	Coverage          Coverage
	// Why says what kept a window from HwShunt; empty when it is HwShunt.
	Why string
	// Model names the integration model where it is not the ring's
	// (ModelAveraged); StatUJ is the statistical uncertainty that model
	// states beside the bound (Metering.StatUJ before rounding).
	Model  string
	StatUJ float64
}

// Energy integrates the recorded readings over the serve interval
// [t0, t1] on the series' clock. It does not wait for readings still to
// come; Meter windows do. A window that chained conversions surely cover
// is charged whole conversions (the gross window contains the serve); any
// other is integrated pro rata over exactly [t0, t1]. It returns
// wire.ErrNoMeasurement (wrapped) when no valid reading touches the window.
func (s *Series) Energy(t0, t1 time.Time) (Report, error) {
	return s.energy(t0, t1, false)
}

// ProRata integrates exactly [t0, t1], never stretching to whole
// conversions, so that adjacent intervals add up to their union: the
// apportioning rule uses it. Its figure is never HwShunt.
func (s *Series) ProRata(t0, t1 time.Time) (Report, error) {
	return s.energy(t0, t1, true)
}

func (s *Series) energy(t0, t1 time.Time, prorata bool) (Report, error) {
	if t1.Before(t0) {
		return Report{}, fmt.Errorf("shunt %s: window ends at %v, before it starts at %v", s.name, t1, t0)
	}
	a, b := s.ns(t0), s.ns(t1)
	if b == a {
		b++ // an instant is measured as the reading around it
	}
	s.mu.RLock()
	if s.avg != nil {
		// The model integrates exactly [t0, t1], so its figures add up
		// over adjacent intervals and serve the pro-rata rule too.
		if ar, ok := s.avg.window(a, b); ok {
			s.mu.RUnlock()
			return s.avgReport(ar, a, b, prorata)
		}
	}
	res, ok := result{}, false
	if !prorata {
		res, ok = s.ring.chain(a, b)
	}
	var err error
	if !ok {
		res, err = s.ring.prorata(a, b)
	}
	s.mu.RUnlock()
	if err != nil {
		return Report{}, fmt.Errorf("shunt %s: window %v long: %w: %v", s.name, t1.Sub(t0), wire.ErrNoMeasurement, err)
	}
	return s.report(res, b-a, prorata)
}

func (s *Series) report(res result, serveNs int64, prorata bool) (Report, error) {
	rep := Report{
		Start:    s.epoch.Add(time.Duration(res.start)),
		End:      s.epoch.Add(time.Duration(res.end)),
		EnergyUJ: res.eNJ / 1e3,
		BoundUJ:  res.bNJ / 1e3,
		Coverage: Coverage{
			Samples: int(res.samples), Invalid: int(res.invalid),
			MaxGap:  time.Duration(res.maxGap),
			Covered: time.Duration(res.covered), Chained: res.chained,
		},
	}
	window := res.end - res.start
	if limit := float64(math.MaxInt64) / 2; math.Abs(res.eNJ) > limit || res.bNJ > limit {
		return rep, fmt.Errorf("shunt %s: a %v window's energy exceeds what one figure can hold", s.name, time.Duration(window))
	}
	energy := math.Round(rep.EnergyUJ)
	if energy < 0 {
		if -rep.EnergyUJ > rep.BoundUJ {
			return rep, fmt.Errorf("shunt %s: net energy %.1f µJ is negative beyond its bound %.1f µJ (reverse flow)", s.name, rep.EnergyUJ, rep.BoundUJ)
		}
		// Zero lies within the bound, so it is a fair reading of a load
		// that drew (next to) nothing.
		energy = 0
	}
	errUJ := uint64(math.Ceil(rep.BoundUJ + math.Abs(energy-rep.EnergyUJ)))
	covered := uint64(wire.FullPPM)
	if window > 0 && res.covered < window {
		covered = uint64(float64(res.covered) / float64(window) * wire.FullPPM)
		covered = min(covered, wire.FullPPM-1)
	}
	if !res.chained && window > 0 && res.covered >= window {
		// Pro rata over spans that do not chain: each span was observed,
		// but nothing proves their placement; never claim more than the
		// chain rule allows.
		covered = wire.FullPPM - 1
	}
	m := wire.Metering{
		Meter:       s.name,
		Kind:        s.info.Kind.String(),
		WindowNs:    uint64(window),
		ServeNs:     uint64(min(serveNs, window)),
		ErrorUJ:     errUJ,
		Samples:     uint64(res.samples),
		MaxGapNs:    uint64(max(res.maxGap, 0)),
		CoveredPPM:  covered,
		PeriodNs:    uint64(s.info.MaxPeriod.Nanoseconds()),
		AccuracyPPM: s.declared,
		Shared:      1,
		FullScaleUW: fullScaleUW(s.info.Accuracy.MaxPower),
		BusBand:     busBand(s.info.BusAssumed),
	}
	rep.Why = s.why(res, m, uint64(energy), prorata)
	prov := wire.HwShunt
	if rep.Why != "" {
		prov = wire.ModelBased
	}
	rep.Reading = wire.Reading{EnergyUJ: uint64(energy), Provenance: prov, Metering: m}
	return rep, nil
}

// why names the first reason a window is not HwShunt, checking the same
// rules the steward enforces at seal time (PROFILE.md §6) and the
// coverage facts only the sampler knows.
func (s *Series) why(res result, m wire.Metering, energy uint64, prorata bool) string {
	switch {
	case !s.info.Kind.Hardware():
		return fmt.Sprintf("a %s meter cannot support a hardware claim", s.info.Kind)
	case s.info.BusAssumed != nil:
		return fmt.Sprintf("the bus voltage was assumed within [%v, %v], not measured behind each reading", s.info.BusAssumed.Lo, s.info.BusAssumed.Hi)
	case prorata:
		return "apportioned pro rata"
	case !res.chained:
		return "the window is not covered by chained conversions"
	case res.invalid > 0:
		return "invalid readings inside the window"
	case m.MaxGapNs > m.PeriodNs:
		return fmt.Sprintf("a gap of %v exceeds the longest period %v", time.Duration(m.MaxGapNs), s.info.MaxPeriod)
	case m.Samples < 1 || m.WindowNs < 1:
		return "no samples"
	}
	if !wire.WithinAccuracy(m.ErrorUJ, energy, m.AccuracyPPM) {
		return fmt.Sprintf("the bound %d µJ exceeds the declared accuracy %d ppm of %d µJ", m.ErrorUJ, m.AccuracyPPM, energy)
	}
	return ""
}

// busBand is a sensor's assumed bus band in whole mV, rounded outwards so
// that the receipt never states a narrower band than the one assumed.
func busBand(b *drivers.BusBand) *wire.BusBand {
	if b == nil {
		return nil
	}
	lo := max(int64(b.Lo), 0) / int64(physic.MilliVolt)
	hi := (max(int64(b.Hi), 0) + int64(physic.MilliVolt) - 1) / int64(physic.MilliVolt)
	return &wire.BusBand{LoMV: uint64(lo), HiMV: uint64(max(hi, lo))}
}

// Stats describes the sampler's health.
type Stats struct {
	// Entries is every outcome recorded since the start; Invalid how many
	// of them carried no measurement; Stalls how many were a sensor
	// reporting no new reading within three periods.
	Entries, Invalid, Stalls uint64
	// LastErr is the most recent read error, if any.
	LastErr error
	// LastValid is when the newest valid reading was recorded (zero if
	// none yet).
	LastValid time.Time
}

// Latest is the newest valid reading's mean power in µW and when its span
// ended, for a live gauge; ok is false before the first valid reading. It
// is a display figure, not a measurement of any window.
func (s *Series) Latest() (uw int64, end time.Time, ok bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if !s.ring.haveValid {
		return 0, time.Time{}, false
	}
	e := s.ring.last
	return e.p / 1000, s.epoch.Add(time.Duration(e.end)), true
}

// Stats reports what was recorded.
func (s *Series) Stats() Stats {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return Stats{Entries: uint64(s.ring.next), Invalid: uint64(s.ring.bad), Stalls: s.stalls,
		LastErr: s.lastErr, LastValid: s.lastAt}
}

// Health returns nil while the sensor delivers: a valid reading was
// recorded within three periods of now (a chip whose clock is 10 % slow
// still delivers two in that time). Otherwise it says how long
// the sensor has been silent and names its last error.
func (s *Series) Health() error {
	s.mu.RLock()
	last, lastErr, have := s.lastAt, s.lastErr, s.ring.haveValid
	s.mu.RUnlock()
	now := s.now()
	switch {
	case !have:
		return fmt.Errorf("shunt %s: no valid reading yet (last error: %v)", s.name, lastErr)
	case now.Sub(last) > 3*s.info.Period:
		return fmt.Errorf("shunt %s: no valid reading for %v, over three periods of %v (last error: %v)", s.name, now.Sub(last), s.info.Period, lastErr)
	}
	return nil
}

// Now is the series' clock.
func (s *Series) Now() time.Time { return s.now() }

// Running is true: a Series is fed from outside and never stops.
func (s *Series) Running() bool { return true }

// WaitPast blocks until a valid reading that surely ends at or after t has
// been recorded, or ctx ends. A Series has no sensor to give up on; a
// Meter bounds the wait.
func (s *Series) WaitPast(ctx context.Context, t time.Time) error {
	tns := s.ns(t)
	for {
		s.mu.Lock()
		done := s.coversLocked(tns)
		var ch <-chan struct{}
		if !done {
			ch = s.waitLocked()
		}
		s.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("shunt %s: waiting for a reading past the window: %w", s.name, ctx.Err())
		case <-ch:
		}
	}
}

// Ready blocks until a valid reading is recorded or ctx ends.
func (s *Series) Ready(ctx context.Context) error {
	for {
		s.mu.Lock()
		ok, last := s.ring.haveValid, s.lastErr
		var ch <-chan struct{}
		if !ok {
			ch = s.waitLocked()
		}
		s.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("shunt %s: no valid reading yet (last error: %v): %w", s.name, last, ctx.Err())
		case <-ch:
		}
	}
}

// covers reports whether a valid reading surely ending at or after t has
// been recorded.
func (s *Series) coversLocked(t int64) bool {
	if s.avg != nil {
		// The averaged-reading model integrates [t0 + τ, t1 + τ]: it needs
		// a reading surely latched a longest window past the end.
		if s.avg.next > 0 {
			if x := s.avg.at(s.avg.next - 1); x.r-x.u >= t+s.avg.tauHi {
				return true
			}
		}
	}
	r := s.ring
	return s.avg == nil && r.haveValid && r.last.end-r.last.u >= t
}

// closeLag is how long past a window's end its closing reading may come
// beyond the sensor's periods: a longest averaging window for a sensor
// read under the averaged-reading model, else nothing.
func (s *Series) closeLag() time.Duration {
	if s.avg == nil {
		return 0
	}
	return time.Duration(s.avg.tauHi)
}

// wait returns a channel closed at the next record.
func (s *Series) waitLocked() <-chan struct{} {
	if s.notify == nil {
		s.notify = make(chan struct{})
	}
	return s.notify
}

// fullScaleUW is a sensor's MaxPower in µW, rounded up; 0 when unstated.
func fullScaleUW(p physic.Power) uint64 {
	if p <= 0 {
		return 0
	}
	return uint64((p + physic.MicroWatt - 1) / physic.MicroWatt)
}
