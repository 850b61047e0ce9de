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
	"fmt"
	"time"

	"meshd/drivers"
	"meshd/drivers/internal/inareg"

	"periph.io/x/conn/v3/i2c"
)

const (
	// PowerOnConfig is the configuration register after a reset: 32 V bus
	// range, ±320 mV shunt range, 12-bit ADCs, continuous conversion.
	PowerOnConfig = 0x399F
	modeCont      = 0x7
	busCNVR       = 1 << 1
	busOVF        = 1 << 0
	maxCal        = 0xFFFE // FS0 (bit 0) is void and reads 0

	// Cal = trunc(0.04096 / (Current_LSB × R)); with nA and µΩ the constant
	// is 4.096e13.
	calNum     = 40_960_000_000_000
	powerRatio = 20 // Power_LSB = 20 × Current_LSB
)

// model reads CNVR in the bus register, then Shunt and Current, and Power
// last: whichever of the bus or the Power read clears CNVR, each
// conversion is handed out once.
func model() inareg.Model {
	return inareg.Model{
		Name:       "ina219",
		FlagReg:    inareg.RegBus,
		FlagMask:   busCNVR,
		Results:    []byte{inareg.RegShunt, inareg.RegCurrent, inareg.RegPower},
		CalNum:     calNum,
		MaxCal:     maxCal,
		PowerRatio: powerRatio,
	}
}

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
	chip     *inareg.Chip
	pg       uint16
	accuracy drivers.Accuracy
}

// Probe resets the device at addr and checks that its configuration comes
// back as PowerOnConfig with a zero calibration, which is all an INA219
// offers to identify it. It is destructive: only call it on an address the
// operator says holds an INA219. A device that does not match gives an
// error wrapping drivers.ErrNoDevice.
func Probe(bus i2c.Bus, addr uint16) error {
	d := &i2c.Dev{Bus: bus, Addr: addr}
	if err := inareg.Write(d, inareg.RegConfig, inareg.ConfigReset); err != nil {
		return fmt.Errorf("ina219 at 0x%02x: reset: %w", addr, err)
	}
	c, err := inareg.Read(d, inareg.RegConfig)
	if err != nil {
		return fmt.Errorf("ina219 at 0x%02x: %w", addr, err)
	}
	cal, err := inareg.Read(d, inareg.RegCal)
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
	v, err := inareg.Read(&i2c.Dev{Bus: bus, Addr: addr}, inareg.RegConfig)
	if err != nil {
		return 0, fmt.Errorf("ina219 at 0x%02x: %w", addr, err)
	}
	return v, nil
}

