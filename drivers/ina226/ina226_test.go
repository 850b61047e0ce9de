package ina226

import (
	"context"
	"errors"
	"testing"
	"time"

	"meshd/drivers"
	"meshd/drivers/inasim"
	"meshd/drivers/internal/inatest"

	"periph.io/x/conn/v3/physic"
)

const addr = 0x40

// example is the SBOS547 worked example: 2 mΩ shunt, Current_LSB 1 mA.
var example = Config{
	ShuntMicroOhms:     2000,
	MaxCurrentUA:       15_000_000,
	CurrentLSBNanoAmps: 1_000_000,
	Preset:             PresetFast,
}

func TestCalibration(t *testing.T) {
	tests := []struct {
		name    string
		r, lsb  int64
		want    uint16
		wantErr bool
	}{
		{"datasheet example 2mΩ 1mA", 2000, 1_000_000, 2560, false},
		{"10mΩ 100µA", 10_000, 100_000, 5120, false},
		{"largest that fits", 1, 156_254_000, 32767, false},
		{"overflows 15 bits", 100, 1_000_000, 0, true},
		{"just over 0x7FFF", 1, 156_250_000, 0, true},
		{"truncates to zero", 1_000_000, 10_000_000_000, 0, true},
		{"zero shunt", 0, 1000, 0, true},
		{"negative lsb", 2000, -1, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Calibration(tt.r, tt.lsb)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Calibration(%d, %d) error = %v, want error %v", tt.r, tt.lsb, err, tt.wantErr)
			}
			if got != tt.want {
				t.Fatalf("Calibration(%d, %d) = %d, want %d", tt.r, tt.lsb, got, tt.want)
			}
		})
	}
}

func TestOpenRefusesBadConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
	}{
		{"no shunt", Config{MaxCurrentUA: 1_000_000}},
		{"no max current", Config{ShuntMicroOhms: 2000}},
		{"calibration overflow", Config{ShuntMicroOhms: 100, MaxCurrentUA: 1_000_000, CurrentLSBNanoAmps: 1_000_000}},
		{"beyond shunt range", Config{ShuntMicroOhms: 10_000, MaxCurrentUA: 10_000_000}},
		{"lsb too small for max current", Config{ShuntMicroOhms: 2000, MaxCurrentUA: 10_000_000, CurrentLSBNanoAmps: 100_000}},
		{"averages not a code", Config{ShuntMicroOhms: 2000, MaxCurrentUA: 1_000_000, Averages: 3}},
		{"conv time not a code", Config{ShuntMicroOhms: 2000, MaxCurrentUA: 1_000_000, BusConvTime: time.Millisecond}},
		{"unknown preset", Config{ShuntMicroOhms: 2000, MaxCurrentUA: 1_000_000, Preset: 9}},
		{"shunt-only without tolerance", Config{ShuntMicroOhms: 2000, MaxCurrentUA: 1_000_000, Preset: PresetShuntOnly}},
		{"negative poll", Config{ShuntMicroOhms: 2000, MaxCurrentUA: 1_000_000, PollInterval: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bus := inasim.NewBus("sim", nil)
			chip := bus.Add(inasim.INA226, addr)
			if _, err := Open(bus, addr, tt.cfg); err == nil {
				t.Fatal("Open accepted a bad configuration")
			}
			if n := chip.Writes(inasim.RegCal); n != 0 {
				t.Fatalf("calibration written %d times for a refused configuration", n)
			}
		})
	}
}

// TestOpenRefusesSlowBus: at 100 kHz the five reads of one fast-preset
// conversion outlast its period, so no reading could be proven whole.
func TestOpenRefusesSlowBus(t *testing.T) {
	bus := inasim.NewBus("sim", nil, inasim.WithSpeed(100*physic.KiloHertz))
	bus.Add(inasim.INA226, addr)
	fast, precise := withPreset(PresetFast), withPreset(PresetPrecise)
	fast.Clock, precise.Clock = bus.Clock(), bus.Clock()
	if _, err := Open(bus, addr, fast); err == nil {
		t.Fatal("Open accepted a period the bus cannot read whole")
	}
	if _, err := Open(bus, addr, precise); err != nil {
		t.Fatalf("Open refused the default preset at 100 kHz: %v", err)
	}
}

