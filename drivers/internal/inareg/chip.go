package inareg

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"meshd/drivers"

	"periph.io/x/conn/v3/i2c"
	"periph.io/x/conn/v3/physic"
)

// Settings are the register values, timing and budget one configuration
// derives.
type Settings struct {
	// Config is the running configuration (shunt and bus continuous, or
	// shunt only); Cal the calibration register.
	Config, Cal    uint16
	ShuntMicroOhms int64
	// MaxCurrentUA is the full scale the accuracy budget assumes: a
	// reading beyond it is an overflow.
	MaxCurrentUA int64
	// Period is the nominal conversion period; the chip's clock may
	// stretch or shrink it by a tenth.
	Period time.Duration
	// Dead is the unobserved time of one conversion (its bus slots at the
	// slow end of the clock).
	Dead time.Duration
	// Poll is the pause between two flag reads once a conversion may have
	// completed; 0 reads back to back, which is what keeps the placement
	// of each conversion tight.
	Poll time.Duration
	// ShuntMin and ShuntMax are the shunt register values at which the
	// ADC sits at full scale.
	ShuntMin, ShuntMax int64
	// ShuntOnly runs the chip shunt-only continuously and brackets the
	// bus voltage with a triggered conversion (BusConfig, nominally
	// BusTime long) every BusEvery; BusTolerance is the rail's declared
	// regulation, relative.
	ShuntOnly    bool
	BusConfig    uint16
	BusTime      time.Duration
	BusEvery     time.Duration
	BusTolerance float64
	// Accuracy is the error budget Info reports.
	Accuracy drivers.Accuracy
	// Clock stamps and paces; nil means drivers.System.
	Clock drivers.Clock
}

// maxAttempts bounds the re-reads of a conversion that a newer one keeps
// overtaking: a bus too slow for the configured period.
const maxAttempts = 4

// noPtr marks the chip's register pointer as unknown.
const noPtr = -1

// Chip is one open INA chip. Next and Close must not be called from several
// goroutines at once; Resets may be.
type Chip struct {
	dev    i2c.Dev
	name   string
	model  Model
	set    Settings
	clock  drivers.Clock
	resets atomic.Uint64
	closed bool

	ptr     int  // register the chip's pointer holds, or noPtr
	suspect bool // a bus error may have hidden a reset

	// What is known of the conversion timeline. No conversion not yet
	// returned ended before lo. prevLo..prevHi bounds the end of the last
	// conversion returned, or the configuration write that restarted the
	// cycle since (prevEnd ± prevU as stated); either way the next
	// conversion starts there. chain says the last conversion returned
	// may be followed contiguously (nothing broke the chain since).
	lo, prevLo, prevHi time.Time
	prevEnd            time.Time
	prevU              time.Duration
	chain              bool
	progress           time.Time // the stall clock runs from here
	tmin, tmax         time.Duration

	// Shunt-only mode: the bus voltage measured last and first.
	busCounts, busRef uint16
	busAt             time.Time
	busOut            bool
}

// New makes the Chip for addr on bus without touching it. An empty name
// means "<model>@<bus>:0x<addr>".
func New(m Model, bus i2c.Bus, addr uint16, name string, s Settings) *Chip {
	if name == "" {
		name = fmt.Sprintf("%s@%s:0x%02x", m.Name, bus, addr)
	}
	return &Chip{
		dev:   i2c.Dev{Bus: bus, Addr: addr},
		name:  name,
		model: m,
		set:   s,
		clock: drivers.ClockOr(s.Clock),
		ptr:   noPtr,
		tmin:  s.Period - s.Period/10,
		tmax:  s.Period + s.Period/10,
	}
}

// LSBs returns the current (nA) and power (nW) register LSBs that a
// calibration cal on a shunt of rMicroOhms makes.
func (m Model) LSBs(cal uint16, rMicroOhms int64) (currentNA, powerNW float64) {
	lsb := float64(m.CalNum) / (float64(cal) * float64(rMicroOhms))
	return lsb, float64(m.PowerRatio) * lsb
}

