package hwmon

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"time"

	"meshd/drivers"

	"periph.io/x/conn/v3/physic"
)

// DefaultInterval paces reads where the chip publishes no update_interval
// and Options.Interval is zero.
const DefaultInterval = 100 * time.Millisecond

// ErrCounterReset is wrapped when an energy counter fell by more than a
// wrap of its width can explain: the chip was reset or reconfigured, and
// the energy since the previous read is unknown.
var ErrCounterReset = errors.New("energy counter reset")

// ClockTolerance is the relative tolerance taken on the chips' conversion
// clocks: the INA226 datasheet's ±10 % on its conversion times, assumed for
// the whole family.
const ClockTolerance = 0.1

// avgPaceNum/avgPaceDen is the read interval, as a fraction of the
// shortest averaging window the chip's clock allows, of a rail read under
// the averaged-reading model: 8/10 leaves a fifth of a window for
// scheduling and the attribute reads before an interval could hold two
// completed windows.
const avgPaceNum, avgPaceDen = 8, 10

// minAvgPace is the shortest read interval chosen by default.
const minAvgPace = 2 * time.Millisecond

// Options tunes a Sensor.
type Options struct {
	// Clock stamps and paces reads; nil means drivers.System.
	Clock drivers.Clock
	// Interval is the time between reads. 0 means, for a rail read as
	// averaged values, 8/10 of the chip's averaging window (so that no
	// window passes unread), and for a counter the chip's
	// update_interval, else DefaultInterval. It is never shorter than
	// that: reading faster only sees the same value again.
	Interval time.Duration
	// StaleAfter is the least time identical readings are believed; the
	// window is max(3 × update_interval, StaleAfter), with the read
	// interval standing in where the chip publishes no update_interval.
	StaleAfter time.Duration
	// MaxPower, when positive, replaces the full scale computed from the
	// chip's shunt range, e.g. where a fuse or regulator limits the rail
	// below it.
	MaxPower physic.Power
	// ShuntMicroOhms is the shunt resistance where the kernel publishes
	// none (the ina238 family keeps the device tree's value to itself);
	// such rails cannot be opened without it. A published
	// shunt*_resistor attribute takes precedence: it is what the kernel
	// scales by.
	ShuntMicroOhms int64
	// Name overrides the sensor name; empty means "hwmon:" + Rail.String().
	Name string
}

// Sensor reads one rail. Next must not be called from several goroutines
// at once.
type Sensor struct {
	rail  Rail
	chip  chip
	name  string
	clock drivers.Clock
	pacer *drivers.Pacer
	info  drivers.Info
	conv  time.Duration // how often the chip updates a value
	stale time.Duration
	// modulus is the energy counter's range in µJ: its width in counts
	// times the kernel's step.
	modulus uint64

	// witness lists the other enabled channels' attribute files of a
	// multi-channel chip (the INA3221's in<N>_input and in<N+3>_input):
	// the chip converts its channels in turn, so a change in any of them
	// proves it is converting while this rail's values stay identical.
	witness []string

	seen      bool
	last      reading
	changedAt time.Time

	primed     bool
	base       reading
	contiguous bool // the next counter sample may claim to follow the last
	wraps      uint64
	closed     bool
}

// reading is one set of attribute values, raw as sysfs gives them.
type reading struct {
	at                              time.Time     // when the last attribute had been read
	took                            time.Duration // how long the attribute reads took
	bus, shunt, curr, power, energy int64
	// wit holds the witness files' values, read after the stamp (they
	// prove freshness, not the value, so they do not lengthen the latch);
	// math.MinInt64 where one could not be read.
	wit [4]int64
}

// same reports whether every attribute is identical, the sign of a frozen
// chip or driver.
func (r reading) same(o reading) bool {
	return r.bus == o.bus && r.shunt == o.shunt && r.curr == o.curr && r.power == o.power && r.energy == o.energy && r.wit == o.wit
}

