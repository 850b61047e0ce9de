// Package ina219 drives a TI INA219 current/power monitor (SBOS448) on an
// I²C bus: it identifies the chip (it has no ID registers: a reset must
// bring back the power-on configuration 0x399F), programs the ranges, ADC
// modes and calibration register, and hands out each conversion once,
// placed in time from the CNVR flag and the chip's clock.
//
// The package takes an i2c.Bus and an address; opening a real bus is the
// caller's job.
//
// Timing, contiguity, dead time, the shunt-only mode, resets and stalls work
// as in package ina226 (the shared core is drivers/internal/inareg): each
// reading is one conversion of SADC then BADC, the BADC time (at the slow
// end of the clock) is its Dead time, and a reading is Contiguous only when
// the flag timing proves exactly one conversion within the chip's clock
// tolerance since the last.
//
// CNVR lives in the bus voltage register. The datasheet says reading Power
// clears it, some users report that reading the bus register does. Next
// sees the flag in a bus read, reads Power (clearing it under either
// behaviour), then Shunt and Current, then the bus register again: its
// value and CNVR there prove that no newer conversion latched since Power
// was read, so the values belong to one conversion and each conversion is
// handed out once whichever read clears the flag.
//
// The default is PresetPrecise (SADC 16 samples 8.51 ms, BADC 9 bits
// 84 µs: 116 Hz, 1 % dead); PresetFast (SADC 4 samples 2.13 ms, BADC
// 84 µs: 452 Hz, 4 % dead) needs a 400 kHz bus; PresetKernel is the
// power-on 12-bit/12-bit setting the Linux driver uses (1.064 ms, 50 %
// dead); PresetShuntOnly converts SADC 4 samples continuously and brackets
// the bus. Below a period of about fifteen flag reads (PresetKernel on a
// 400 kHz bus) a chip clock out of tolerance is caught only after a few
// readings rather than on each one.
package ina219

import (
	"context"
	"fmt"
	"math"
	"time"

	"meshd/drivers"
	"meshd/drivers/internal/inareg"

	"periph.io/x/conn/v3/i2c"
	"periph.io/x/conn/v3/physic"
)

const (
	// PowerOnConfig is the configuration register after a reset: 32 V bus
	// range, ±320 mV shunt range, 12-bit ADCs, continuous conversion.
	PowerOnConfig = 0x399F
	busCNVR       = 1 << 1
	busOVF        = 1 << 0
	busRsvd       = 1 << 2 // reads 0
	maxCal        = 0xFFFE // FS0 (bit 0) is void and reads 0

	// Cal = trunc(0.04096 / (Current_LSB × R)); with nA and µΩ the constant
	// is 4.096e13.
	calNum     = 40_960_000_000_000
	powerRatio = 20 // Power_LSB = 20 × Current_LSB

	// SBOS448 INA219A worst cases at 25 °C.
	currentErr = 0.005
	busErr     = 0.005
)

// model sees CNVR in the bus register, clears it by reading Power, reads
// Shunt and Current, and proves the values whole with a second bus read.
func model() inareg.Model {
	return inareg.Model{
		Name:         "ina219",
		FlagReg:      inareg.RegBus,
		FlagMask:     busCNVR,
		OVFMask:      busOVF,
		ReservedMask: busRsvd,
		Consume:      inareg.RegPower,
		HasConsume:   true,
		Results:      []byte{inareg.RegShunt, inareg.RegCurrent},
		CalNum:       calNum,
		MaxCal:       maxCal,
		CalDiv:       4096,
		PowerRatio:   powerRatio,
		PowerDiv:     5000,
		ShuntLSB:     10 * physic.MicroVolt,
		BusLSB:       4 * physic.MilliVolt,
		BusShift:     3,
	}
}

// ADC selects a BADC/SADC setting: a resolution for one sample, or a count
// of 12-bit samples averaged.
type ADC int

// The zero ADC means the preset's setting.
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
	ADC9Bit:   {0x0, 84 * time.Microsecond},
	ADC10Bit:  {0x1, 148 * time.Microsecond},
	ADC11Bit:  {0x2, 276 * time.Microsecond},
	ADC12Bit:  {0x3, 532 * time.Microsecond},
	ADCAvg2:   {0x9, 1060 * time.Microsecond},
	ADCAvg4:   {0xA, 2130 * time.Microsecond},
	ADCAvg8:   {0xB, 4260 * time.Microsecond},
	ADCAvg16:  {0xC, 8510 * time.Microsecond},
	ADCAvg32:  {0xD, 17020 * time.Microsecond},
	ADCAvg64:  {0xE, 34050 * time.Microsecond},
	ADCAvg128: {0xF, 68100 * time.Microsecond},
}

