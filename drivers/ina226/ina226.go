// Package ina226 drives a TI INA226 current/power monitor (SBOS547) on an
// I²C bus: it identifies the chip, programs averaging, conversion times and
// the calibration register, and hands out each conversion exactly once by
// following the conversion-ready flag.
//
// The package takes an i2c.Bus and an address; opening a real bus (for
// example with periph.io/x/host/v3 and i2creg.Open) is the caller's job.
//
// Self-reset: a chip that browns out comes back with its power-on
// configuration and a zero calibration register, after which the current and
// power registers read 0. Whenever a conversion's current register reads 0,
// and after any bus error, the driver reads Config and Calibration back; if
// either differs from what it programmed it rewrites both, drops the
// conversion made under the wrong settings, counts the event (Resets) and
// waits for the next conversion. Next never returns a sample computed with a
// lost calibration.
package ina226

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"meshd/drivers"
	"meshd/drivers/internal/inareg"

	"periph.io/x/conn/v3/i2c"
)

// Register map (SBOS547 §7.6).
const (
	regConfig  = 0x00
	regShunt   = 0x01
	regBus     = 0x02
	regPower   = 0x03
	regCurrent = 0x04
	regCal     = 0x05
	regMask    = 0x06
	regMfrID   = 0xFE
	regDieID   = 0xFF

	mfrTI      = 0x5449 // "TI"
	dieINA226  = 0x226  // Die ID bits 15..4; bits 3..0 are the revision
	cfgReset   = 0x8000
	cfgFixed   = 0x4000 // bit 14 reads back as 1
	cfgPowerOn = 0x4127
	modeCont   = 0x7 // shunt and bus, continuous
	maskCVRF   = 1 << 3
	maskOVF    = 1 << 2
	maxCal     = 0x7FFF

	// CAL = 0.00512 / (Current_LSB × R); with the LSB in nA and R in µΩ
	// the constant becomes 5.12e12, and one current count is
	// 5.12e9 / (CAL × R) µA.
	calNum     = 5_120_000_000_000
	curNumUA   = 5_120_000_000
	powerRatio = 25 // Power_LSB = 25 × Current_LSB

	// Full-scale shunt input is ±81.92 mV = 81.92e9 pV (µA × µΩ).
	shuntFSpV = 81_920_000_000
)

// Averages are the sample counts the AVG field can select, by code.
var Averages = [8]int{1, 4, 16, 64, 128, 256, 512, 1024}

// ConvTimes are the conversion times VBUSCT and VSHCT can select, by code
// (typical values; the datasheet allows about 10 % more).
var ConvTimes = [8]time.Duration{
	140 * time.Microsecond, 204 * time.Microsecond, 332 * time.Microsecond,
	588 * time.Microsecond, 1100 * time.Microsecond, 2116 * time.Microsecond,
	4156 * time.Microsecond, 8244 * time.Microsecond,
}

// Config is what the caller knows about the board and wants of the chip.
type Config struct {
	// ShuntMicroOhms is the shunt resistance in µΩ (2 mΩ = 2000). Required.
	ShuntMicroOhms int64
	// MaxCurrentUA is the largest current expected, in µA. Required: it
	// bounds the shunt input range and, unless CurrentLSBNanoAmps is set,
	// sets Current_LSB = MaxCurrent / 32767 (the largest positive
	// count), rounded up to a whole nA, or coarser where that calibration
	// would not fit the register.
	MaxCurrentUA int64
	// CurrentLSBNanoAmps optionally fixes Current_LSB (in nA), e.g.
	// 1_000_000 for the round 1 mA of the datasheet example.
	CurrentLSBNanoAmps int64
	// Averages is the AVG sample count (one of Averages); 0 means 16.
	Averages int
	// BusConvTime and ShuntConvTime are VBUSCT and VSHCT (one of
	// ConvTimes); 0 means 1.1 ms.
	BusConvTime, ShuntConvTime time.Duration
	// PollInterval is how often Next reads the ready flag; 0 means a
	// quarter of the update period.
	PollInterval time.Duration
	// Name overrides the sensor name; empty means "ina226@<bus>:0x<addr>".
	Name string
}

