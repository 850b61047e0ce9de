package inareg

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"meshd/drivers"

	"periph.io/x/conn/v3/i2c"
)

// Model is what the shared code needs to know of one chip type.
type Model struct {
	// Name is the chip's name in errors and default sensor names, e.g.
	// "ina226".
	Name string
	// FlagReg holds the conversion-ready flag; FlagMask selects it.
	FlagReg  byte
	FlagMask uint16
	// Results are the registers read once the flag is seen, in that order.
	// They must include RegCurrent (a zero current triggers the reset
	// check), and the read that clears the flag should come last so that a
	// failed read leaves the conversion pending.
	Results []byte
	// CalNum is the calibration constant with Current_LSB in nA and R in
	// µΩ: CAL = CalNum / (Current_LSB × R), so one current count is
	// CalNum / (1000 × CAL × R) µA.
	CalNum int64
	// MaxCal is the largest value the calibration register holds.
	MaxCal int64
	// PowerRatio is Power_LSB / Current_LSB.
	PowerRatio int64
}

// CheckBoard refuses a shunt or maximum current that is not positive.
func (m Model) CheckBoard(shuntMicroOhms, maxCurrentUA int64) error {
	if shuntMicroOhms <= 0 {
		return fmt.Errorf("%s: shunt resistance must be positive, got %d µΩ", m.Name, shuntMicroOhms)
	}
	if maxCurrentUA <= 0 {
		return fmt.Errorf("%s: maximum current must be positive, got %d µA", m.Name, maxCurrentUA)
	}
	return nil
}

// CurrentLSB returns fixedNanoAmps, or when that is 0 derives Current_LSB
// as maxCurrentUA / 32767 rounded up to a whole nA, and refuses an LSB
// that cannot represent maxCurrentUA in the signed 16-bit current register.
// The board must have passed CheckBoard.
func (m Model) CurrentLSB(shuntMicroOhms, maxCurrentUA, fixedNanoAmps int64) (int64, error) {
	lsb := fixedNanoAmps
	if lsb == 0 {
		lsb = (maxCurrentUA*1000 + 32766) / 32767
		// A small full-scale drop asks for a calibration beyond the
		// register; the coarsest LSB that fits loses nothing the shunt ADC
		// could resolve.
		lsb = max(lsb, (m.CalNum+m.MaxCal*shuntMicroOhms-1)/(m.MaxCal*shuntMicroOhms))
	}
	if lsb*32767 < maxCurrentUA*1000 {
		return 0, fmt.Errorf("%s: Current_LSB %d nA cannot represent %d µA in the 16-bit current register", m.Name, lsb, maxCurrentUA)
	}
	return lsb, nil
}

// Settings are the register values and timing one configuration derives.
type Settings struct {
	Config, Cal    uint16
	ShuntMicroOhms int64
	// Period is the typical time one conversion takes.
	Period time.Duration
	// Poll is how often Next reads the ready flag; 0 means a quarter of
	// Period, at least 50 µs.
	Poll time.Duration
}

// Chip is one open INA chip. Next and Close must not be called from several
// goroutines at once; Resets may be.
type Chip struct {
	dev     i2c.Dev
	name    string
	model   Model
	set     Settings
	curNum  int64 // µA × CAL × R per current count
	curDen  int64 // CAL × R
	resets  atomic.Uint64
	suspect bool // a bus error may have hidden a reset
	closed  bool
}

// New makes the Chip for addr on bus without touching it. An empty name
// means "<model>@<bus>:0x<addr>".
func New(m Model, bus i2c.Bus, addr uint16, name string, s Settings) *Chip {
	if name == "" {
		name = fmt.Sprintf("%s@%s:0x%02x", m.Name, bus, addr)
	}
	if s.Poll <= 0 {
		s.Poll = max(s.Period/4, 50*time.Microsecond)
	}
	return &Chip{
		dev:    i2c.Dev{Bus: bus, Addr: addr},
		name:   name,
		model:  m,
		set:    s,
		curNum: m.CalNum / 1000,
		curDen: int64(s.Cal) * s.ShuntMicroOhms,
	}
}

// Name is the sensor name.
func (c *Chip) Name() string { return c.name }

// Period is the typical time one conversion takes.
func (c *Chip) Period() time.Duration { return c.set.Period }

// Calibration is the calibration register value programmed.
func (c *Chip) Calibration() uint16 { return c.set.Cal }

// Resets counts the spontaneous chip resets detected and repaired.
func (c *Chip) Resets() uint64 { return c.resets.Load() }

// CurrentLSBNanoAmps is the current register LSB, in nA, as the truncated
// calibration makes it.
func (c *Chip) CurrentLSBNanoAmps() float64 {
	return 1000 * float64(c.curNum) / float64(c.curDen)
}