// Preset is a shipped conversion setting (shared by name with the other
// INA chip). The zero Preset is the default.
type Preset = inareg.Preset

// The shipped settings; see the package documentation for the trade-offs.
const (
	PresetPrecise   = inareg.PresetPrecise
	PresetFast      = inareg.PresetFast
	PresetKernel    = inareg.PresetKernel
	PresetShuntOnly = inareg.PresetShuntOnly
)

// Presets lists every shipped setting, the default first.
func Presets() []Preset { return inareg.Presets() }

// timing is (BADC, SADC, shunt only).
func timing(p Preset) (ADC, ADC, bool, error) {
	switch p {
	case PresetPrecise:
		return ADC9Bit, ADCAvg16, false, nil
	case PresetFast:
		return ADC9Bit, ADCAvg4, false, nil
	case PresetKernel:
		return ADC12Bit, ADC12Bit, false, nil
	case PresetShuntOnly:
		return ADC9Bit, ADCAvg4, true, nil
	}
	return 0, 0, false, fmt.Errorf("ina219: unknown preset %d", uint8(p))
}

// Config is what the caller knows about the board and wants of the chip.
type Config struct {
	// ShuntMicroOhms is the shunt resistance in µΩ (0.1 Ω = 100000). Required.
	ShuntMicroOhms int64
	// MaxCurrentUA is the largest current expected, in µA. Required: it is
	// also the full scale the error bound charges unobserved time at (a
	// reading beyond it is an Overflow).
	MaxCurrentUA int64
	// CurrentLSBNanoAmps optionally fixes Current_LSB in nA; 0 derives it
	// as MaxCurrent / 32767 rounded up, or coarser where that calibration
	// would not fit the register.
	CurrentLSBNanoAmps int64
	// BusRangeVolts is 16 or 32; 0 means 32.
	BusRangeVolts int
	// ShuntRangeMV is 40, 80, 160 or 320; 0 picks the smallest range that
	// holds MaxCurrent × R.
	ShuntRangeMV int64
	// Preset selects the conversion setting; the zero value is
	// PresetPrecise. BusADC and ShuntADC override its ADC settings when
	// not ADCDefault.
	Preset           Preset
	BusADC, ShuntADC ADC
	// PollInterval is the pause between flag reads once a conversion may
	// have completed; 0 polls back to back (see package ina226).
	PollInterval time.Duration
	// BusEvery is how often shunt-only mode measures the bus (0: 1 s);
	// BusTolerance the rail's declared regulation, relative (required > 0
	// in shunt-only mode, added to the gain error).
	BusEvery     time.Duration
	BusTolerance float64
	// DeclaredPPM is the accuracy declared for a hardware claim; 0 is the
	// profile's ceiling.
	DeclaredPPM uint32
	// Clock stamps and paces readings; nil is drivers.System.
	Clock drivers.Clock
	// Name overrides the sensor name; empty means "ina219@<bus>:0x<addr>".
	Name string
}

