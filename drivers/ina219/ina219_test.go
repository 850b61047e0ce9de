package ina219

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"meshd/drivers"
	"meshd/drivers/drivertest"
	"meshd/drivers/inasim"
	"meshd/drivers/internal/inatest"

	"periph.io/x/conn/v3/i2c"
	"periph.io/x/conn/v3/physic"
)

const addr = 0x45

// example is SBOS448 §8.5 Table 3: 2 mΩ, 16 V bus range, 40 mV shunt
// range, Current_LSB 1 mA.
var example = Config{
	ShuntMicroOhms:     2000,
	MaxCurrentUA:       10_000_000,
	CurrentLSBNanoAmps: 1_000_000,
	BusRangeVolts:      16,
	ShuntRangeMV:       40,
	Preset:             PresetFast,
}

// board is a 2 mΩ shunt rated 20 A on the 32 V range.
var board = Config{ShuntMicroOhms: 2000, MaxCurrentUA: 20_000_000}

func rig(t testing.TB, cfg Config, o inatest.Options) *inatest.Rig[*Dev] {
	t.Helper()
	return inatest.Open(t, inasim.INA219, addr, o, func(bus i2c.Bus, a uint16, c drivers.Clock) (*Dev, error) {
		cfg.Clock = c
		return Open(bus, a, cfg)
	})
}

func randomLoad(span time.Duration, seed uint64) func(*inasim.Chip) {
	return func(c *inasim.Chip) {
		c.SetLoad(inatest.RandomLoad(drivertest.Epoch, span, 15*physic.Ampere, seed))
	}
}

func TestCalibration(t *testing.T) {
	tests := []struct {
		name    string
		r, lsb  int64
		want    uint16
		wantErr bool
	}{
		{"datasheet example 2mΩ 1mA", 2000, 1_000_000, 20480, false},
		{"0.1Ω 100µA", 100_000, 100_000, 4096, false},
		{"odd value loses bit 0", 3000, 1_000_000, 13652, false},
		{"0xFFFE fits", 1, 625_010_000, 65534, false},
		{"0xFFFF refused", 1, 625_005_722, 0, true},
		{"overflows 16 bits", 100, 1_000_000, 0, true},
		{"truncates to zero", 1_000_000, 100_000_000_000, 0, true},
		{"zero shunt", 0, 1, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Calibration(tt.r, tt.lsb)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("Calibration(%d, %d) = %d, %v; want %d, error %v", tt.r, tt.lsb, got, err, tt.want, tt.wantErr)
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
		{"beyond 320 mV", Config{ShuntMicroOhms: 100_000, MaxCurrentUA: 4_000_000}},
		{"beyond chosen range", Config{ShuntMicroOhms: 100_000, MaxCurrentUA: 1_000_000, ShuntRangeMV: 40}},
		{"range not a setting", Config{ShuntMicroOhms: 2000, MaxCurrentUA: 1_000_000, ShuntRangeMV: 50}},
		{"bus range", Config{ShuntMicroOhms: 2000, MaxCurrentUA: 1_000_000, BusRangeVolts: 24}},
		{"calibration overflow", Config{ShuntMicroOhms: 100, MaxCurrentUA: 1_000_000, CurrentLSBNanoAmps: 1_000_000}},
		{"adc", Config{ShuntMicroOhms: 2000, MaxCurrentUA: 1_000_000, BusADC: 99}},
		{"shunt-only without tolerance", Config{ShuntMicroOhms: 2000, MaxCurrentUA: 1_000_000, Preset: PresetShuntOnly}},
		{"period shorter than the reads", Config{ShuntMicroOhms: 2000, MaxCurrentUA: 1_000_000, BusADC: ADC9Bit, ShuntADC: ADC9Bit}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bus := inasim.NewBus("sim", nil)
			chip := bus.Add(inasim.INA219, addr)
			tt.cfg.Clock = bus.Clock()
			if _, err := Open(bus, addr, tt.cfg); err == nil {
				t.Fatal("Open accepted a bad configuration")
			}
			if tt.name != "period shorter than the reads" && chip.Writes(inasim.RegCal) != 0 {
				t.Fatal("calibration written for a refused configuration")
			}
		})
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
		{"default", board, 0x2067, 8594 * us, 92400 * time.Nanosecond},
		{"fast", Config{ShuntMicroOhms: 2000, MaxCurrentUA: 20_000_000, Preset: PresetFast}, 0x2057, 2214 * us, 92400 * time.Nanosecond},
		{"kernel", Config{ShuntMicroOhms: 2000, MaxCurrentUA: 20_000_000, Preset: PresetKernel}, 0x219F, 1064 * us, 585200 * time.Nanosecond},
		{"shunt-only", Config{ShuntMicroOhms: 2000, MaxCurrentUA: 20_000_000, Preset: PresetShuntOnly, BusTolerance: 0.01}, 0x2055, 2130 * us, 0},
		{"datasheet 16 V 40 mV", example, 0x0057, 2214 * us, 92400 * time.Nanosecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rig(t, tt.cfg, inatest.Options{})
			if got := r.Chip.Reg(inasim.RegConfig); got != tt.wantConfig {
				t.Errorf("config 0x%04x, want 0x%04x", got, tt.wantConfig)
			}
			info := r.Dev.Info()
			if info.Kind != drivers.KindConversion || info.Period != tt.period || info.MaxPeriod != tt.period+tt.period/10 {
				t.Errorf("Info %v period %v max %v, want %v", info.Kind, info.Period, info.MaxPeriod, tt.period)
			}
			if s := r.Next(t); s.Dead != tt.dead {
				t.Errorf("Dead %v, want %v", s.Dead, tt.dead)
			}
		})
	}
}