// Name is the sensor name.
func (c *Chip) Name() string { return c.name }

// Period is the nominal conversion period.
func (c *Chip) Period() time.Duration { return c.set.Period }

// UpdatePeriod is Period, under the name earlier callers know.
func (c *Chip) UpdatePeriod() time.Duration { return c.set.Period }

// Info implements drivers.Sensor: each reading is one conversion, placed
// by the chip's clock, whose period may be a tenth longer than nominal.
//
// In shunt-only mode the readings' power is the current times the bus
// voltage last bracketed, which the operator declared regulated within
// BusTolerance of the first bracket: Info states that band as BusAssumed
// (the first bracket ± the tolerance, widened by one bus LSB each way),
// since a sag between two brackets is invisible to the chip.
func (c *Chip) Info() drivers.Info {
	in := drivers.Info{Kind: drivers.KindConversion, Period: c.set.Period, MaxPeriod: c.tmax, Accuracy: c.set.Accuracy}
	if c.set.ShuntOnly {
		ref := float64(c.busRef>>c.model.BusShift) * float64(c.model.BusLSB)
		lsb := float64(c.model.BusLSB)
		in.BusAssumed = &drivers.BusBand{
			Lo: physic.ElectricPotential(math.Max(math.Floor(ref*(1-c.set.BusTolerance)-lsb), 0)),
			Hi: physic.ElectricPotential(math.Ceil(ref*(1+c.set.BusTolerance) + lsb)),
		}
	}
	return in
}

// Calibration is the calibration register value programmed.
func (c *Chip) Calibration() uint16 { return c.set.Cal }

// Resets counts the chip resets and lost settings detected and repaired.
func (c *Chip) Resets() uint64 { return c.resets.Load() }

// CurrentLSB is the current register LSB as the truncated calibration
// makes it, in nA.
func (c *Chip) CurrentLSB() float64 {
	lsb, _ := c.model.LSBs(c.set.Cal, c.set.ShuntMicroOhms)
	return lsb
}

// read reads one register, leaving out the pointer write when the chip's
// pointer already holds it (a 29-clock transaction instead of 48: the
// flag polls are what place a conversion in time, so they are kept short).
func (c *Chip) read(reg byte) (uint16, error) {
	var b [2]byte
	var err error
	if c.ptr == int(reg) {
		err = c.dev.Tx(nil, b[:])
	} else {
		err = c.dev.Tx([]byte{reg}, b[:])
	}
	if err != nil {
		c.ptr = noPtr
		return 0, fmt.Errorf("%s: read register 0x%02x: %w", c.name, reg, err)
	}
	c.ptr = int(reg)
	return uint16(b[0])<<8 | uint16(b[1]), nil
}

func (c *Chip) write(reg byte, v uint16) error {
	err := Write(&c.dev, reg, v)
	c.ptr = int(reg)
	if err != nil {
		c.ptr = noPtr
		return fmt.Errorf("%s: %w", c.name, err)
	}
	return nil
}

// Reset sets the RST bit, returning every register to its power-on value.
func (c *Chip) Reset() error {
	if err := c.write(RegConfig, ConfigReset); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	return nil
}

// Start writes Config and Calibration, checks that both read back, and in
// shunt-only mode measures the bus voltage for the first time.
func (c *Chip) Start(ctx context.Context) error {
	if err := c.program(); err != nil {
		return err
	}
	t0 := c.clock.Now()
	ok, err := c.intact()
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%s: configuration 0x%04x / calibration %d did not read back", c.name, c.set.Config, c.set.Cal)
	}
	// A conversion is whole only if its result registers and the second
	// flag read fit between two conversions: refuse a bus that cannot
	// do that at this period rather than fail every reading.
	read := c.clock.Now().Sub(t0) / 2
	n := len(c.model.Results) + 1
	if c.model.HasConsume {
		n++
	}
	if c.set.ShuntOnly && slices.Contains(c.model.Results, RegBus) {
		n--
	}
	if need := time.Duration(n) * read; need >= c.tmin {
		return fmt.Errorf("%s: the bus is too slow for a %v period: %d register reads of %v each take %v, longer than the shortest period %v (choose a longer conversion)", c.name, c.set.Period, n, read, need, c.tmin)
	}
	if c.set.ShuntOnly {
		return c.measureBus(ctx)
	}
	return nil
}