// Open prepares rail for reading, checks that it can be read now and takes
// the first reading (the counter's base).
func Open(rail Rail, opts Options) (*Sensor, error) {
	c, ok := chips[rail.Chip]
	if !ok {
		return nil, fmt.Errorf("hwmon: chip %q is not a known power monitor", rail.Chip)
	}
	s := &Sensor{rail: rail, chip: c, name: opts.Name, clock: drivers.ClockOr(opts.Clock)}
	if s.name == "" {
		s.name = "hwmon:" + rail.String()
	}
	var update time.Duration
	if ms, err := readInt(filepath.Join(rail.Dir, "update_interval")); err == nil {
		if ms <= 0 {
			return nil, fmt.Errorf("%s: update_interval %d ms is not positive", s.name, ms)
		}
		update = time.Duration(ms) * time.Millisecond
	}
	s.conv = c.conv
	if update > 0 {
		s.conv = update
	}
	// A rail without an energy counter reads the chip's averaged values:
	// each is the mean over the newest completed conversion window. Read
	// a little faster than the fastest window the chip's clock allows, so
	// that no window passes unread (a read interval that may hold two
	// completions is charged at full scale): reading faster only sees the
	// same window again, which costs the averaged-reading model nothing.
	// Below minAvgPace (an INA219's 1 ms) sysfs reads would cost a core;
	// such a rail keeps the default interval and its unread windows are
	// charged at full scale.
	// update_interval is rounded to the millisecond (ina3221.c:
	// DIV_ROUND_CLOSEST of 6.6 ms is 7), so half a millisecond widens the
	// clock's tolerance.
	win, tol, shortest := s.conv, ClockTolerance, s.conv-s.conv/10
	if update > 0 {
		tol += float64(500*time.Microsecond) / float64(update)
		shortest -= 500 * time.Microsecond
	}
	if lo, hi, ok := ina3221Window(rail, update); ok {
		// The chip's configuration is known exactly: the window is one
		// of the datasheet's conversion times, not the rounded interval.
		l, h := float64(lo)*(1-ClockTolerance), float64(hi)*(1+ClockTolerance)
		win, tol, shortest = time.Duration((l+h)/2), (h-l)/(h+l), time.Duration(l)
	}
	avgPace := time.Duration(0)
	if !rail.HasEnergy() && shortest*avgPaceNum/avgPaceDen >= minAvgPace {
		avgPace = shortest * avgPaceNum / avgPaceDen
	}
	pace := opts.Interval
	if pace <= 0 {
		pace = update
		if avgPace > 0 {
			pace = avgPace
		}
	}
	if pace <= 0 {
		pace = DefaultInterval
	}
	if avgPace > 0 {
		pace = max(pace, avgPace)
	} else {
		pace = max(pace, update)
	}
	staleBase := update
	if staleBase <= 0 {
		staleBase = pace
	}
	s.stale = max(3*staleBase, opts.StaleAfter)

	s.witness = witnesses(rail)

	r, err := shuntOf(rail, c, opts.ShuntMicroOhms)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.name, err)
	}
	acc := accuracy(c, r, opts.MaxPower)
	s.info = drivers.Info{Kind: drivers.KindPoint, Period: pace, MaxPeriod: pace, Accuracy: acc}
	if rail.HasEnergy() {
		lsbUJ := uint64(acc.Quantum / physic.MicroJoule)
		if lsbUJ == 0 {
			return nil, fmt.Errorf("%s: energy step below 1 µJ at %d µΩ", s.name, r)
		}
		s.modulus = lsbUJ << c.energyBits
		if s.modulus>>c.energyBits != lsbUJ {
			return nil, fmt.Errorf("%s: energy counter range overflows at %d µJ per count", s.name, lsbUJ)
		}
		// A late read still chains: the accumulator integrates through
		// it. MaxPeriod allows one conversion of placement either way.
		s.info.Kind = drivers.KindCounter
		s.info.MaxPeriod = pace + s.conv
	} else {
		s.info.Accuracy.Quantum = 0
		s.info.Averaging = drivers.Averaging{Window: win, Tolerance: tol}
	}
	s.pacer = drivers.NewPacer(s.clock, pace)

	if _, err := s.pacer.Wait(context.Background()); err != nil {
		return nil, err
	}
	first, err := s.read()
	if err != nil {
		return nil, err
	}
	_ = s.note(first) // the first reading opens the freshness window; it cannot be stale
	if s.info.Kind == drivers.KindCounter {
		s.base, s.primed = first, true
	}
	return s, nil
}