// PowerLSBMicroWatts is the power register LSB, in µW.
func (c *Chip) PowerLSBMicroWatts() float64 {
	return float64(c.model.PowerRatio) * float64(c.curNum) / float64(c.curDen)
}

// Reset sets the RST bit, returning every register to its power-on value.
func (c *Chip) Reset() error {
	if err := Write(&c.dev, RegConfig, ConfigReset); err != nil {
		return fmt.Errorf("%s: reset: %w", c.name, err)
	}
	return nil
}

// Program writes Config and Calibration and checks that both read back.
func (c *Chip) Program() error {
	if err := c.write(); err != nil {
		return err
	}
	ok, err := c.intact()
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%s: configuration 0x%04x / calibration %d did not read back", c.name, c.set.Config, c.set.Cal)
	}
	return nil
}

func (c *Chip) write() error {
	if err := Write(&c.dev, RegConfig, c.set.Config); err != nil {
		return fmt.Errorf("%s: write config: %w", c.name, err)
	}
	if err := Write(&c.dev, RegCal, c.set.Cal); err != nil {
		return fmt.Errorf("%s: write calibration: %w", c.name, err)
	}
	return nil
}

func (c *Chip) intact() (bool, error) {
	cfg, err := Read(&c.dev, RegConfig)
	if err != nil {
		return false, fmt.Errorf("%s: %w", c.name, err)
	}
	cal, err := Read(&c.dev, RegCal)
	if err != nil {
		return false, fmt.Errorf("%s: %w", c.name, err)
	}
	return cfg == c.set.Config && cal == c.set.Cal, nil
}

// restoreIfReset rewrites Config and Calibration when the chip lost them
// (a brown-out brings back the power-on configuration and a zero
// calibration); it reports whether it had to.
func (c *Chip) restoreIfReset() (bool, error) {
	ok, err := c.intact()
	if err != nil || ok {
		return false, err
	}
	if err := c.write(); err != nil {
		return false, err
	}
	c.resets.Add(1)
	return true, nil
}

// Raw is one conversion as read from the chip.
type Raw struct {
	// At is when the ready flag was seen.
	At time.Time
	// Flags is the register that holds the ready flag, as read.
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

// Next polls the ready flag and returns the conversion it announces.
// Whenever the current reads 0 it checks the settings, and a conversion
// made after a self-reset is dropped once the settings are restored, so no
// conversion computed with a lost calibration gets out. A bus error is
// returned wrapped; the next call first checks the settings.
func (c *Chip) Next(ctx context.Context) (Raw, error) {
	if c.closed {
		return Raw{}, fmt.Errorf("%s: closed", c.name)
	}
	if c.suspect {
		if _, err := c.restoreIfReset(); err != nil {
			return Raw{}, err
		}
		c.suspect = false
	}
	for {
		if err := ctx.Err(); err != nil {
			return Raw{}, err
		}
		flags, err := Read(&c.dev, c.model.FlagReg)
		if err != nil {
			c.suspect = true
			return Raw{}, fmt.Errorf("%s: %w", c.name, err)
		}
		if flags&c.model.FlagMask == 0 {
			if err := Sleep(ctx, c.set.Poll); err != nil {
				return Raw{}, err
			}
			continue
		}
		r := Raw{At: time.Now(), Flags: flags}
		r.set(c.model.FlagReg, flags)
		for _, reg := range c.model.Results {
			v, err := Read(&c.dev, reg)
			if err != nil {
				c.suspect = true
				return Raw{}, fmt.Errorf("%s: %w", c.name, err)
			}
			r.set(reg, v)
		}
		if r.Current == 0 {
			restored, err := c.restoreIfReset()
			if err != nil {
				c.suspect = true
				return Raw{}, err
			}
			if restored {
				continue
			}
		}
		return r, nil
	}
}

// Sample turns r's current and power registers into µA and µW and stamps
// it; the caller adds the voltages, whose LSBs are the chip's own, and the
// overflow. PowerUW carries the sign of the current: the power register
// itself is unsigned.
func (c *Chip) Sample(r Raw) drivers.Sample {
	cur, pow := int64(int16(r.Current)), int64(r.Power)
	s := drivers.Sample{
		At:        r.At,
		Averaged:  c.set.Period,
		CurrentUA: RoundDiv(cur*c.curNum, c.curDen),
		PowerUW:   RoundDiv(pow*c.model.PowerRatio*c.curNum, c.curDen),
	}
	if cur < 0 {
		s.PowerUW = -s.PowerUW
	}
	return s
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
