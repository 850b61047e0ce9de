// Package ina219 drives a TI INA219 current/power monitor (SBOS448) on an
// I²C bus: it identifies the chip (it has no ID registers: a reset must
// bring back the power-on configuration 0x399F), programs the ranges, ADC
// modes and calibration register, and hands out each conversion once by
// following the CNVR flag in the bus voltage register.
//
// The package takes an i2c.Bus and an address; opening a real bus is the
// caller's job.
//
// CNVR: the datasheet says reading Power clears it, some users report that
// reading the bus register does. Next reads the bus register first (to see
// the flag) and Power last, so either behaviour hands out each conversion
// once. Self-reset is handled as in package ina226: a conversion whose
// current reads 0 makes the driver read Config and Calibration back, and a
// chip found at its power-on settings is reprogrammed, the conversion
// dropped and the event counted (Resets).
package ina219

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

const (
	regConfig  = 0x00
	regShunt   = 0x01
	regBus     = 0x02
	regPower   = 0x03
	regCurrent = 0x04
	regCal     = 0x05

	cfgReset = 0x8000
	// PowerOnConfig is the configuration register after a reset: 32 V bus
	// range, ±320 mV shunt range, 12-bit ADCs, continuous conversion.
	PowerOnConfig = 0x399F
	modeCont      = 0x7
	busCNVR       = 1 << 1
	busOVF        = 1 << 0
	maxCal        = 0xFFFE // FS0 (bit 0) is void and reads 0

	// Cal = trunc(0.04096 / (Current_LSB × R)); with nA and µΩ the constant
	// is 4.096e13 and one current count is 4.096e10 / (CAL × R) µA.
	calNum     = 40_960_000_000_000
	curNumUA   = 40_960_000_000
	powerRatio = 20 // Power_LSB = 20 × Current_LSB
)

// ADC selects a BADC/SADC setting: a resolution for one sample, or a count
// of 12-bit samples averaged.
type ADC int

// The zero ADC means 12 bits, the power-on setting.
const (
	ADCDefault ADC = iota
	ADC9Bit
	ADC10Bit
	ADC11Bit
	ADC12Bit
	ADCAvg2
	ADCAvg4
	ADCAvg8
	ADCAvg16
	ADCAvg32
	ADCAvg64
	ADCAvg128
)

var adcCodes = map[ADC]struct {
	code uint16
	t    time.Duration
}{
	ADCDefault: {0x3, 532 * time.Microsecond},
	ADC9Bit:    {0x0, 84 * time.Microsecond},
	ADC10Bit:   {0x1, 148 * time.Microsecond},
	ADC11Bit:   {0x2, 276 * time.Microsecond},
	ADC12Bit:   {0x3, 532 * time.Microsecond},
	ADCAvg2:    {0x9, 1060 * time.Microsecond},
	ADCAvg4:    {0xA, 2130 * time.Microsecond},
	ADCAvg8:    {0xB, 4260 * time.Microsecond},
	ADCAvg16:   {0xC, 8510 * time.Microsecond},
	ADCAvg32:   {0xD, 17020 * time.Microsecond},
	ADCAvg64:   {0xE, 34050 * time.Microsecond},
	ADCAvg128:  {0xF, 68100 * time.Microsecond},
}

// shunt ranges by PG code, in mV, and the worst-case input offset of the
// INA219A at each (SBOS448 §7.5), in µV.
var (
	shuntRangesMV = [4]int64{40, 80, 160, 320}
	offsetUV      = [4]float64{100, 125, 150, 200}
)

// Config is what the caller knows about the board and wants of the chip.
type Config struct {
	// ShuntMicroOhms is the shunt resistance in µΩ (0.1 Ω = 100000). Required.
	ShuntMicroOhms int64
	// MaxCurrentUA is the largest current expected, in µA. Required.
	MaxCurrentUA int64
	// CurrentLSBNanoAmps optionally fixes Current_LSB in nA; 0 derives it
	// as MaxCurrent / 32767 rounded up, or coarser
	// where that calibration would not fit the register.
	CurrentLSBNanoAmps int64
	// BusRangeVolts is 16 or 32; 0 means 32.
	BusRangeVolts int
	// ShuntRangeMV is 40, 80, 160 or 320; 0 picks the smallest range that
	// holds MaxCurrent × R.
	ShuntRangeMV int64
	// BusADC and ShuntADC select resolution or averaging.
	BusADC, ShuntADC ADC
	// PollInterval is how often Next reads the flag; 0 means a quarter of
	// the update period.
	PollInterval time.Duration
	// Name overrides the sensor name; empty means "ina219@<bus>:0x<addr>".
	Name string
}

// Dev is an open INA219. Next must not be called from several goroutines
// at once; Resets may be.
type Dev struct {
	dev      i2c.Dev
	name     string
	config   uint16
	cal      uint16
	pg       uint16
	period   time.Duration
	poll     time.Duration
	curDen   int64
	resets   atomic.Uint64
	suspect  bool
	closed   bool
	accuracy drivers.Accuracy
}