// program writes Config and Calibration. A configuration write restarts
// the conversion cycle, so the timeline starts over from it.
func (c *Chip) program() error {
	at := c.clock.Now()
	if err := c.write(RegConfig, c.set.Config); err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	c.restart(at, c.clock.Now())
	if err := c.write(RegCal, c.set.Cal); err != nil {
		return fmt.Errorf("write calibration: %w", err)
	}
	return nil
}

// restart records a configuration write that took [at, end]: the chip
// cleared its flag and began a new cycle during it, so the next conversion
// starts then and nothing chains across.
func (c *Chip) restart(at, end time.Time) {
	w := end.Sub(at)
	c.lo, c.prevLo, c.prevHi = at, at, end
	c.prevEnd, c.prevU = at.Add(w/2), w-w/2
	c.chain = false
	c.progress = end
}

func (c *Chip) intact() (bool, error) {
	cfg, err := c.read(RegConfig)
	if err != nil {
		return false, err
	}
	cal, err := c.read(RegCal)
	if err != nil {
		return false, err
	}
	return cfg == c.set.Config && cal == c.set.Cal, nil
}

// restoreIfReset rewrites Config and Calibration when the chip lost them
// (a brown-out brings back the power-on configuration and a zero
// calibration; someone may have powered it down); it reports whether it
// had to.
func (c *Chip) restoreIfReset() (bool, error) {
	ok, err := c.intact()
	if err != nil || ok {
		return false, err
	}
	if err := c.program(); err != nil {
		return false, err
	}
	c.resets.Add(1)
	return true, nil
}

// fail records a bus error: the chip may have reset unseen, the pointer is
// unknown and the next reading cannot be proven to follow the last.
func (c *Chip) fail(err error) error {
	c.suspect = true
	c.chain = false
	return err
}

// Raw is one conversion as read from the chip.
type Raw struct {
	// Flags is the flag register as read by the final check.
	Flags                      uint16
	Shunt, Bus, Current, Power uint16
}

func (r *Raw) set(reg byte, v uint16) {
	switch reg {
	case RegShunt:
		r.Shunt = v
	case RegBus:
		r.Bus = v
	case RegCurrent:
		r.Current = v
	case RegPower:
		r.Power = v
	}
}

