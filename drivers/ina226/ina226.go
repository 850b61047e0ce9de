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
	"fmt"
	"time"

	"meshd/drivers"
	"meshd/drivers/internal/inareg"

	"periph.io/x/conn/v3/i2c"
)

// Registers of the INA226 alone (SBOS547 §7.6); the others are inareg's.
const (
	regMask  = 0x06
	regMfrID = 0xFE
	regDieID = 0xFF

	mfrTI      = 0x5449 // "TI"
	dieINA226  = 0x226  // Die ID bits 15..4; bits 3..0 are the revision
	cfgFixed   = 0x4000 // bit 14 reads back as 1
	cfgPowerOn = 0x4127
	modeCont   = 0x7 // shunt and bus, continuous
	maskCVRF   = 1 << 3
	maskOVF    = 1 << 2
	maxCal     = 0x7FFF

	// CAL = 0.00512 / (Current_LSB × R); with the LSB in nA and R in µΩ
	// the constant becomes 5.12e12.
	calNum     = 5_120_000_000_000
	powerRatio = 25 // Power_LSB = 25 × Current_LSB

	// Full-scale shunt input is ±81.92 mV = 81.92e9 pV (µA × µΩ).
	shuntFSpV = 81_920_000_000
)

// model reads the result registers once Mask/Enable shows CVRF; reading
// Mask/Enable is what clears the flag.
func model() inareg.Model {
	return inareg.Model{
		Name:       "ina226",
		FlagReg:    regMask,
		FlagMask:   maskCVRF,
		Results:    []byte{inareg.RegShunt, inareg.RegBus, inareg.RegCurrent, inareg.RegPower},
		CalNum:     calNum,
		MaxCal:     maxCal,
		PowerRatio: powerRatio,
	}
}

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
	chip     *inareg.Chip
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
	b, sh, err := inareg.ReadVoltages(bus, addr, "ina226")
	if err != nil {
		return 0, 0, err
	}
	return int64(b) * 1250, int64(int16(sh)) * 2500, nil
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
func configure(m inareg.Model, cfg Config) (inareg.Settings, error) {
	if err := m.CheckBoard(cfg.ShuntMicroOhms, cfg.MaxCurrentUA); err != nil {
		return inareg.Settings{}, err
	}
	if cfg.MaxCurrentUA > shuntFSpV/cfg.ShuntMicroOhms {
		return inareg.Settings{}, fmt.Errorf("ina226: %d µA through %d µΩ exceeds the ±81.92 mV shunt input range", cfg.MaxCurrentUA, cfg.ShuntMicroOhms)
	}
	lsb, err := m.CurrentLSB(cfg.ShuntMicroOhms, cfg.MaxCurrentUA, cfg.CurrentLSBNanoAmps)
	if err != nil {
		return inareg.Settings{}, err
	}
	cal, err := Calibration(cfg.ShuntMicroOhms, lsb)
	if err != nil {
		return inareg.Settings{}, err
	}
	avg, err := code(Averages, cfg.Averages, 2, "averages")
	if err != nil {
		return inareg.Settings{}, err
	}
	vbus, err := code(ConvTimes, cfg.BusConvTime, 4, "bus conversion time")
	if err != nil {
		return inareg.Settings{}, err
	}
	vsh, err := code(ConvTimes, cfg.ShuntConvTime, 4, "shunt conversion time")
	if err != nil {
		return inareg.Settings{}, err
	}
	return inareg.Settings{
		Config:         cfgFixed | avg<<9 | vbus<<6 | vsh<<3 | modeCont,
		Cal:            cal,
		ShuntMicroOhms: cfg.ShuntMicroOhms,
		Period:         time.Duration(Averages[avg]) * (ConvTimes[vbus] + ConvTimes[vsh]),
		Poll:           cfg.PollInterval,
	}, nil
}

// accuracy is the SBOS547 worst case at 25 °C: shunt gain error 0.1 % and
// bus gain error 0.1 %; shunt offset 10 µV seen as power at the bus
// voltage; bus offset 7.5 mV at the maximum current; and the power
// register's truncation to one Power_LSB.
func accuracy(cfg Config, powerLSBUW float64) drivers.Accuracy {
	r := float64(cfg.ShuntMicroOhms)
	busOffUW := 7500 * float64(cfg.MaxCurrentUA) / 1e6
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
	m := model()
	set, err := configure(m, cfg)
	if err != nil {
		return nil, err
	}
	if err := Probe(bus, addr); err != nil {
		return nil, err
	}
	c := inareg.New(m, bus, addr, cfg.Name, set)
	if err := c.Reset(); err != nil {
		return nil, err
	}
	if err := c.Program(); err != nil {
		return nil, err
	}
	return &Dev{chip: c, accuracy: accuracy(cfg, c.PowerLSBMicroWatts())}, nil
}

// Name implements drivers.Sensor.
func (d *Dev) Name() string { return d.chip.Name() }

// UpdatePeriod is AVG × (VBUSCT + VSHCT), typical conversion times.
func (d *Dev) UpdatePeriod() time.Duration { return d.chip.Period() }

// Accuracy implements drivers.Sensor.
func (d *Dev) Accuracy() drivers.Accuracy { return d.accuracy }

// Calibration returns the programmed CAL register value.
func (d *Dev) Calibration() uint16 { return d.chip.Calibration() }

// CurrentLSBNanoAmps is the effective current register LSB, in nA, as the
// truncated calibration makes it (0.00512 / (CAL × R)).
func (d *Dev) CurrentLSBNanoAmps() float64 { return d.chip.CurrentLSBNanoAmps() }

// Resets counts the spontaneous chip resets detected and repaired.
func (d *Dev) Resets() uint64 { return d.chip.Resets() }

// Next waits for the conversion-ready flag and returns that conversion.
// Reading Mask/Enable clears the flag, so each conversion is returned at
// most once; polling at a fraction of the update period keeps the chip from
// completing two conversions between reads. A bus error is returned as is;
// the next call first checks the chip's settings. Sample.Overflow is set
// when the chip flags a math overflow (OVF) or the shunt input sits at full
// scale. PowerUW carries the sign of the current: the power register itself
// is unsigned.
func (d *Dev) Next(ctx context.Context) (drivers.Sample, error) {
	r, err := d.chip.Next(ctx)
	if err != nil {
		return drivers.Sample{}, err
	}
	s := d.chip.Sample(r)
	shunt := int64(int16(r.Shunt))
	s.BusUV = int64(r.Bus) * 1250
	s.ShuntNV = shunt * 2500
	s.Overflow = r.Flags&maskOVF != 0 || shunt == 32767 || shunt == -32768
	return s, nil
}

// Close stops the driver; the chip is left converting so that another
// reader (or the kernel) is not surprised.
func (d *Dev) Close() error { return d.chip.Close() }

var _ drivers.Sensor = (*Dev)(nil)