// ina3221Conv is the datasheet's conversion time per CT code, µs
// (SBOS576: typical; the maximum is 10 % above).
var ina3221Conv = [...]int64{140, 204, 332, 588, 1100, 2116, 4156, 8244}

// ina3221Window recovers the INA3221's nominal averaging window from what
// sysfs shows: the enabled channels (in<N>_enable), the averaging count
// (samples) and update_interval, which ina3221.c derives from the
// configuration register as DIV_ROUND_CLOSEST(channels × (bus CT + shunt
// CT) [× samples, before the kernel dropped the factor], 1000) ms with both
// CTs set alike. Every CT whose interval, under either convention, rounds
// to the published one is a candidate; lo and hi are the shortest and
// longest window they give. ok is false where any input is missing.
func ina3221Window(rail Rail, update time.Duration) (lo, hi time.Duration, ok bool) {
	if rail.Chip != "ina3221" || update <= 0 {
		return 0, 0, false
	}
	samples, err := readInt(filepath.Join(rail.Dir, "samples"))
	if err != nil || samples < 1 || samples > 1024 {
		return 0, 0, false
	}
	var channels int64
	for n := 1; n <= 3; n++ {
		v, err := readInt(filepath.Join(rail.Dir, fmt.Sprintf("in%d_enable", n)))
		if err != nil {
			return 0, 0, false
		}
		if v != 0 {
			channels++
		}
	}
	ms := update.Milliseconds()
	for _, ct := range ina3221Conv {
		perSample := channels * 2 * ct // µs, one sample of every channel
		for _, published := range []int64{perSample, perSample * samples} {
			if (published+500)/1000 != ms {
				continue
			}
			w := time.Duration(perSample*samples) * time.Microsecond // the chip's true window
			if !ok || w < lo {
				lo = w
			}
			if !ok || w > hi {
				hi = w
			}
			ok = true
		}
	}
	return lo, hi, ok
}

// witnesses lists the attribute files of rail's chip that prove the chip
// converts: on the INA3221, the bus and shunt inputs of its other enabled
// channels (a disabled one reads in<N>_enable 0 and fails with ENODATA).
// A single-channel chip has none beyond the rail's own.
func witnesses(rail Rail) []string {
	if rail.Chip != "ina3221" {
		return nil
	}
	var w []string
	for n := 1; n <= 3; n++ {
		if n == rail.Channel || readString(filepath.Join(rail.Dir, fmt.Sprintf("in%d_enable", n))) == "0" {
			continue
		}
		for _, f := range []string{fmt.Sprintf("in%d_input", n), fmt.Sprintf("in%d_input", n+3)} {
			if exists(filepath.Join(rail.Dir, f)) {
				w = append(w, f)
			}
		}
	}
	return w[:min(len(w), len(reading{}.wit))]
}

// shuntOf is the resistance the kernel scales the rail by, in µΩ.
func shuntOf(rail Rail, c chip, override int64) (int64, error) {
	if c.fixedShunt > 0 {
		return c.fixedShunt, nil
	}
	if c.shuntAttr {
		for _, f := range []string{fmt.Sprintf("shunt%d_resistor", rail.Channel), "shunt_resistor"} {
			v, err := readInt(filepath.Join(rail.Dir, f))
			if err == nil && v > 0 {
				return v, nil
			}
		}
	}
	if override > 0 {
		return override, nil
	}
	return 0, fmt.Errorf("the kernel publishes no shunt resistor for %s: set Options.ShuntMicroOhms to the device tree's shunt-resistor", rail.Chip)
}

