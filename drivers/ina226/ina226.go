// Package ina226 drives a TI INA226 current/power monitor (SBOS547) on an
// I²C bus: it identifies the chip, programs averaging, conversion times and
// the calibration register, and hands out each conversion exactly once,
// placed in time from the conversion-ready flag and the chip's clock.
//
// The package takes an i2c.Bus and an address; opening a real bus (for
// example with periph.io/x/host/v3 and i2creg.Open) is the caller's job.
//
// # Timing
//
// Each reading is one conversion (drivers.KindConversion). Its end lies
// between the start of the last flag read that saw CVRF clear and the end of
// the read that saw it set; the driver polls back to back from the earliest
// moment the next conversion can complete, so that interval is two short
// reads wide (about 145 µs at 400 kHz), and while readings chain it is also
// held within 0.9 and 1.1 periods of the last one. Sample.Uncertainty states
// the result. A reading is Contiguous only when the flag timing proves that
// exactly one conversion elapsed since the last one returned and that its
// period was within the chip's ±10 % clock tolerance: a chip whose clock runs
// 30 % slow gives no contiguous readings. The result registers are read
// after CVRF is cleared and CVRF is read again afterwards; set again, a
// newer conversion latched in between and the values are dropped for it.
//
// # Modes and presets
//
// Shunt-and-bus continuous (the default) converts the shunt, then the bus,
// AVG times: the current is unobserved during the bus slots, which each
// reading states as Dead (AVG × VBUSCT at the slow end of the clock) and the
// sampler charges at full scale. That is rigorous, and the bound pays
// Dead × FullScale. Shunt-only continuous (PresetShuntOnly) has no dead
// time: the driver measures the bus with a short triggered conversion at
// Open and every Config.BusEvery (breaking contiguity each time) and relies
// on the rail's declared regulation, Config.BusTolerance, which it adds to
// the gain error; a bracket outside that tolerance of the first measurement
// makes readings Overflow until the rail is back. Between two brackets the
// chip sees no sag, so Info states the band assumed (drivers.Info.BusAssumed)
// and the sampler never makes a hardware claim from such readings.
//
// The default is PresetPrecise (AVG 1, VSHCT 8.244 ms, VBUSCT 140 µs: 119
// Hz, 1.7 % dead): the smallest dead fraction among the sensible settings,
// and a period long enough for the flag timing to catch a chip clock out
// of tolerance on every reading even on a 100 kHz bus (the check needs the
// period to exceed about fifteen flag reads). PresetFast (1.1 ms + 140 µs:
// 806 Hz, 11 % dead) needs a 400 kHz bus: at 100 kHz the five register
// reads per conversion take longer than a period and readings stop
// chaining. PresetKernel is the Linux driver's AVG 16 × (1.1 + 1.1) ms, for
// comparison (50 % dead).
//
// # Resets and stalls
//
// A chip that browns out comes back with its power-on configuration and a
// zero calibration. Whenever a conversion's current disagrees with its
// shunt voltage under the programmed calibration, whenever its timing
// breaks the chain, and after any bus error, the driver reads Config and
// Calibration back; if either differs it rewrites both, drops the
// conversion made under the wrong settings and counts the event (Resets).
// No conversion for three long periods makes Next check (and repair) the
// settings and return an error wrapping drivers.ErrStalled.
package ina226

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

// Registers of the INA226 alone (SBOS547 §7.6); the others are inareg's.
const (
	regMask  = 0x06
	regMfrID = 0xFE
	regDieID = 0xFF

	mfrTI     = 0x5449 // "TI"
	dieINA226 = 0x226  // Die ID bits 15..4; bits 3..0 are the revision
	cfgFixed  = 0x4000 // bit 14 reads back as 1
	maskCVRF  = 1 << 3
	maskOVF   = 1 << 2
	maskRsvd  = 0x03E0 // Mask/Enable bits 9..5 read 0
	maxCal    = 0x7FFF

	// CAL = 0.00512 / (Current_LSB × R); with the LSB in nA and R in µΩ
	// the constant becomes 5.12e12.
	calNum     = 5_120_000_000_000
	powerRatio = 25 // Power_LSB = 25 × Current_LSB

	// Full-scale shunt input is ±81.92 mV = 81.92e9 pV (µA × µΩ).
	shuntFSpV = 81_920_000_000

	// SBOS547 worst cases at 25 °C.
	shuntGainErr = 0.001
	busGainErr   = 0.001
	shuntOffNV   = 10_000    // 10 µV
	busOffNV     = 7_500_000 // 7.5 mV
)