// Next implements drivers.Sensor. It sleeps until the next conversion can
// first have completed (the last one's earliest end plus a short period),
// then reads the ready flag every Poll until it is set. The conversion
// ended after the start of the last read that saw the flag clear and
// before the end of the read that consumed it; while readings chain, the
// chip's clock also puts it within a short and a long period of the last
// one, and the two intervals are intersected. After the result registers
// the flag is read again: set, it means a newer conversion latched in
// between and the values may mix two conversions, so they are dropped and
// the newer one read instead (not contiguous).
//
// A conversion whose current disagrees with its shunt voltage under the
// programmed calibration, or whose timing breaks the chain, makes Next read
// the settings back; a chip that lost them is reprogrammed, the conversion
// dropped and a reset counted. No conversion for three long periods returns
// an error wrapping drivers.ErrStalled after the settings were checked (and
// repaired). A bus error is returned wrapped; the next call first checks
// the settings.
func (c *Chip) Next(ctx context.Context) (drivers.Sample, error) {
	if c.closed {
		return drivers.Sample{}, fmt.Errorf("%s: closed", c.name)
	}
	if c.suspect {
		if _, err := c.restoreIfReset(); err != nil {
			return drivers.Sample{}, c.fail(err)
		}
		c.suspect = false
	}
	if c.set.ShuntOnly && !c.clock.Now().Before(c.busAt.Add(c.set.BusEvery)) {
		if err := c.measureBus(ctx); err != nil {
			return drivers.Sample{}, c.fail(err)
		}
	}
	for {
		if err := ctx.Err(); err != nil {
			return drivers.Sample{}, err
		}
		// Nothing can have completed before the earliest end of the next
		// conversion: sleep rather than poll until then.
		if wait := c.prevLo.Add(c.tmin).Sub(c.clock.Now()); wait > 0 {
			if err := c.clock.Sleep(ctx, wait); err != nil {
				return drivers.Sample{}, err
			}
		}
		t0 := c.clock.Now()
		f, err := c.read(c.model.FlagReg)
		t1 := c.clock.Now()
		if err != nil {
			return drivers.Sample{}, c.fail(err)
		}
		if f&c.model.ReservedMask != 0 {
			// Not the flag register: the chip's pointer moved (a reset
			// returns it to Config).
			c.ptr = noPtr
			c.chain = false
			if _, err := c.restoreIfReset(); err != nil {
				return drivers.Sample{}, c.fail(err)
			}
			continue
		}
		if f&c.model.FlagMask == 0 {
			c.lo = later(c.lo, t0)
			if deadline := c.progress.Add(3 * c.set.Period); !t1.Before(deadline) {
				return drivers.Sample{}, c.stalled(t1)
			}
			if c.set.Poll > 0 {
				if err := c.clock.Sleep(ctx, c.set.Poll); err != nil {
					return drivers.Sample{}, err
				}
			}
			continue
		}
		c.progress = later(c.progress, t1) // the chip is converting
		s, ok, err := c.take(t0, t1)
		if err != nil {
			return drivers.Sample{}, c.fail(err)
		}
		if ok {
			return s, nil
		}
	}
}

