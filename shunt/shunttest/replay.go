package shunttest

import (
	"context"
	"fmt"
	"math"
	"sort"
	"time"

	"meshd/drivers"
	"meshd/drivers/drivertest"

	"periph.io/x/conn/v3/physic"
)

// Piecewise is a load whose power is constant between change points, so
// that its energy over any interval is exact: the ground truth a test
// compares a meter's figure and bound with. Times are ns from Origin.
type Piecewise struct {
	Origin time.Time
	at     []int64   // change points, ascending, at[0] = 0
	p      []float64 // nW from at[i] to at[i+1]
	cum    []float64 // nJ from 0 to at[i]
	max    float64
}

// NewPiecewise builds a load from change points (ns from origin, the first
// 0) and the power (nW) from each to the next; the last power holds
// forever.
func NewPiecewise(origin time.Time, at []int64, nw []float64) (*Piecewise, error) {
	if len(at) == 0 || len(at) != len(nw) || at[0] != 0 {
		return nil, fmt.Errorf("shunttest: %d change points and %d powers, the first at %v", len(at), len(nw), at)
	}
	l := &Piecewise{Origin: origin, at: at, p: nw, cum: make([]float64, len(at))}
	for i := range at {
		if i > 0 {
			if at[i] <= at[i-1] {
				return nil, fmt.Errorf("shunttest: change points must ascend: %d after %d", at[i], at[i-1])
			}
			l.cum[i] = l.cum[i-1] + nw[i-1]*float64(at[i]-at[i-1])/1e9
		}
		l.max = max(l.max, math.Abs(nw[i]))
	}
	return l, nil
}

// MaxNW is the largest |power| of the load.
func (l *Piecewise) MaxNW() float64 { return l.max }

// cumAt is the energy (nJ) from the origin to t ns.
func (l *Piecewise) cumAt(t int64) float64 {
	if t <= 0 {
		return l.p[0] * float64(t) / 1e9
	}
	i := sort.Search(len(l.at), func(i int) bool { return l.at[i] > t }) - 1
	return l.cum[i] + l.p[i]*float64(t-l.at[i])/1e9
}

// EnergyNJ is the exact energy over [a, b].
func (l *Piecewise) EnergyNJ(a, b time.Time) float64 {
	return l.cumAt(b.Sub(l.Origin).Nanoseconds()) - l.cumAt(a.Sub(l.Origin).Nanoseconds())
}

// Fault is what happens to one conversion on its way to the sampler.
type Fault int

const (
	FaultNone Fault = iota
	// FaultDrop: the conversion is never read; the next reading is not
	// contiguous (as a correct driver reports after a missed flag).
	FaultDrop
	// FaultDropLying: the conversion is never read, yet the next reading
	// claims to be contiguous — a driver that lies; the sampler's own
	// timing check must catch it.
	FaultDropLying
	// FaultReadError: the read fails (a NACK); the conversion is lost.
	FaultReadError
	// FaultDuplicate: the conversion is delivered twice.
	FaultDuplicate
	// FaultOverflow: the chip flags an overflow for this conversion.
	FaultOverflow
	// FaultStale: the previous value is delivered again, flagged stale by
	// the driver (drivers.ErrStale), as a frozen sysfs value is.
	FaultStale
	// FaultStall: the chip stops converting for this conversion and the
	// two after it; the driver reports drivers.ErrStalled once.
	FaultStall
	// FaultClockJump: the host clock jumps 50 ms forward before this
	// conversion (a suspend, an NTP step on a clock that is not
	// monotonic): its stamps and all later ones are shifted, while the
	// driver still claims the reading follows the last.
	FaultClockJump
	// FaultClockBack: the host clock steps 50 ms back before this
	// conversion; later stamps are shifted back.
	FaultClockBack
	// FaultLate: the reading is delivered most of a period late (a
	// starved poller that still catches the conversion before the next
	// one overwrites it); its stamps are still right.
	FaultLate
)