// Name implements drivers.Sensor.
func (s *Sensor) Name() string { return s.name }

// Info implements drivers.Sensor.
func (s *Sensor) Info() drivers.Info { return s.info }

// Rail returns the rail this sensor reads.
func (s *Sensor) Rail() Rail { return s.rail }

// Wraps is how many energy counter wraps the sensor has accounted for.
func (s *Sensor) Wraps() uint64 { return s.wraps }

// Close implements drivers.Sensor.
func (s *Sensor) Close() error {
	s.closed = true
	return nil
}

// read reads every attribute of the rail once. The energy counter goes
// first so that the stamp, taken after the last attribute, is late by no
// more than the reads that Uncertainty includes.
func (s *Sensor) read() (reading, error) {
	start := s.clock.Now()
	var r reading
	for _, a := range []struct {
		file string
		v    *int64
	}{{s.rail.energy, &r.energy}, {s.rail.bus, &r.bus}, {s.rail.shunt, &r.shunt}, {s.rail.curr, &r.curr}, {s.rail.power, &r.power}} {
		if a.file == "" {
			continue
		}
		v, err := readInt(filepath.Join(s.rail.Dir, a.file))
		if err != nil {
			return reading{}, fmt.Errorf("%s: %w", s.name, err)
		}
		*a.v = v
	}
	r.at = s.clock.Now()
	r.took = r.at.Sub(start)
	for i, f := range s.witness {
		v, err := readInt(filepath.Join(s.rail.Dir, f))
		if err != nil {
			v = math.MinInt64 // no evidence either way
		}
		r.wit[i] = v
	}
	return r, nil
}

// note records r for the freshness check and reports whether it is stale:
// every attribute unchanged for longer than the stale window.
func (s *Sensor) note(r reading) error {
	if !s.seen || !r.same(s.last) {
		s.changedAt = r.at
	}
	s.seen, s.last = true, r
	if since := r.at.Sub(s.changedAt); since > s.stale {
		return fmt.Errorf("%s: every attribute unchanged for %v (longer than %v): %w", s.name, since, s.stale, drivers.ErrStale)
	}
	return nil
}

// Next waits for the next read, one interval after the previous, and
// returns it: a point reading, or for a counter the mean power since the
// previous good read. After an error a counter takes a fresh base first,
// so the next sample it returns is not Contiguous.
func (s *Sensor) Next(ctx context.Context) (drivers.Sample, error) {
	for {
		if s.closed {
			return drivers.Sample{}, fmt.Errorf("%s: closed", s.name)
		}
		if _, err := s.pacer.Wait(ctx); err != nil {
			return drivers.Sample{}, err
		}
		r, err := s.read()
		if err == nil {
			err = s.note(r)
		}
		if err != nil {
			// A frozen or unreadable counter may have missed energy:
			// the next sample must start from a read made after it.
			s.primed = false
			return drivers.Sample{}, err
		}
		if s.info.Kind != drivers.KindCounter {
			return s.point(r), nil
		}
		if !s.primed {
			s.base, s.primed, s.contiguous = r, true, false
			continue
		}
		return s.counter(r)
	}
}

// point turns r into a point sample.
func (s *Sensor) point(r reading) drivers.Sample {
	smp := s.values(r)
	smp.Start, smp.End = r.at, r.at
	// The latched value may be a full update old at the read.
	smp.Uncertainty = r.took + s.conv
	// The chip's registers are read while the attribute reads run (the
	// kernel drivers keep no cache of the value registers).
	smp.Latch = r.took
	smp.Overflow = abs(smp.Power) > s.info.Accuracy.FullScale(smp.Bus)
	return smp
}