// Probe resets the device at addr and checks that its configuration comes
// back as PowerOnConfig with a zero calibration, which is all an INA219
// offers to identify it. It is destructive: only call it on an address the
// operator says holds an INA219. A device that does not match gives an
// error wrapping drivers.ErrNoDevice.
func Probe(bus i2c.Bus, addr uint16) error {
	d := &i2c.Dev{Bus: bus, Addr: addr}
	if err := inareg.Write(d, regConfig, cfgReset); err != nil {
		return fmt.Errorf("ina219 at 0x%02x: reset: %w", addr, err)
	}
	c, err := inareg.Read(d, regConfig)
	if err != nil {
		return fmt.Errorf("ina219 at 0x%02x: %w", addr, err)
	}
	cal, err := inareg.Read(d, regCal)
	if err != nil {
		return fmt.Errorf("ina219 at 0x%02x: %w", addr, err)
	}
	if c != PowerOnConfig || cal != 0 {
		return fmt.Errorf("ina219 at 0x%02x: after reset config 0x%04x, calibration 0x%04x: %w", addr, c, cal, drivers.ErrNoDevice)
	}
	return nil
}

// ReadConfig reads the configuration register without changing anything.
func ReadConfig(bus i2c.Bus, addr uint16) (uint16, error) {
	v, err := inareg.Read(&i2c.Dev{Bus: bus, Addr: addr}, regConfig)
	if err != nil {
		return 0, fmt.Errorf("ina219 at 0x%02x: %w", addr, err)
	}
	return v, nil
}

// ReadVoltages reads the latched bus (µV) and shunt (nV) voltages without
// configuring the chip.
func ReadVoltages(bus i2c.Bus, addr uint16) (busUV, shuntNV int64, err error) {
	d := &i2c.Dev{Bus: bus, Addr: addr}
	s, err := inareg.Read(d, regShunt)
	if err != nil {
		return 0, 0, fmt.Errorf("ina219 at 0x%02x: %w", addr, err)
	}
	b, err := inareg.Read(d, regBus)
	if err != nil {
		return 0, 0, fmt.Errorf("ina219 at 0x%02x: %w", addr, err)
	}
	return int64(b>>3) * 4000, int64(int16(s)) * 10000, nil
}

// Calibration returns the Calibration register value for a shunt of
// rMicroOhms and a Current_LSB of lsbNanoAmps: trunc(0.04096 /
// (Current_LSB × R)) with bit 0 cleared, since the chip ignores it. It
// refuses values above 0xFFFE or that truncate to 0.
func Calibration(rMicroOhms, lsbNanoAmps int64) (uint16, error) {
	if rMicroOhms <= 0 || lsbNanoAmps <= 0 {
		return 0, fmt.Errorf("ina219: calibration needs positive shunt (%d µΩ) and Current_LSB (%d nA)", rMicroOhms, lsbNanoAmps)
	}
	cal := calNum / (lsbNanoAmps * rMicroOhms)
	if cal > maxCal {
		return 0, fmt.Errorf("ina219: calibration %d for %d µΩ and Current_LSB %d nA overflows the register (max %d): choose a larger Current_LSB", cal, rMicroOhms, lsbNanoAmps, maxCal)
	}
	cal &^= 1
	if cal == 0 {
		return 0, fmt.Errorf("ina219: calibration for %d µΩ and Current_LSB %d nA truncates to 0: choose a smaller Current_LSB", rMicroOhms, lsbNanoAmps)
	}
	return uint16(cal), nil
}

func (d *Dev) configure(cfg Config) error {
	if cfg.ShuntMicroOhms <= 0 {
		return fmt.Errorf("ina219: shunt resistance must be positive, got %d µΩ", cfg.ShuntMicroOhms)
	}
	if cfg.MaxCurrentUA <= 0 {
		return fmt.Errorf("ina219: maximum current must be positive, got %d µA", cfg.MaxCurrentUA)
	}
	dropPV := cfg.MaxCurrentUA * cfg.ShuntMicroOhms // µA × µΩ = pV
	pg := -1
	for i, r := range shuntRangesMV {
		if cfg.ShuntRangeMV == 0 && dropPV <= r*1e9 || cfg.ShuntRangeMV == r {
			pg = i
			break
		}
	}
	switch {
	case pg < 0 && cfg.ShuntRangeMV != 0:
		return fmt.Errorf("ina219: shunt range %d mV is not one of %v", cfg.ShuntRangeMV, shuntRangesMV)
	case pg < 0 || dropPV > shuntRangesMV[pg]*1e9:
		return fmt.Errorf("ina219: %d µA through %d µΩ exceeds the shunt input range", cfg.MaxCurrentUA, cfg.ShuntMicroOhms)
	}
	var brng uint16
	switch cfg.BusRangeVolts {
	case 0, 32:
		brng = 1
	case 16:
	default:
		return fmt.Errorf("ina219: bus range %d V is not 16 or 32", cfg.BusRangeVolts)
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
		return fmt.Errorf("ina219: Current_LSB %d nA cannot represent %d µA in the 16-bit current register", lsb, cfg.MaxCurrentUA)
	}
	cal, err := Calibration(cfg.ShuntMicroOhms, lsb)
	if err != nil {
		return err
	}
	badc, ok := adcCodes[cfg.BusADC]
	if !ok {
		return fmt.Errorf("ina219: bus ADC setting %d unknown", cfg.BusADC)
	}
	sadc, ok := adcCodes[cfg.ShuntADC]
	if !ok {
		return fmt.Errorf("ina219: shunt ADC setting %d unknown", cfg.ShuntADC)
	}
	d.cal = cal
	d.pg = uint16(pg)
	d.config = brng<<13 | d.pg<<11 | badc.code<<7 | sadc.code<<3 | modeCont
	d.period = badc.t + sadc.t
	d.poll = cfg.PollInterval
	if d.poll <= 0 {
		d.poll = max(d.period/4, 50*time.Microsecond)
	}
	d.curDen = int64(cal) * cfg.ShuntMicroOhms
	r := float64(cfg.ShuntMicroOhms)
	vos := offsetUV[pg]
	powerLSBUW := powerRatio * float64(curNumUA) / float64(d.curDen)
	// SBOS448 INA219A at 25 °C: current and bus voltage measurement
	// errors of 0.5 % each; the shunt offset of the chosen range seen as
	// power at the bus voltage; and the power register's truncation.
	d.accuracy = drivers.Accuracy{
		GainErr: 0.005 + 0.005,
		OffsetUW: func(busUV int64) float64 {
			if busUV < 0 {
				busUV = -busUV
			}
			return float64(busUV)*vos/r + powerLSBUW
		},
	}
	return nil
}