// ReplayConfig describes the ideal chip a Replay sensor models.
type ReplayConfig struct {
	Name string
	Kind drivers.Kind
	// Period is the nominal conversion period; ClockFactor stretches the
	// true one (1.3 is a chip 30 % slow). Zero means 1.
	Period      time.Duration
	ClockFactor float64
	// DeadFrac is the part of each conversion, at its end, that the
	// current goes unobserved (the bus slot); the reading is the mean over
	// the rest.
	DeadFrac float64
	// Lag is how long after a conversion ends the driver delivers it.
	Lag time.Duration
	// Uncertainty is what the driver states about its stamps; Jitter,
	// at most Uncertainty, is how far they actually err (deterministic,
	// alternating sign).
	Uncertainty, Jitter time.Duration
	GainErr             float64
	// FullScaleNW is the declared full scale; OffsetNW the offset bound.
	FullScaleNW, OffsetNW float64
	DeclaredPPM           uint32
	// Point makes instantaneous readings (Start == End) at each
	// conversion's end, of the power at that instant.
	Point bool
	// Faults says what happens to conversion i (0-based); nil is none.
	Faults func(i int) Fault
	// BusAssumed is the sensor's stated assumed bus band (an INA in
	// shunt-only mode); nil means it measures the bus.
	BusAssumed *drivers.BusBand
}

// Conversion is one conversion as the replay made it: the truth a test
// checks stamps and coverage against.
type Conversion struct {
	TrueStart, TrueEnd     time.Time
	StatedStart, StatedEnd time.Time
	Delivered              int
}

// Replay is a drivers.Sensor that replays an ideal chip converting a
// Piecewise load on a simulated clock in auto mode, with faults injected by
// conversion: each Next sleeps until the next delivery is due.
type Replay struct {
	cfg   ReplayConfig
	load  *Piecewise
	clock *drivertest.Clock
	i     int // next conversion to make
	conv  []Conversion
	prev  drivers.Sample
	have  bool
	gap   bool          // something was lost since the last delivery
	shift time.Duration // host clock offset from the chip's timeline
	queue []pending
}

type pending struct {
	at  time.Time
	smp drivers.Sample
	err error
}

// NewReplay makes the sensor; conversions start at the load's origin.
func NewReplay(cfg ReplayConfig, load *Piecewise, clock *drivertest.Clock) *Replay {
	if cfg.ClockFactor == 0 {
		cfg.ClockFactor = 1
	}
	if cfg.Kind == 0 {
		cfg.Kind = drivers.KindConversion
	}
	if cfg.Name == "" {
		cfg.Name = "replay@test"
	}
	return &Replay{cfg: cfg, load: load, clock: clock, gap: true}
}

// Conversions returns what was made so far.
func (r *Replay) Conversions() []Conversion { return r.conv }

// Name implements drivers.Sensor.
func (r *Replay) Name() string { return r.cfg.Name }

// Info implements drivers.Sensor.
func (r *Replay) Info() drivers.Info {
	fs, off := r.cfg.FullScaleNW, r.cfg.OffsetNW
	return drivers.Info{
		Kind:      r.cfg.Kind,
		Period:    r.cfg.Period,
		MaxPeriod: time.Duration(float64(r.cfg.Period) * 1.1),
		Accuracy: drivers.Accuracy{
			GainErr:     r.cfg.GainErr,
			Offset:      func(physic.ElectricPotential) physic.Power { return physic.Power(off) },
			FullScale:   func(physic.ElectricPotential) physic.Power { return physic.Power(fs) },
			MaxPower:    physic.Power(fs),
			DeclaredPPM: r.cfg.DeclaredPPM,
		},
		BusAssumed: r.cfg.BusAssumed,
	}
}

// Close implements drivers.Sensor.
func (r *Replay) Close() error { return nil }

func (r *Replay) truePeriod() time.Duration {
	return time.Duration(float64(r.cfg.Period) * r.cfg.ClockFactor)
}