// counter turns the counter's advance from the base to r into a sample.
func (s *Sensor) counter(r reading) (drivers.Sample, error) {
	prev, cur := uint64(s.base.energy), uint64(r.energy)
	dt := r.at.Sub(s.base.at)
	var d uint64
	wrapped := cur < prev
	if wrapped {
		d = s.modulus - prev + cur
		// A wrap is believable only if the chip could have counted that
		// much in the time at its full scale, with a conversion of
		// slack at either end.
		most := drivers.EnergyOf(s.info.Accuracy.FullScale(s.chip.busMax), dt+2*s.conv)
		if prev > s.modulus || physic.Energy(min(d, math.MaxInt64/1000))*physic.MicroJoule > most {
			s.base, s.contiguous = r, false
			return drivers.Sample{}, fmt.Errorf("%s: energy counter fell from %d to %d µJ: %w", s.name, prev, cur, ErrCounterReset)
		}
	} else {
		d = cur - prev
	}
	e := physic.Energy(min(d, math.MaxInt64/1000)) * physic.MicroJoule
	smp := s.values(r)
	smp.Start, smp.End = s.base.at, r.at
	smp.Uncertainty = s.conv + r.took
	smp.Contiguous = s.contiguous
	smp.Power = drivers.PowerOf(e, dt)
	if s.chip.deadDen > 0 {
		smp.Dead = time.Duration((int64(dt)*s.chip.deadNum + s.chip.deadDen - 1) / s.chip.deadDen)
	}
	// The mean cannot exceed full scale at the higher of the bus
	// voltages seen at either end without the chip having overflowed.
	fsBus := max(absV(s.base.bus), absV(r.bus)) * physic.MilliVolt
	smp.Overflow = smp.Power > s.info.Accuracy.FullScale(fsBus)
	if wrapped {
		s.wraps++
	}
	s.base, s.contiguous = r, true
	return smp, nil
}

// values converts r's attributes to physic units: bus mV, shunt mV (µV on
// the ina3221), current mA, power µW. power1_input is a magnitude; it
// takes the current's sign. Without it, power is V × I, exact in µW.
func (s *Sensor) values(r reading) drivers.Sample {
	shuntUnit := physic.MilliVolt
	if s.chip.shuntInMicro {
		shuntUnit = physic.MicroVolt
	}
	smp := drivers.Sample{
		Bus:     physic.ElectricPotential(r.bus) * physic.MilliVolt,
		Shunt:   physic.ElectricPotential(r.shunt) * shuntUnit,
		Current: physic.ElectricCurrent(r.curr) * physic.MilliAmpere,
	}
	if s.rail.power != "" {
		smp.Power = physic.Power(r.power) * physic.MicroWatt
		if r.curr < 0 {
			smp.Power = -smp.Power
		}
	} else {
		smp.Power = physic.Power(r.bus*r.curr) * physic.MicroWatt
	}
	return smp
}

// Read reads rail once, now, as a point reading stamped on clock (nil
// means drivers.System), without pacing, freshness check or error budget:
// what discovery shows.
func Read(rail Rail, clock drivers.Clock) (drivers.Sample, error) {
	c, ok := chips[rail.Chip]
	if !ok {
		return drivers.Sample{}, fmt.Errorf("hwmon: chip %q is not a known power monitor", rail.Chip)
	}
	s := &Sensor{rail: rail, chip: c, name: "hwmon:" + rail.String(), clock: drivers.ClockOr(clock)}
	r, err := s.read()
	if err != nil {
		return drivers.Sample{}, err
	}
	smp := s.values(r)
	smp.Start, smp.End, smp.Uncertainty = r.at, r.at, r.took
	return smp, nil
}

func absV(mv int64) physic.ElectricPotential {
	if mv < 0 {
		mv = -mv
	}
	return physic.ElectricPotential(mv)
}

func abs(p physic.Power) physic.Power {
	if p < 0 {
		return -p
	}
	return p
}

var _ drivers.Sensor = (*Sensor)(nil)