// Open resets the INA219 at addr, checks that it is one, programs cfg in
// continuous shunt-and-bus mode and checks that the settings read back.
func Open(bus i2c.Bus, addr uint16, cfg Config) (*Dev, error) {
	d := &Dev{dev: i2c.Dev{Bus: bus, Addr: addr}}
	if err := d.configure(cfg); err != nil {
		return nil, err
	}
	d.name = cfg.Name
	if d.name == "" {
		d.name = fmt.Sprintf("ina219@%s:0x%02x", bus, addr)
	}
	if err := Probe(bus, addr); err != nil {
		return nil, err
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

func (d *Dev) restoreIfReset() (bool, error) {
	ok, err := d.settingsIntact()
	if err != nil || ok {
		return false, err
	}
	if err := d.program(); err != nil {
		return false, err
	}
	d.resets.Add(1)
	return true, nil
}

// Name implements drivers.Sensor.
func (d *Dev) Name() string { return d.name }

// UpdatePeriod is the bus plus the shunt conversion time (typical).
func (d *Dev) UpdatePeriod() time.Duration { return d.period }

// Accuracy implements drivers.Sensor.
func (d *Dev) Accuracy() drivers.Accuracy { return d.accuracy }

// Calibration returns the programmed Calibration register value.
func (d *Dev) Calibration() uint16 { return d.cal }

// Resets counts the spontaneous chip resets detected and repaired.
func (d *Dev) Resets() uint64 { return d.resets.Load() }

// Next waits for CNVR and returns that conversion. Sample.Overflow is set
// when the chip flags a math overflow (OVF) or the shunt input sits at the
// end of its range. PowerUW carries the sign of the current: the power
// register itself is unsigned. A bus error is returned as is; the next call
// first checks the chip's settings.
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
	fs := int64(4000) << d.pg
	for {
		if err := ctx.Err(); err != nil {
			return drivers.Sample{}, err
		}
		bus, err := inareg.Read(&d.dev, regBus)
		if err != nil {
			d.suspect = true
			return drivers.Sample{}, fmt.Errorf("%s: %w", d.name, err)
		}
		if bus&busCNVR == 0 {
			if err := inareg.Sleep(ctx, d.poll); err != nil {
				return drivers.Sample{}, err
			}
			continue
		}
		at := time.Now()
		var raw [3]uint16
		for i, reg := range [3]byte{regShunt, regCurrent, regPower} {
			if raw[i], err = inareg.Read(&d.dev, reg); err != nil {
				d.suspect = true
				return drivers.Sample{}, fmt.Errorf("%s: %w", d.name, err)
			}
		}
		shunt, cur, pow := int64(int16(raw[0])), int64(int16(raw[1])), int64(raw[2])
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
			BusUV:     int64(bus>>3) * 4000,
			ShuntNV:   shunt * 10000,
			CurrentUA: inareg.RoundDiv(cur*curNumUA, d.curDen),
			PowerUW:   inareg.RoundDiv(pow*powerRatio*curNumUA, d.curDen),
			Overflow:  bus&busOVF != 0 || shunt >= fs || shunt <= -fs,
		}
		if cur < 0 {
			s.PowerUW = -s.PowerUW
		}
		return s, nil
	}
}

// Close stops the driver and leaves the chip converting.
func (d *Dev) Close() error {
	if d.closed {
		return errors.New(d.name + ": already closed")
	}
	d.closed = true
	return nil
}

var _ drivers.Sensor = (*Dev)(nil)