// ReadVoltages reads the latched bus (µV) and shunt (nV) voltages without
// configuring the chip.
func ReadVoltages(bus i2c.Bus, addr uint16) (busUV, shuntNV int64, err error) {
	b, sh, err := inareg.ReadVoltages(bus, addr, "ina219")
	if err != nil {
		return 0, 0, err
	}
	return int64(b>>3) * 4000, int64(int16(sh)) * 10000, nil
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

// configure validates cfg and derives the register values and the PG
// code of the shunt range.
func configure(m inareg.Model, cfg Config) (inareg.Settings, int, error) {
	if err := m.CheckBoard(cfg.ShuntMicroOhms, cfg.MaxCurrentUA); err != nil {
		return inareg.Settings{}, 0, err
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
		return inareg.Settings{}, 0, fmt.Errorf("ina219: shunt range %d mV is not one of %v", cfg.ShuntRangeMV, shuntRangesMV)
	case pg < 0 || dropPV > shuntRangesMV[pg]*1e9:
		return inareg.Settings{}, 0, fmt.Errorf("ina219: %d µA through %d µΩ exceeds the shunt input range", cfg.MaxCurrentUA, cfg.ShuntMicroOhms)
	}
	var brng uint16
	switch cfg.BusRangeVolts {
	case 0, 32:
		brng = 1
	case 16:
	default:
		return inareg.Settings{}, 0, fmt.Errorf("ina219: bus range %d V is not 16 or 32", cfg.BusRangeVolts)
	}
	lsb, err := m.CurrentLSB(cfg.ShuntMicroOhms, cfg.MaxCurrentUA, cfg.CurrentLSBNanoAmps)
	if err != nil {
		return inareg.Settings{}, 0, err
	}
	cal, err := Calibration(cfg.ShuntMicroOhms, lsb)
	if err != nil {
		return inareg.Settings{}, 0, err
	}
	badc, ok := adcCodes[cfg.BusADC]
	if !ok {
		return inareg.Settings{}, 0, fmt.Errorf("ina219: bus ADC setting %d unknown", cfg.BusADC)
	}
	sadc, ok := adcCodes[cfg.ShuntADC]
	if !ok {
		return inareg.Settings{}, 0, fmt.Errorf("ina219: shunt ADC setting %d unknown", cfg.ShuntADC)
	}
	return inareg.Settings{
		Config:         brng<<13 | uint16(pg)<<11 | badc.code<<7 | sadc.code<<3 | modeCont,
		Cal:            cal,
		ShuntMicroOhms: cfg.ShuntMicroOhms,
		Period:         badc.t + sadc.t,
		Poll:           cfg.PollInterval,
	}, pg, nil
}

// accuracy is the SBOS448 INA219A budget at 25 °C: current and bus
// voltage measurement errors of 0.5 % each; the shunt offset of the chosen
// range seen as power at the bus voltage; and the power register's
// truncation.
func accuracy(cfg Config, pg int, powerLSBUW float64) drivers.Accuracy {
	r := float64(cfg.ShuntMicroOhms)
	vos := offsetUV[pg]
	return drivers.Accuracy{
		GainErr: 0.005 + 0.005,
		OffsetUW: func(busUV int64) float64 {
			if busUV < 0 {
				busUV = -busUV
			}
			return float64(busUV)*vos/r + powerLSBUW
		},
	}
}

// Open resets the INA219 at addr, checks that it is one, programs cfg in
// continuous shunt-and-bus mode and checks that the settings read back.
func Open(bus i2c.Bus, addr uint16, cfg Config) (*Dev, error) {
	m := model()
	set, pg, err := configure(m, cfg)
	if err != nil {
		return nil, err
	}
	if err := Probe(bus, addr); err != nil {
		return nil, err
	}
	c := inareg.New(m, bus, addr, cfg.Name, set)
	if err := c.Program(); err != nil {
		return nil, err
	}
	return &Dev{chip: c, pg: uint16(pg), accuracy: accuracy(cfg, pg, c.PowerLSBMicroWatts())}, nil
}

// Name implements drivers.Sensor.
func (d *Dev) Name() string { return d.chip.Name() }

// UpdatePeriod is the bus plus the shunt conversion time (typical).
func (d *Dev) UpdatePeriod() time.Duration { return d.chip.Period() }

// Accuracy implements drivers.Sensor.
func (d *Dev) Accuracy() drivers.Accuracy { return d.accuracy }

// Calibration returns the programmed Calibration register value.
func (d *Dev) Calibration() uint16 { return d.chip.Calibration() }

// Resets counts the spontaneous chip resets detected and repaired.
func (d *Dev) Resets() uint64 { return d.chip.Resets() }

// Next waits for CNVR and returns that conversion. Sample.Overflow is set
// when the chip flags a math overflow (OVF) or the shunt input sits at the
// end of its range. PowerUW carries the sign of the current: the power
// register itself is unsigned. A bus error is returned as is; the next call
// first checks the chip's settings.
func (d *Dev) Next(ctx context.Context) (drivers.Sample, error) {
	r, err := d.chip.Next(ctx)
	if err != nil {
		return drivers.Sample{}, err
	}
	s := d.chip.Sample(r)
	fs := int64(4000) << d.pg
	shunt := int64(int16(r.Shunt))
	s.BusUV = int64(r.Bus>>3) * 4000
	s.ShuntNV = shunt * 10000
	s.Overflow = r.Bus&busOVF != 0 || shunt >= fs || shunt <= -fs
	return s, nil
}

// Close stops the driver and leaves the chip converting.
func (d *Dev) Close() error { return d.chip.Close() }

var _ drivers.Sensor = (*Dev)(nil)