// make produces conversion i's deliveries into the queue.
func (r *Replay) make() {
	i := r.i
	r.i++
	tp := r.truePeriod()
	ts := r.load.Origin.Add(time.Duration(i) * tp)
	te := ts.Add(tp)
	// A stamping error that wanders within ±Jitter from one conversion
	// to the next, deterministically.
	j := time.Duration(float64(r.cfg.Jitter) * float64(i*7%5-2) / 2)
	f := FaultNone
	if r.cfg.Faults != nil {
		f = r.cfg.Faults(i)
	}
	switch f {
	case FaultClockJump:
		r.shift += 50 * time.Millisecond
	case FaultClockBack:
		r.shift -= 50 * time.Millisecond
	}
	c := Conversion{TrueStart: ts, TrueEnd: te, StatedEnd: te.Add(j + r.shift)}
	c.StatedStart = c.StatedEnd.Add(-r.cfg.Period)
	if r.have && !r.gap {
		c.StatedStart = r.prev.End
	}
	var p float64
	if r.cfg.Point {
		t := te.Sub(r.load.Origin).Nanoseconds()
		p = (r.load.cumAt(t+1) - r.load.cumAt(t)) * 1e9
		c.StatedStart = c.StatedEnd
	} else {
		obs := te.Add(-time.Duration(float64(tp) * r.cfg.DeadFrac))
		p = r.load.EnergyNJ(ts, obs) * 1e9 / float64(obs.Sub(ts).Nanoseconds())
	}
	smp := drivers.Sample{
		Start: c.StatedStart, End: c.StatedEnd, Uncertainty: r.cfg.Uncertainty,
		Contiguous: r.have && !r.gap && !r.cfg.Point,
		Dead:       time.Duration(float64(r.cfg.Period) * 1.1 * r.cfg.DeadFrac),
		Power:      physic.Power(math.Round(p)),
		Bus:        12 * physic.Volt,
	}
	at := te.Add(r.cfg.Lag + max(r.shift, 0))
	switch f {
	case FaultDrop, FaultReadError:
		r.gap = true
		if f == FaultReadError {
			r.queue = append(r.queue, pending{at: at, err: fmt.Errorf("%s: read register 0x06: i2c: no acknowledge", r.cfg.Name)})
		}
		r.conv = append(r.conv, c)
		return
	case FaultDropLying:
		r.conv = append(r.conv, c)
		return // the next reading still claims to follow the last one
	case FaultStall:
		r.gap = true
		r.i += 2
		r.conv = append(r.conv, c)
		r.queue = append(r.queue, pending{at: ts.Add(3 * time.Duration(float64(r.cfg.Period)*1.1)),
			err: fmt.Errorf("%s: %w", r.cfg.Name, drivers.ErrStalled)})
		return
	case FaultStale:
		r.gap = true
		r.conv = append(r.conv, c)
		r.queue = append(r.queue, pending{at: at, err: fmt.Errorf("%s: %w", r.cfg.Name, drivers.ErrStale)})
		return
	case FaultOverflow:
		smp.Overflow = true
		r.gap = true
	case FaultLate:
		at = te.Add(time.Duration(float64(tp) * 0.9))
	}
	c.Delivered = 1
	r.queue = append(r.queue, pending{at: at, smp: smp})
	if f == FaultDuplicate {
		c.Delivered = 2
		r.queue = append(r.queue, pending{at: at, smp: smp})
	}
	r.conv = append(r.conv, c)
	if f != FaultOverflow {
		r.prev, r.have, r.gap = smp, true, false
	}
}

// Next implements drivers.Sensor: it advances the clock to the next
// delivery and returns it.
func (r *Replay) Next(ctx context.Context) (drivers.Sample, error) {
	for len(r.queue) == 0 {
		r.make()
	}
	// Late deliveries may be overtaken: deliver in time order.
	sort.SliceStable(r.queue, func(i, j int) bool { return r.queue[i].at.Before(r.queue[j].at) })
	for r.i < 1<<30 {
		// Make sure nothing due earlier than the head is still unmade.
		nextEnd := r.load.Origin.Add(time.Duration(r.i+1) * r.truePeriod()).Add(r.cfg.Lag)
		if !nextEnd.Before(r.queue[0].at) {
			break
		}
		r.make()
		sort.SliceStable(r.queue, func(i, j int) bool { return r.queue[i].at.Before(r.queue[j].at) })
	}
	d := r.queue[0]
	r.queue = r.queue[1:]
	if w := d.at.Sub(r.clock.Now()); w > 0 {
		if err := r.clock.Sleep(ctx, w); err != nil {
			return drivers.Sample{}, err
		}
	}
	return d.smp, d.err
}

var _ drivers.Sensor = (*Replay)(nil)