// model reads the shunt, current and bus registers once Mask/Enable shows
// CVRF (reading Mask/Enable is what clears it), then Mask/Enable again.
func model() inareg.Model {
	return inareg.Model{
		Name:         "ina226",
		FlagReg:      regMask,
		FlagMask:     maskCVRF,
		OVFMask:      maskOVF,
		ReservedMask: maskRsvd,
		Results:      []byte{inareg.RegShunt, inareg.RegCurrent, inareg.RegBus},
		CalNum:       calNum,
		MaxCal:       maxCal,
		CalDiv:       2048,
		PowerRatio:   powerRatio,
		PowerDiv:     20000,
		ShuntLSB:     2500 * physic.NanoVolt,
		BusLSB:       1250 * physic.MicroVolt,
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

// Preset is a shipped conversion setting (shared by name with the other
// INA chip). The zero Preset is the default.
type Preset = inareg.Preset

// The shipped settings; see the package documentation for the trade-offs.
const (
	// PresetPrecise: AVG 1, VSHCT 8.244 ms, VBUSCT 140 µs, shunt and bus
	// (8.384 ms, 119 Hz, 1.7 % dead). The default.
	PresetPrecise = inareg.PresetPrecise
	// PresetFast: AVG 1, VSHCT 1.1 ms, VBUSCT 140 µs, shunt and bus
	// (1.24 ms, 806 Hz, 11 % dead). Needs a 400 kHz bus.
	PresetFast = inareg.PresetFast
	// PresetKernel: the Linux hwmon driver's AVG 16, 1.1 ms + 1.1 ms
	// (35.2 ms, 50 % dead).
	PresetKernel = inareg.PresetKernel
	// PresetShuntOnly: AVG 1, VSHCT 2.116 ms, shunt only (473 Hz, no
	// dead time); the bus is bracketed with a 140 µs triggered
	// conversion. Needs Config.BusTolerance.
	PresetShuntOnly = inareg.PresetShuntOnly
)

// Presets lists every shipped setting, the default first.
func Presets() []Preset { return inareg.Presets() }

// timing is (averages, VBUSCT, VSHCT, shunt only).
func timing(p Preset) (int, time.Duration, time.Duration, bool, error) {
	switch p {
	case PresetPrecise:
		return 1, ConvTimes[0], ConvTimes[7], false, nil
	case PresetFast:
		return 1, ConvTimes[0], ConvTimes[4], false, nil
	case PresetKernel:
		return 16, ConvTimes[4], ConvTimes[4], false, nil
	case PresetShuntOnly:
		return 1, ConvTimes[0], ConvTimes[5], true, nil
	}
	return 0, 0, 0, false, fmt.Errorf("ina226: unknown preset %d", uint8(p))
}

// Config is what the caller knows about the board and wants of the chip.
type Config struct {
	// ShuntMicroOhms is the shunt resistance in µΩ (2 mΩ = 2000). Required.
	ShuntMicroOhms int64
	// MaxCurrentUA is the largest current expected, in µA. Required: it
	// bounds the shunt input range, is the full scale the error bound
	// charges unobserved time at (a reading beyond it is an Overflow),
	// and, unless CurrentLSBNanoAmps is set, sets Current_LSB =
	// MaxCurrent / 32767 rounded up to a whole nA, or coarser where that
	// calibration would not fit the register.
	MaxCurrentUA int64
	// CurrentLSBNanoAmps optionally fixes Current_LSB (in nA), e.g.
	// 1_000_000 for the round 1 mA of the datasheet example.
	CurrentLSBNanoAmps int64
	// Preset selects the conversion setting; the zero value is
	// PresetPrecise.
	Preset Preset
	// Averages (one of Averages), BusConvTime and ShuntConvTime (VBUSCT,
	// VSHCT: one of ConvTimes) override the preset's when non-zero.
	Averages                   int
	BusConvTime, ShuntConvTime time.Duration
	// PollInterval is the pause between flag reads once a conversion may
	// have completed; 0 polls back to back, which keeps each reading's
	// placement within two short reads. Longer pauses widen Uncertainty
	// and, beyond a few percent of the period, hide a clock out of
	// tolerance.
	PollInterval time.Duration
	// BusEvery is how often shunt-only mode measures the bus (0: 1 s);
	// BusTolerance the rail's declared regulation, relative (required > 0
	// in shunt-only mode, added to the gain error).
	BusEvery     time.Duration
	BusTolerance float64
	// DeclaredPPM is the accuracy declared for a hardware claim (see
	// drivers.Accuracy); 0 is the profile's ceiling.
	DeclaredPPM uint32
	// Clock stamps and paces readings; nil is drivers.System.
	Clock drivers.Clock
	// Name overrides the sensor name; empty means "ina226@<bus>:0x<addr>".
	Name string
}

// Dev is an open INA226: the shared chip core, which implements
// drivers.Sensor. Next must not be called from several goroutines at once;
// Resets may be.
type Dev struct {
	*inareg.Chip
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

// ReadVoltages reads the latched bus and shunt voltages without
// configuring the chip; it needs no calibration.
func ReadVoltages(bus i2c.Bus, addr uint16) (busV, shuntV physic.ElectricPotential, err error) {
	b, sh, err := inareg.ReadVoltages(bus, addr, "ina226")
	if err != nil {
		return 0, 0, err
	}
	return physic.ElectricPotential(b) * 1250 * physic.MicroVolt, physic.ElectricPotential(int16(sh)) * 2500 * physic.NanoVolt, nil
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

// code returns v's index in table, or def's when v is zero.
func code[T comparable](table [8]T, v, def T, what string) (uint16, error) {
	var zero T
	if v == zero {
		v = def
	}
	for i, t := range table {
		if t == v {
			return uint16(i), nil
		}
	}
	return 0, fmt.Errorf("ina226: %s %v is not one of %v", what, v, table)
}

// configure validates cfg and derives the register values, timing and
// error budget.
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
	pAvg, pBus, pSh, shuntOnly, err := timing(cfg.Preset)
	if err != nil {
		return inareg.Settings{}, err
	}
	avg, err := code(Averages, cfg.Averages, pAvg, "averages")
	if err != nil {
		return inareg.Settings{}, err
	}
	vbus, err := code(ConvTimes, cfg.BusConvTime, pBus, "bus conversion time")
	if err != nil {
		return inareg.Settings{}, err
	}
	vsh, err := code(ConvTimes, cfg.ShuntConvTime, pSh, "shunt conversion time")
	if err != nil {
		return inareg.Settings{}, err
	}
	if shuntOnly && !(cfg.BusTolerance > 0 && cfg.BusTolerance < 1) {
		return inareg.Settings{}, fmt.Errorf("ina226: shunt-only mode needs the rail's declared regulation (BusTolerance between 0 and 1), got %v", cfg.BusTolerance)
	}
	if cfg.PollInterval < 0 || cfg.BusEvery < 0 {
		return inareg.Settings{}, fmt.Errorf("ina226: negative poll interval %v or bus interval %v", cfg.PollInterval, cfg.BusEvery)
	}
	n := time.Duration(Averages[avg])
	fields := cfgFixed | avg<<9 | vbus<<6 | vsh<<3
	s := inareg.Settings{
		Config:         fields | inareg.ModeBothCont,
		Cal:            cal,
		ShuntMicroOhms: cfg.ShuntMicroOhms,
		MaxCurrentUA:   cfg.MaxCurrentUA,
		Period:         n * (ConvTimes[vbus] + ConvTimes[vsh]),
		Dead:           n * (ConvTimes[vbus] + ConvTimes[vbus]/10),
		Poll:           cfg.PollInterval,
		ShuntMin:       -32768,
		ShuntMax:       32767,
		Clock:          cfg.Clock,
	}
	if shuntOnly {
		s.Config = fields | inareg.ModeShuntCont
		s.Period, s.Dead = n*ConvTimes[vsh], 0
		s.ShuntOnly = true
		s.BusConfig = fields | inareg.ModeBusTrig
		s.BusTime = n * ConvTimes[vbus]
		s.BusEvery = cfg.BusEvery
		if s.BusEvery == 0 {
			s.BusEvery = time.Second
		}
		s.BusTolerance = cfg.BusTolerance
	}
	s.Accuracy = accuracy(m, cfg, cal, s.BusTolerance)
	return s, nil
}

// accuracy is the SBOS547 worst case at 25 °C: shunt and bus gain errors of
// 0.1 % each (plus the declared bus regulation in shunt-only mode); the
// shunt offset of 10 µV seen as power at the bus voltage; the bus offset of
// 7.5 mV at the maximum current; and the power register's truncation to
// one Power_LSB. Full scale is the maximum current at the bus voltage
// raised by its worst-case error.
func accuracy(m inareg.Model, cfg Config, cal uint16, busTol float64) drivers.Accuracy {
	_, powLSB := m.LSBs(cal, cfg.ShuntMicroOhms)
	r, imax := float64(cfg.ShuntMicroOhms), float64(cfg.MaxCurrentUA)
	busOff := busOffNV * imax / 1e6 // nV × µA = fW
	acc := drivers.Accuracy{
		GainErr: shuntGainErr + busGainErr + busTol,
		Offset: func(bus physic.ElectricPotential) physic.Power {
			v := math.Abs(float64(bus))
			return physic.Power(math.Ceil(v*shuntOffNV/1000/r + busOff + powLSB)) // nV × µV / µΩ = nW
		},
		FullScale: func(bus physic.ElectricPotential) physic.Power {
			v := math.Abs(float64(bus))*(1+busGainErr+busTol) + busOffNV
			return physic.Power(math.Ceil(v * imax / 1e6))
		},
		DeclaredPPM: cfg.DeclaredPPM,
	}
	acc.MaxPower = acc.FullScale(m.BusMax())
	return acc
}

// Open identifies the INA226 at addr, resets it, programs cfg, checks that
// the settings read back and, in shunt-only mode, measures the bus.
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
	if err := c.Start(context.Background()); err != nil {
		return nil, err
	}
	return &Dev{Chip: c}, nil
}

var _ drivers.Sensor = (*Dev)(nil)