// Dev is an open INA226. Next must not be called from several goroutines
// at once; Resets may be.
type Dev struct {
	dev      i2c.Dev
	name     string
	cfg      Config
	config   uint16
	cal      uint16
	period   time.Duration
	poll     time.Duration
	curDen   int64 // CAL × R, the divisor of one current count in µA
	resets   atomic.Uint64
	suspect  bool
	closed   bool
	accuracy drivers.Accuracy
}

// Probe checks for an INA226 at addr by its manufacturer and die IDs. It
// changes nothing on the chip. A device that answers with other IDs gives
// an error wrapping drivers.ErrNoDevice.
func Probe(bus i2c.Bus, addr uint16) error {
	d := &i2c.Dev{Bus: bus, Addr: addr}
	mfr, err := inareg.Read(d, regMfrID)
	if err != nil {
		return fmt.Errorf("ina226 at 0x%02x: %w", addr, err)
	}
	die, err := inareg.Read(d, regDieID)
	if err != nil {
		return fmt.Errorf("ina226 at 0x%02x: %w", addr, err)
	}
	if mfr != mfrTI || die>>4 != dieINA226 {
		return fmt.Errorf("ina226 at 0x%02x: manufacturer id 0x%04x, die id 0x%04x: %w", addr, mfr, die, drivers.ErrNoDevice)
	}
	return nil
}

// ReadVoltages reads the latched bus (µV) and shunt (nV) voltages without
// configuring the chip; it needs no calibration.
func ReadVoltages(bus i2c.Bus, addr uint16) (busUV, shuntNV int64, err error) {
	d := &i2c.Dev{Bus: bus, Addr: addr}
	s, err := inareg.Read(d, regShunt)
	if err != nil {
		return 0, 0, fmt.Errorf("ina226 at 0x%02x: %w", addr, err)
	}
	b, err := inareg.Read(d, regBus)
	if err != nil {
		return 0, 0, fmt.Errorf("ina226 at 0x%02x: %w", addr, err)
	}
	return int64(b) * 1250, int64(int16(s)) * 2500, nil
}

// Calibration returns the CAL register value for a shunt of rMicroOhms and
// a Current_LSB of lsbNanoAmps: trunc(0.00512 / (Current_LSB × R)). It
// refuses values that do not fit the 15-bit register or truncate to 0.
func Calibration(rMicroOhms, lsbNanoAmps int64) (uint16, error) {
	if rMicroOhms <= 0 || lsbNanoAmps <= 0 {
		return 0, fmt.Errorf("ina226: calibration needs positive shunt (%d µΩ) and Current_LSB (%d nA)", rMicroOhms, lsbNanoAmps)
	}
	cal := calNum / (lsbNanoAmps * rMicroOhms)
	if cal > maxCal {
		return 0, fmt.Errorf("ina226: calibration %d for %d µΩ and Current_LSB %d nA overflows the 15-bit register (max %d): choose a larger Current_LSB", cal, rMicroOhms, lsbNanoAmps, maxCal)
	}
	if cal == 0 {
		return 0, fmt.Errorf("ina226: calibration for %d µΩ and Current_LSB %d nA truncates to 0: choose a smaller Current_LSB", rMicroOhms, lsbNanoAmps)
	}
	return uint16(cal), nil
}

func code[T comparable](table [8]T, v T, def int, what string) (uint16, error) {
	var zero T
	if v == zero {
		return uint16(def), nil
	}
	for i, t := range table {
		if t == v {
			return uint16(i), nil
		}
	}
	return 0, fmt.Errorf("ina226: %s %v is not one of %v", what, v, table)
}