// take reads the conversion whose flag a read in [t0, t1] saw set, and
// places it. It reports false when the conversion was dropped because the
// chip had lost its settings (now restored).
func (c *Chip) take(t0, t1 time.Time) (drivers.Sample, bool, error) {
	lo, hi := c.lo, t1
	consumed := t0 // start of the read that cleared the flag
	torn := false
	var r Raw
	for attempt := 0; ; attempt++ {
		if attempt == maxAttempts {
			c.chain = false
			return drivers.Sample{}, false, fmt.Errorf("%s: a newer conversion latched during each of %d reads of the results: the bus is too slow for a %v period", c.name, maxAttempts, c.set.Period)
		}
		if c.model.HasConsume {
			ts := c.clock.Now()
			v, err := c.read(c.model.Consume)
			if err != nil {
				return drivers.Sample{}, false, err
			}
			r.set(c.model.Consume, v)
			consumed, hi = ts, c.clock.Now()
		}
		for _, reg := range c.model.Results {
			if reg == RegBus && c.set.ShuntOnly {
				continue // the bus is bracketed, not converted
			}
			v, err := c.read(reg)
			if err != nil {
				return drivers.Sample{}, false, err
			}
			r.set(reg, v)
		}
		vs := c.clock.Now()
		v, err := c.read(c.model.FlagReg)
		ve := c.clock.Now()
		if err != nil {
			return drivers.Sample{}, false, err
		}
		r.Flags = v
		if c.model.FlagReg == RegBus {
			r.Bus = v
		}
		if v&c.model.FlagMask == 0 {
			c.lo = vs
			break
		}
		// A newer conversion latched after the flag was cleared: what was
		// read may mix the two. That one ended after the clearing read
		// began and before this read ended; read it instead.
		torn = true
		lo, hi, consumed = later(consumed, c.lo), ve, vs
	}

	shunt, cur := int64(int16(r.Shunt)), int64(int16(r.Current))
	ovf := r.Flags&c.model.OVFMask != 0
	mismatch := !ovf && abs(cur-shunt*int64(c.set.Cal)/c.model.CalDiv) > 1

	// Place the conversion's end. The flag says [lo, hi]. The chip
	// converts without pause, so the conversion latched when the flag was
	// consumed ended less than a long period before that read began, and
	// no earlier than a short period after the last one. If the timing
	// proves it is the very next conversion, it starts where the last one
	// ended; if that period was also within the clock's tolerance, the
	// reading chains, and the end lies within a short and a long period of
	// the last one's.
	L, H := later(lo, consumed.Add(-c.tmax)), hi
	if x := c.prevLo.Add(c.tmin); x.After(L) && !x.After(H) {
		L = x
	}
	next := !torn && H.Before(c.prevLo.Add(2*c.tmin))
	contiguous := c.chain && next
	if contiguous {
		cl, ch := later(L, c.prevLo.Add(c.tmin)), earlier(H, c.prevHi.Add(c.tmax))
		if ch.Before(cl) {
			contiguous = false // the period is beyond the chip's clock tolerance
		} else {
			L, H = cl, ch
		}
	}
	if mismatch || (c.chain && !contiguous) {
		restored, err := c.restoreIfReset()
		if err != nil {
			return drivers.Sample{}, false, err
		}
		if restored {
			return drivers.Sample{}, false, nil
		}
	}

	w := H.Sub(L)
	uEnd := w - w/2
	s := drivers.Sample{End: L.Add(w / 2), Contiguous: contiguous, Dead: c.set.Dead}
	if next {
		s.Start, s.Uncertainty = c.prevEnd, max(uEnd, c.prevU)
	} else {
		tol := c.set.Period - c.tmin
		s.Start, s.Uncertainty = s.End.Add(-c.set.Period), uEnd+tol
	}
	c.decode(&s, r, shunt, cur, ovf)
	c.prevLo, c.prevHi, c.prevEnd, c.prevU = L, H, s.End, uEnd
	c.chain = true
	c.progress = H
	return s, true, nil
}

// decode fills s's quantities from the registers. Power is computed from
// the current and bus registers exactly as the chip's own multiply does, so
// it belongs to the same conversion as they do.
func (c *Chip) decode(s *drivers.Sample, r Raw, shunt, cur int64, ovf bool) {
	m := c.model
	bus := int64(r.Bus >> m.BusShift)
	if c.set.ShuntOnly {
		bus = int64(c.busCounts >> m.BusShift)
	}
	pow := abs(cur) * bus / m.PowerDiv
	if pow > 0xFFFF {
		pow, ovf = 0xFFFF, true
	}
	den := int64(c.set.Cal) * c.set.ShuntMicroOhms
	s.Shunt = physic.ElectricPotential(shunt) * m.ShuntLSB
	s.Bus = physic.ElectricPotential(bus) * m.BusLSB
	s.Current = physic.ElectricCurrent(MulDiv(cur, m.CalNum, den))
	s.Power = physic.Power(MulDiv(pow*m.PowerRatio, m.CalNum, den))
	if cur < 0 {
		s.Power = -s.Power
	}
	maxI := physic.ElectricCurrent(c.set.MaxCurrentUA) * physic.MicroAmpere
	s.Overflow = ovf || shunt >= c.set.ShuntMax || shunt <= c.set.ShuntMin ||
		s.Current > maxI || s.Current < -maxI || c.busOut
}