func TestPresetsRegistersAndInfo(t *testing.T) {
	us := time.Microsecond
	tests := []struct {
		name       string
		cfg        Config
		wantConfig uint16
		period     time.Duration
		dead       time.Duration
	}{
		{"default", board, 0x403F, 8384 * us, 154 * us},
		{"fast", withPreset(PresetFast), 0x4027, 1240 * us, 154 * us},
		{"kernel", withPreset(PresetKernel), 0x4527, 35200 * us, 16 * 1210 * us},
		{"shunt-only", Config{ShuntMicroOhms: 2000, MaxCurrentUA: 20_000_000, Preset: PresetShuntOnly, BusTolerance: 0.01}, 0x402D, 2116 * us, 0},
		{"overrides", Config{ShuntMicroOhms: 2000, MaxCurrentUA: 10_000_000, Averages: 4, BusConvTime: 332 * us, ShuntConvTime: 2116 * us}, 0x42AF, 4 * 2448 * us, 4 * 365200 * time.Nanosecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rig(t, tt.cfg, inatest.Options{})
			if got := r.Chip.Reg(inasim.RegConfig); got != tt.wantConfig {
				t.Errorf("config register 0x%04x, want 0x%04x", got, tt.wantConfig)
			}
			info := r.Dev.Info()
			if info.Kind != drivers.KindConversion || info.Period != tt.period || info.MaxPeriod != tt.period+tt.period/10 {
				t.Errorf("Info %v period %v max %v, want adc %v and +10%%", info.Kind, info.Period, info.MaxPeriod, tt.period)
			}
			if shuntOnly := tt.cfg.Preset == PresetShuntOnly; (info.BusAssumed != nil) != shuntOnly {
				t.Errorf("BusAssumed %+v: only shunt-only assumes its bus voltage", info.BusAssumed)
			}
			s := r.Next(t)
			if s.Dead != tt.dead {
				t.Errorf("Dead %v, want %v", s.Dead, tt.dead)
			}
		})
	}
	if len(Presets()) != 4 || Presets()[0] != PresetPrecise || Preset(0) != PresetPrecise {
		t.Fatalf("Presets() = %v: the default must come first and be the zero value", Presets())
	}
}

func TestProbe(t *testing.T) {
	bus := inasim.NewBus("sim", nil)
	bus.Add(inasim.INA226, 0x40)
	bus.Add(inasim.INA219, 0x41)
	if err := Probe(bus, 0x40); err != nil {
		t.Fatalf("INA226 not recognised: %v", err)
	}
	if err := Probe(bus, 0x41); !errors.Is(err, drivers.ErrNoDevice) {
		t.Fatalf("INA219 at 0x41: got %v, want ErrNoDevice", err)
	}
	if err := Probe(bus, 0x42); err == nil || errors.Is(err, drivers.ErrNoDevice) {
		t.Fatalf("empty address: got %v, want a bus error", err)
	}
}

func TestReadVoltages(t *testing.T) {
	bus := inasim.NewBus("sim", nil)
	c := bus.Add(inasim.INA226, addr)
	c.SetInputs(20*physic.MilliVolt, 11980*physic.MilliVolt)
	c.Convert()
	b, sh, err := ReadVoltages(bus, addr)
	if err != nil || b != 11980*physic.MilliVolt || sh != 20*physic.MilliVolt {
		t.Fatalf("ReadVoltages = %v, %v, %v; want 11.98 V, 20 mV", b, sh, err)
	}
}

// TestConversions holds the datasheet's worked example and its edges: the
// registers the chip computes and the sample the driver makes of them.
func TestConversions(t *testing.T) {
	mV := physic.MilliVolt
	tests := []struct {
		name                 string
		shunt, bus           physic.ElectricPotential
		regShunt, regBus     uint16
		regCurrent, regPower uint16
		current              physic.ElectricCurrent
		power                physic.Power
		wantShunt, wantBus   physic.ElectricPotential
		overflow             bool
	}{
		{"datasheet example", 20 * mV, 11980 * mV, 8000, 9584, 10000, 4792,
			10 * physic.Ampere, 119800 * physic.MilliWatt, 20 * mV, 11980 * mV, false},
		{"negative current", -10 * mV, 11980 * mV, 0xF060, 9584, 0xEC78, 2396,
			-5 * physic.Ampere, -59900 * physic.MilliWatt, -10 * mV, 11980 * mV, false},
		{"zero bus", 4 * mV, 0, 1600, 0, 2000, 0,
			2 * physic.Ampere, 0, 4 * mV, 0, false},
		{"beyond max current", 40 * mV, 12000 * mV, 16000, 9600, 20000, 9600,
			20 * physic.Ampere, 240 * physic.Watt, 40 * mV, 12000 * mV, true},
		{"math overflow", 80 * mV, 12000 * mV, 32000, 9600, 32767, 15728,
			32767 * physic.MilliAmpere, 393200 * physic.MilliWatt, 80 * mV, 12000 * mV, true},
		{"shunt saturated", 90 * mV, 5000 * mV, 32767, 4000, 32767, 6553,
			32767 * physic.MilliAmpere, 163825 * physic.MilliWatt, 81917500 * physic.NanoVolt, 5000 * mV, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rig(t, example, inatest.Options{Setup: func(c *inasim.Chip) { c.SetInputs(tt.shunt, tt.bus) }})
			if got := r.Chip.Reg(inasim.RegCal); got != 2560 {
				t.Fatalf("CAL register %d, want 2560", got)
			}
			s := r.Next(t)
			for _, reg := range []struct {
				reg  byte
				want uint16
			}{{inasim.RegShunt, tt.regShunt}, {inasim.RegBus, tt.regBus}, {inasim.RegCurrent, tt.regCurrent}, {inasim.RegPower, tt.regPower}} {
				if got := r.Chip.Reg(reg.reg); got != reg.want {
					t.Errorf("register %d = %d (0x%04x), want %d", reg.reg, got, got, reg.want)
				}
			}
			if s.Current != tt.current || s.Power != tt.power || s.Shunt != tt.wantShunt || s.Bus != tt.wantBus {
				t.Errorf("sample I=%v P=%v Vsh=%v Vbus=%v, want %v, %v, %v, %v",
					s.Current, s.Power, s.Shunt, s.Bus, tt.current, tt.power, tt.wantShunt, tt.wantBus)
			}
			if s.Overflow != tt.overflow {
				t.Errorf("Overflow = %v, want %v", s.Overflow, tt.overflow)
			}
		})
	}
}