// configure validates cfg and derives the register values.
func (d *Dev) configure(cfg Config) error {
	if cfg.ShuntMicroOhms <= 0 {
		return fmt.Errorf("ina226: shunt resistance must be positive, got %d µΩ", cfg.ShuntMicroOhms)
	}
	if cfg.MaxCurrentUA <= 0 {
		return fmt.Errorf("ina226: maximum current must be positive, got %d µA", cfg.MaxCurrentUA)
	}
	if cfg.MaxCurrentUA > shuntFSpV/cfg.ShuntMicroOhms {
		return fmt.Errorf("ina226: %d µA through %d µΩ exceeds the ±81.92 mV shunt input range", cfg.MaxCurrentUA, cfg.ShuntMicroOhms)
	}
	lsb := cfg.CurrentLSBNanoAmps
	if lsb == 0 {
		lsb = (cfg.MaxCurrentUA*1000 + 32766) / 32767
		// A small full-scale drop asks for a calibration beyond the
		// register; the coarsest LSB that fits loses nothing the shunt ADC
		// could resolve.
		lsb = max(lsb, (calNum+maxCal*cfg.ShuntMicroOhms-1)/(maxCal*cfg.ShuntMicroOhms))
	}
	if lsb*32767 < cfg.MaxCurrentUA*1000 {
		return fmt.Errorf("ina226: Current_LSB %d nA cannot represent %d µA in the 16-bit current register", lsb, cfg.MaxCurrentUA)
	}
	cal, err := Calibration(cfg.ShuntMicroOhms, lsb)
	if err != nil {
		return err
	}
	avg, err := code(Averages, cfg.Averages, 2, "averages")
	if err != nil {
		return err
	}
	vbus, err := code(ConvTimes, cfg.BusConvTime, 4, "bus conversion time")
	if err != nil {
		return err
	}
	vsh, err := code(ConvTimes, cfg.ShuntConvTime, 4, "shunt conversion time")
	if err != nil {
		return err
	}
	d.cfg = cfg
	d.cal = cal
	d.config = cfgFixed | avg<<9 | vbus<<6 | vsh<<3 | modeCont
	d.period = time.Duration(Averages[avg]) * (ConvTimes[vbus] + ConvTimes[vsh])
	d.poll = cfg.PollInterval
	if d.poll <= 0 {
		d.poll = max(d.period/4, 50*time.Microsecond)
	}
	d.curDen = int64(cal) * cfg.ShuntMicroOhms
	d.accuracy = accuracy(cfg, d.curDen)
	return nil
}

// accuracy is the SBOS547 worst case at 25 °C: shunt gain error 0.1 % and
// bus gain error 0.1 %; shunt offset 10 µV seen as power at the bus
// voltage; bus offset 7.5 mV at the maximum current; and the power
// register's truncation to one Power_LSB.
func accuracy(cfg Config, curDen int64) drivers.Accuracy {
	r := float64(cfg.ShuntMicroOhms)
	busOffUW := 7500 * float64(cfg.MaxCurrentUA) / 1e6
	powerLSBUW := powerRatio * float64(curNumUA) / float64(curDen)
	return drivers.Accuracy{
		GainErr: 0.001 + 0.001,
		OffsetUW: func(busUV int64) float64 {
			if busUV < 0 {
				busUV = -busUV
			}
			return float64(busUV)*10/r + busOffUW + powerLSBUW
		},
	}
}

// Open identifies the INA226 at addr, resets it, programs cfg in
// continuous shunt-and-bus mode and checks that the settings read back.
func Open(bus i2c.Bus, addr uint16, cfg Config) (*Dev, error) {
	d := &Dev{dev: i2c.Dev{Bus: bus, Addr: addr}}
	if err := d.configure(cfg); err != nil {
		return nil, err
	}
	d.name = cfg.Name
	if d.name == "" {
		d.name = fmt.Sprintf("ina226@%s:0x%02x", bus, addr)
	}
	if err := Probe(bus, addr); err != nil {
		return nil, err
	}
	if err := inareg.Write(&d.dev, regConfig, cfgReset); err != nil {
		return nil, fmt.Errorf("%s: reset: %w", d.name, err)
	}
	if err := d.program(); err != nil {
		return nil, err
	}
	ok, err := d.settingsIntact()
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%s: configuration 0x%04x / calibration %d did not read back", d.name, d.config, d.cal)
	}
	return d, nil
}

func (d *Dev) program() error {
	if err := inareg.Write(&d.dev, regConfig, d.config); err != nil {
		return fmt.Errorf("%s: write config: %w", d.name, err)
	}
	if err := inareg.Write(&d.dev, regCal, d.cal); err != nil {
		return fmt.Errorf("%s: write calibration: %w", d.name, err)
	}
	return nil
}

func (d *Dev) settingsIntact() (bool, error) {
	c, err := inareg.Read(&d.dev, regConfig)
	if err != nil {
		return false, fmt.Errorf("%s: %w", d.name, err)
	}
	cal, err := inareg.Read(&d.dev, regCal)
	if err != nil {
		return false, fmt.Errorf("%s: %w", d.name, err)
	}
	return c == d.config && cal == d.cal, nil
}