func TestProbe(t *testing.T) {
	bus := inasim.NewBus("sim", nil)
	bus.Add(inasim.INA219, 0x40)
	bus.Add(inasim.INA226, 0x41)
	if err := Probe(bus, 0x40); err != nil {
		t.Fatalf("INA219 not recognised: %v", err)
	}
	if err := Probe(bus, 0x41); !errors.Is(err, drivers.ErrNoDevice) {
		t.Fatalf("INA226: got %v, want ErrNoDevice", err)
	}
	if err := Probe(bus, 0x42); err == nil || errors.Is(err, drivers.ErrNoDevice) {
		t.Fatalf("empty address: got %v, want a bus error", err)
	}
}

func TestConversions(t *testing.T) {
	mV := physic.MilliVolt
	overflowCfg := example
	overflowCfg.CurrentLSBNanoAmps = 500_000 // CAL 40960
	tests := []struct {
		name               string
		cfg                Config
		shunt, bus         physic.ElectricPotential
		regs               [4]uint16 // shunt, bus (raw, no flags), current, power
		current            physic.ElectricCurrent
		power              physic.Power
		wantShunt, wantBus physic.ElectricPotential
		overflow           bool
	}{
		{"datasheet example", example, 20 * mV, 11980 * mV, [4]uint16{0x07D0, 0x5D98, 0x2710, 0x1766},
			10 * physic.Ampere, 119800 * physic.MilliWatt, 20 * mV, 11980 * mV, false},
		{"negative current", example, -10 * mV, 11980 * mV, [4]uint16{0xFC18, 0x5D98, 0xEC78, 2995},
			-5 * physic.Ampere, -59900 * physic.MilliWatt, -10 * mV, 11980 * mV, false},
		{"math overflow", overflowCfg, 35 * mV, 12000 * mV, [4]uint16{3500, 3000 << 3, 32767, 19660},
			16383500 * physic.MicroAmpere, 196600 * physic.MilliWatt, 35 * mV, 12000 * mV, true},
		{"shunt at range end", example, 45 * mV, 5000 * mV, [4]uint16{4000, 1250 << 3, 20000, 5000},
			20 * physic.Ampere, 100 * physic.Watt, 40 * mV, 5000 * mV, true},
		{"beyond max current", example, 30 * mV, 5000 * mV, [4]uint16{3000, 1250 << 3, 15000, 3750},
			15 * physic.Ampere, 75 * physic.Watt, 30 * mV, 5000 * mV, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rig(t, tt.cfg, inatest.Options{Setup: func(c *inasim.Chip) { c.SetInputs(tt.shunt, tt.bus) }})
			s := r.Next(t)
			for i, reg := range []byte{inasim.RegShunt, inasim.RegBus, inasim.RegCurrent, inasim.RegPower} {
				if got := r.Chip.Reg(reg); got != tt.regs[i] {
					t.Errorf("register %d = 0x%04x, want 0x%04x", reg, got, tt.regs[i])
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

// TestEveryConversionOnce checks both reported CNVR behaviours over 10 000
// conversions of a load that changes within every conversion: each comes
// back once, whole, within its uncertainty, contiguous after the first.
func TestEveryConversionOnce(t *testing.T) {
	for _, tt := range []struct {
		preset      Preset
		speed       physic.Frequency
		n           int
		clearsOnBus bool
	}{
		{PresetFast, 400 * physic.KiloHertz, 10_000, false},
		{PresetFast, 400 * physic.KiloHertz, 10_000, true},
		{PresetPrecise, 100 * physic.KiloHertz, 2_000, false},
		{PresetPrecise, 100 * physic.KiloHertz, 2_000, true},
	} {
		t.Run(fmt.Sprintf("%v %v clears on bus %v", tt.preset, tt.speed, tt.clearsOnBus), func(t *testing.T) {
			cfg := board
			cfg.Preset = tt.preset
			r := rig(t, cfg, inatest.Options{Speed: tt.speed, Setup: func(c *inasim.Chip) {
				c.SetCNVRClearsOnBusRead(tt.clearsOnBus)
				randomLoad(time.Minute, 9)(c)
			}})
			rep := inatest.Check(t, inasim.INA219, r.Run(t, tt.n), r.Chip.Conversions(), false)
			if rep.Missed != 0 || rep.Contiguous != tt.n-1 {
				t.Fatalf("missed %d, contiguous %d of %d", rep.Missed, rep.Contiguous, tt.n)
			}
			t.Logf("uncertainty median %v, max %v", rep.Median(), rep.Max())
		})
	}
}

func TestSlowClockNeverChains(t *testing.T) {
	cfg := board
	cfg.Preset = PresetFast
	r := rig(t, cfg, inatest.Options{Setup: func(c *inasim.Chip) {
		c.SetClockFactor(1.3)
		randomLoad(time.Minute, 9)(c)
	}})
	rep := inatest.Check(t, inasim.INA219, r.Run(t, 500), r.Chip.Conversions(), false)
	if rep.Contiguous != 0 || rep.Missed != 0 {
		t.Fatalf("%d readings of a 30 %%-slow chip chained (missed %d)", rep.Contiguous, rep.Missed)
	}
}

func TestPowerCycleRepaired(t *testing.T) {
	r := rig(t, example, inatest.Options{Setup: func(c *inasim.Chip) { c.SetInputs(20*physic.MilliVolt, 11980*physic.MilliVolt) }})
	if s := r.Next(t); s.Current != 10*physic.Ampere {
		t.Fatalf("before reset: %v", s.Current)
	}
	r.Chip.PowerCycle() // the power-on configuration converts with CAL = 0
	r.Chip.SetInputs(-2*physic.MilliVolt, 12*physic.Volt)
	s := r.Next(t)
	if s.Current != -physic.Ampere || s.Bus != 12*physic.Volt || s.Contiguous || r.Dev.Resets() != 1 {
		t.Fatalf("got I=%v V=%v contiguous %v resets=%d, want the post-repair conversion, not chained, 1 reset", s.Current, s.Bus, s.Contiguous, r.Dev.Resets())
	}
	if r.Chip.Reg(inasim.RegConfig) != 0x0057 {
		t.Fatalf("config 0x%04x not restored", r.Chip.Reg(inasim.RegConfig))
	}
}

func TestNACKBurst(t *testing.T) {
	r := rig(t, example, inatest.Options{Setup: func(c *inasim.Chip) { c.SetInputs(20*physic.MilliVolt, 11980*physic.MilliVolt) }})
	r.Next(t)
	r.Chip.FailNext(3)
	for range 3 {
		if s, err := r.Dev.Next(context.Background()); !errors.Is(err, inasim.ErrNACK) {
			t.Fatalf("during burst got %+v, %v; want a wrapped NACK", s, err)
		}
	}
	s := r.Next(t)
	if s.Current != 10*physic.Ampere || s.Power != 119800*physic.MilliWatt || s.Contiguous {
		t.Fatalf("after burst got %+v", s)
	}
}

func TestShuntOnly(t *testing.T) {
	cfg := Config{ShuntMicroOhms: 2000, MaxCurrentUA: 20_000_000, Preset: PresetShuntOnly, BusTolerance: 0.02, BusEvery: 20 * time.Millisecond}
	r := rig(t, cfg, inatest.Options{Setup: randomLoad(time.Minute, 3)})
	var samples []drivers.Sample
	for r.Clock.Now().Before(drivertest.Epoch.Add(100 * time.Millisecond)) {
		s := r.Next(t)
		if s.Dead != 0 || s.Bus < 11*physic.Volt || s.Bus > 13*physic.Volt {
			t.Fatalf("shunt-only reading with Dead %v, bus %v", s.Dead, s.Bus)
		}
		samples = append(samples, s)
	}
	rep := inatest.Check(t, inasim.INA219, samples, r.Chip.Conversions(), true)
	if brackets := (r.Chip.Writes(inasim.RegConfig) - 1) / 2; rep.Delivered-rep.Contiguous != brackets {
		t.Fatalf("%d readings broke the chain, %d bus brackets", rep.Delivered-rep.Contiguous, brackets)
	}
}

func TestAccuracy(t *testing.T) {
	a := rig(t, example, inatest.Options{}).Dev.Info().Accuracy
	if a.GainErr != 0.01 {
		t.Fatalf("GainErr %v", a.GainErr)
	}
	// 12 V × 100 µV / 2 mΩ = 600 mW, plus Power_LSB 20 mW.
	if got := a.Offset(12 * physic.Volt); got != 620*physic.MilliWatt {
		t.Fatalf("Offset(12 V) = %v, want 620 mW", got)
	}
	// 10 A × 12 V × 1.005.
	if got := a.FullScale(12 * physic.Volt); got != 120600*physic.MilliWatt {
		t.Fatalf("FullScale(12 V) = %v, want 120.6 W", got)
	}
}