// stalled handles a chip that produced no conversion for three long
// periods: it reads the settings back, reprograms a chip that lost them
// (powered down, or reset), and says what it found. The stall clock starts
// over, so a dead chip gives one error every three periods.
func (c *Chip) stalled(now time.Time) error {
	since := now.Sub(c.progress)
	c.chain = false
	c.progress = now
	cfg, err := c.read(RegConfig)
	if err != nil {
		return fmt.Errorf("%s: no conversion for %v, and reading the configuration back failed: %w", c.name, since, errors.Join(drivers.ErrStalled, err))
	}
	cal, err := c.read(RegCal)
	if err != nil {
		return fmt.Errorf("%s: no conversion for %v, and reading the calibration back failed: %w", c.name, since, errors.Join(drivers.ErrStalled, err))
	}
	if cfg == c.set.Config && cal == c.set.Cal {
		return fmt.Errorf("%s: no conversion for %v with its settings intact (the chip's clock stopped?): %w", c.name, since, drivers.ErrStalled)
	}
	state := "lost its settings"
	if cfg&ModeMask&3 == 0 {
		state = "powered down"
	}
	if err := c.program(); err != nil {
		return fmt.Errorf("%s: no conversion for %v: found config 0x%04x (%s), calibration %d; reprogramming failed: %w", c.name, since, cfg, state, cal, errors.Join(drivers.ErrStalled, err))
	}
	c.resets.Add(1)
	c.progress = c.clock.Now()
	return fmt.Errorf("%s: no conversion for %v: found config 0x%04x (%s), calibration %d; reprogrammed: %w", c.name, since, cfg, state, cal, drivers.ErrStalled)
}

// measureBus brackets the bus voltage in shunt-only mode: one triggered
// bus conversion, then back to shunt-only. Both configuration writes
// restart the cycle, so the next reading does not chain. A measurement
// beyond the declared tolerance of the first makes readings overflow until
// one is back within it.
func (c *Chip) measureBus(ctx context.Context) error {
	at := c.clock.Now()
	if err := c.write(RegConfig, c.set.BusConfig); err != nil {
		return fmt.Errorf("bus measurement: %w", err)
	}
	c.restart(at, c.clock.Now())
	busMax := c.set.BusTime + c.set.BusTime/10
	if err := c.clock.Sleep(ctx, c.set.BusTime-c.set.BusTime/10); err != nil {
		return err
	}
	var f uint16
	for {
		var err error
		if f, err = c.read(c.model.FlagReg); err != nil {
			return fmt.Errorf("bus measurement: %w", err)
		}
		if f&c.model.FlagMask != 0 {
			break
		}
		if c.clock.Now().Sub(at) > 3*busMax {
			return fmt.Errorf("%s: the triggered bus conversion did not complete within %v: %w", c.name, 3*busMax, drivers.ErrStalled)
		}
		if err := c.clock.Sleep(ctx, max(c.set.Poll, busMax/10)); err != nil {
			return err
		}
	}
	bus := f
	if c.model.FlagReg != RegBus {
		var err error
		if bus, err = c.read(RegBus); err != nil {
			return fmt.Errorf("bus measurement: %w", err)
		}
	}
	if c.model.HasConsume {
		if _, err := c.read(c.model.Consume); err != nil {
			return fmt.Errorf("bus measurement: %w", err)
		}
	}
	at = c.clock.Now()
	if err := c.write(RegConfig, c.set.Config); err != nil {
		return fmt.Errorf("bus measurement: %w", err)
	}
	c.restart(at, c.clock.Now())
	first := c.busAt.IsZero()
	c.busCounts, c.busAt = bus&^(1<<c.model.BusShift-1), c.clock.Now()
	if first {
		c.busRef = c.busCounts
	}
	ref, got := float64(c.busRef>>c.model.BusShift), float64(c.busCounts>>c.model.BusShift)
	c.busOut = got > ref*(1+c.set.BusTolerance) || got < ref*(1-c.set.BusTolerance)
	return nil
}

// Close stops reading; the chip is left converting so that another reader
// (or the kernel) is not surprised.
func (c *Chip) Close() error {
	if c.closed {
		return errors.New(c.name + ": already closed")
	}
	c.closed = true
	return nil
}

func abs(x int64) int64 { return max(x, -x) }

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