// restoreIfReset rewrites config and calibration when the chip lost them;
// it reports whether it had to.
func (d *Dev) restoreIfReset() (bool, error) {
	ok, err := d.settingsIntact()
	if err != nil {
		return false, err
	}
	if ok {
		return false, nil
	}
	if err := d.program(); err != nil {
		return false, err
	}
	d.resets.Add(1)
	return true, nil
}

// Name implements drivers.Sensor.
func (d *Dev) Name() string { return d.name }

// UpdatePeriod is AVG × (VBUSCT + VSHCT), typical conversion times.
func (d *Dev) UpdatePeriod() time.Duration { return d.period }

// Accuracy implements drivers.Sensor.
func (d *Dev) Accuracy() drivers.Accuracy { return d.accuracy }

// Calibration returns the programmed CAL register value.
func (d *Dev) Calibration() uint16 { return d.cal }

// CurrentLSBNanoAmps is the effective current register LSB, in nA, as the
// truncated calibration makes it (0.00512 / (CAL × R)).
func (d *Dev) CurrentLSBNanoAmps() float64 { return 1000 * float64(curNumUA) / float64(d.curDen) }

// Resets counts the spontaneous chip resets detected and repaired.
func (d *Dev) Resets() uint64 { return d.resets.Load() }

// Next waits for the conversion-ready flag and returns that conversion.
// Reading Mask/Enable clears the flag, so each conversion is returned at
// most once; polling at a fraction of the update period keeps the chip from
// completing two conversions between reads. A bus error is returned as is;
// the next call first checks the chip's settings. Sample.Overflow is set
// when the chip flags a math overflow (OVF) or the shunt input sits at full
// scale. PowerUW carries the sign of the current: the power register itself
// is unsigned.
func (d *Dev) Next(ctx context.Context) (drivers.Sample, error) {
	if d.closed {
		return drivers.Sample{}, fmt.Errorf("%s: closed", d.name)
	}
	if d.suspect {
		if _, err := d.restoreIfReset(); err != nil {
			return drivers.Sample{}, err
		}
		d.suspect = false
	}
	for {
		if err := ctx.Err(); err != nil {
			return drivers.Sample{}, err
		}
		mask, err := inareg.Read(&d.dev, regMask)
		if err != nil {
			d.suspect = true
			return drivers.Sample{}, fmt.Errorf("%s: %w", d.name, err)
		}
		if mask&maskCVRF == 0 {
			if err := inareg.Sleep(ctx, d.poll); err != nil {
				return drivers.Sample{}, err
			}
			continue
		}
		at := time.Now()
		var raw [4]uint16
		for i, reg := range [4]byte{regShunt, regBus, regCurrent, regPower} {
			if raw[i], err = inareg.Read(&d.dev, reg); err != nil {
				d.suspect = true
				return drivers.Sample{}, fmt.Errorf("%s: %w", d.name, err)
			}
		}
		shunt, bus, cur, pow := int64(int16(raw[0])), int64(raw[1]), int64(int16(raw[2])), int64(raw[3])
		if cur == 0 {
			restored, err := d.restoreIfReset()
			if err != nil {
				d.suspect = true
				return drivers.Sample{}, err
			}
			if restored {
				continue
			}
		}
		s := drivers.Sample{
			At:        at,
			Averaged:  d.period,
			BusUV:     bus * 1250,
			ShuntNV:   shunt * 2500,
			CurrentUA: inareg.RoundDiv(cur*curNumUA, d.curDen),
			PowerUW:   inareg.RoundDiv(pow*powerRatio*curNumUA, d.curDen),
			Overflow:  mask&maskOVF != 0 || shunt == 32767 || shunt == -32768,
		}
		if cur < 0 {
			s.PowerUW = -s.PowerUW
		}
		return s, nil
	}
}

// Close stops the driver; the chip is left converting so that another
// reader (or the kernel) is not surprised.
func (d *Dev) Close() error {
	if d.closed {
		return errors.New(d.name + ": already closed")
	}
	d.closed = true
	return nil
}

var _ drivers.Sensor = (*Dev)(nil)