// Dev is an open INA219: the shared chip core, which implements
// drivers.Sensor. Next must not be called from several goroutines at once;
// Resets may be.
type Dev struct {
	*inareg.Chip
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

// ReadVoltages reads the latched bus and shunt voltages without
// configuring the chip.
func ReadVoltages(bus i2c.Bus, addr uint16) (busV, shuntV physic.ElectricPotential, err error) {
	b, sh, err := inareg.ReadVoltages(bus, addr, "ina219")
	if err != nil {
		return 0, 0, err
	}
	return physic.ElectricPotential(b>>3) * 4 * physic.MilliVolt, physic.ElectricPotential(int16(sh)) * 10 * physic.MicroVolt, nil
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

// shunt ranges by PG code, in mV, and the worst-case input offset of the
// INA219A at each (SBOS448 §7.5), in µV.
var (
	shuntRangesMV = [4]int64{40, 80, 160, 320}
	offsetUV      = [4]float64{100, 125, 150, 200}
)

// configure validates cfg and derives the register values, timing and
// error budget.
func configure(m inareg.Model, cfg Config) (inareg.Settings, error) {
	if err := m.CheckBoard(cfg.ShuntMicroOhms, cfg.MaxCurrentUA); err != nil {
		return inareg.Settings{}, err
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
		return inareg.Settings{}, fmt.Errorf("ina219: shunt range %d mV is not one of %v", cfg.ShuntRangeMV, shuntRangesMV)
	case pg < 0 || dropPV > shuntRangesMV[pg]*1e9:
		return inareg.Settings{}, fmt.Errorf("ina219: %d µA through %d µΩ exceeds the shunt input range", cfg.MaxCurrentUA, cfg.ShuntMicroOhms)
	}
	var brng uint16
	switch cfg.BusRangeVolts {
	case 0, 32:
		brng = 1
	case 16:
	default:
		return inareg.Settings{}, fmt.Errorf("ina219: bus range %d V is not 16 or 32", cfg.BusRangeVolts)
	}
	lsb, err := m.CurrentLSB(cfg.ShuntMicroOhms, cfg.MaxCurrentUA, cfg.CurrentLSBNanoAmps)
	if err != nil {
		return inareg.Settings{}, err
	}
	cal, err := Calibration(cfg.ShuntMicroOhms, lsb)
	if err != nil {
		return inareg.Settings{}, err
	}
	pBus, pSh, shuntOnly, err := timing(cfg.Preset)
	if err != nil {
		return inareg.Settings{}, err
	}
	badc, err := adc(cfg.BusADC, pBus, "bus")
	if err != nil {
		return inareg.Settings{}, err
	}
	sadc, err := adc(cfg.ShuntADC, pSh, "shunt")
	if err != nil {
		return inareg.Settings{}, err
	}
	if shuntOnly && !(cfg.BusTolerance > 0 && cfg.BusTolerance < 1) {
		return inareg.Settings{}, fmt.Errorf("ina219: shunt-only mode needs the rail's declared regulation (BusTolerance between 0 and 1), got %v", cfg.BusTolerance)
	}
	if cfg.PollInterval < 0 || cfg.BusEvery < 0 {
		return inareg.Settings{}, fmt.Errorf("ina219: negative poll interval %v or bus interval %v", cfg.PollInterval, cfg.BusEvery)
	}
	fs := int64(4000) << pg // shunt full scale in 10 µV counts
	fields := brng<<13 | uint16(pg)<<11 | badc.code<<7 | sadc.code<<3
	s := inareg.Settings{
		Config:         fields | inareg.ModeBothCont,
		Cal:            cal,
		ShuntMicroOhms: cfg.ShuntMicroOhms,
		MaxCurrentUA:   cfg.MaxCurrentUA,
		Period:         badc.t + sadc.t,
		Dead:           badc.t + badc.t/10,
		Poll:           cfg.PollInterval,
		ShuntMin:       -fs,
		ShuntMax:       fs,
		Clock:          cfg.Clock,
	}
	if shuntOnly {
		s.Config = fields | inareg.ModeShuntCont
		s.Period, s.Dead = sadc.t, 0
		s.ShuntOnly = true
		s.BusConfig = fields | inareg.ModeBusTrig
		s.BusTime = badc.t
		s.BusEvery = cfg.BusEvery
		if s.BusEvery == 0 {
			s.BusEvery = time.Second
		}
		s.BusTolerance = cfg.BusTolerance
	}
	s.Accuracy = accuracy(m, cfg, cal, pg, s.BusTolerance)
	return s, nil
}

type adcSetting struct {
	code uint16
	t    time.Duration
}

func adc(a, def ADC, what string) (adcSetting, error) {
	if a == ADCDefault {
		a = def
	}
	c, ok := adcCodes[a]
	if !ok {
		return adcSetting{}, fmt.Errorf("ina219: %s ADC setting %d unknown", what, a)
	}
	return adcSetting{c.code, c.t}, nil
}

// accuracy is the SBOS448 INA219A budget at 25 °C: current and bus
// voltage measurement errors of 0.5 % each (plus the declared bus
// regulation in shunt-only mode); the shunt offset of the chosen range seen
// as power at the bus voltage; and the power register's truncation. Full
// scale is the maximum current at the bus voltage raised by its error.
func accuracy(m inareg.Model, cfg Config, cal uint16, pg int, busTol float64) drivers.Accuracy {
	_, powLSB := m.LSBs(cal, cfg.ShuntMicroOhms)
	r, imax, vos := float64(cfg.ShuntMicroOhms), float64(cfg.MaxCurrentUA), offsetUV[pg]
	acc := drivers.Accuracy{
		GainErr: currentErr + busErr + busTol,
		Offset: func(bus physic.ElectricPotential) physic.Power {
			return physic.Power(math.Ceil(math.Abs(float64(bus))*vos/r + powLSB)) // nV × µV / µΩ = nW
		},
		FullScale: func(bus physic.ElectricPotential) physic.Power {
			return physic.Power(math.Ceil(math.Abs(float64(bus)) * (1 + busErr + busTol) * imax / 1e6))
		},
		DeclaredPPM: cfg.DeclaredPPM,
	}
	acc.MaxPower = acc.FullScale(m.BusMax())
	return acc
}

// Open resets the INA219 at addr, checks that it is one, programs cfg,
// checks that the settings read back and, in shunt-only mode, measures the
// bus.
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
	if err := c.Start(context.Background()); err != nil {
		return nil, err
	}
	return &Dev{Chip: c}, nil
}

var _ drivers.Sensor = (*Dev)(nil)