func TestAccuracy(t *testing.T) {
	r := rig(t, example, inatest.Options{})
	a := r.Dev.Info().Accuracy
	if a.GainErr != 0.002 || a.DeclaredPPM != 0 || a.Quantum != 0 {
		t.Fatalf("GainErr %v DeclaredPPM %v Quantum %v", a.GainErr, a.DeclaredPPM, a.Quantum)
	}
	// 12 V × 10 µV / 2 mΩ = 60 mW; 7.5 mV × 15 A = 112.5 mW; Power_LSB 25 mW.
	if got, want := a.Offset(12*physic.Volt), 197500*physic.MicroWatt; got != want {
		t.Fatalf("Offset(12 V) = %v, want %v", got, want)
	}
	if a.Offset(-12*physic.Volt) != a.Offset(12*physic.Volt) || a.Offset(24*physic.Volt) <= a.Offset(12*physic.Volt) {
		t.Fatal("offset not symmetric or not growing with bus voltage")
	}
	// 15 A × (12 V × 1.001 + 7.5 mV) = 180.2925 W.
	if got, want := a.FullScale(12*physic.Volt), 180292500*physic.MicroWatt; got != want {
		t.Fatalf("FullScale(12 V) = %v, want %v", got, want)
	}
	cfg := example
	cfg.DeclaredPPM = 5000
	if got := rig(t, cfg, inatest.Options{}).Dev.Info().Accuracy.DeclaredPPM; got != 5000 {
		t.Fatalf("DeclaredPPM %d, want 5000", got)
	}
}

func TestClosed(t *testing.T) {
	r := rig(t, example, inatest.Options{})
	r.Dev.Close()
	if _, err := r.Dev.Next(context.Background()); err == nil {
		t.Fatal("Next after Close succeeded")
	}
}

func TestDerivedLSBFitsRegister(t *testing.T) {
	tests := []struct {
		r, imax int64
	}{{2000, 1_000_000}, {2000, 10_000_000}, {100, 100_000}, {50_000, 1_600_000}}
	for _, tt := range tests {
		r := rig(t, Config{ShuntMicroOhms: tt.r, MaxCurrentUA: tt.imax}, inatest.Options{})
		cal := r.Chip.Reg(inasim.RegCal)
		if cal == 0 || cal > 0x7FFF || cal != r.Dev.Calibration() {
			t.Fatalf("R=%d Imax=%d: CAL %d", tt.r, tt.imax, cal)
		}
		if lsb := r.Dev.CurrentLSB(); lsb*32767 < float64(tt.imax)*1000 {
			t.Fatalf("R=%d Imax=%d: Current_LSB %.1f nA cannot reach the maximum", tt.r, tt.imax, lsb)
		}
	}
}

// BenchmarkNext measures one Next on the simulated bus at the fast preset
// and reports the register reads it spends per conversion.
func BenchmarkNext(b *testing.B) {
	r := rig(b, withPreset(PresetFast), inatest.Options{Setup: randomLoad(time.Hour, 1)})
	reads := func() int {
		n := 0
		for reg := byte(0); reg <= 7; reg++ {
			n += r.Chip.Reads(reg)
		}
		return n
	}
	ctx := context.Background()
	before := reads()
	for b.Loop() {
		if _, err := r.Dev.Next(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(reads()-before)/float64(b.N), "reads/op")
}
