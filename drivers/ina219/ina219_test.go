package ina219

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"meshd/drivers"
	"meshd/drivers/inasim"
	"meshd/drivers/internal/inatest"

	"periph.io/x/conn/v3/i2c"
)

const addr = 0x45

// example is SBOS448 §8.5 Table 3: 2 mΩ, 16 V bus range, 40 mV shunt
// range, 12-bit ADCs, Current_LSB 1 mA.
var example = Config{
	ShuntMicroOhms:     2000,
	MaxCurrentUA:       10_000_000,
	CurrentLSBNanoAmps: 1_000_000,
	BusRangeVolts:      16,
	ShuntRangeMV:       40,
	BusADC:             ADC9Bit,
	ShuntADC:           ADC9Bit,
	PollInterval:       100 * time.Microsecond,
}

func open(t *testing.T, cfg Config) (*Dev, *inasim.Chip) {
	t.Helper()
	return inatest.Open(t, inasim.INA219, addr, func(bus i2c.Bus, addr uint16) (*Dev, error) { return Open(bus, addr, cfg) })
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bus := inasim.NewBus("sim")
			chip := bus.Add(inasim.INA219, addr)
			if _, err := Open(bus, addr, tt.cfg); err == nil {
				t.Fatal("Open accepted a bad configuration")
			}
			if chip.Writes(inasim.RegCal) != 0 {
				t.Fatal("calibration written for a refused configuration")
			}
		})
	}
}

func TestConfigRegister(t *testing.T) {
	tests := []struct {
		cfg        Config
		wantConfig uint16
		wantPeriod time.Duration
	}{
		{Config{ShuntMicroOhms: 2000, MaxCurrentUA: 10_000_000, BusRangeVolts: 16, ShuntRangeMV: 40, BusADC: ADC12Bit, ShuntADC: ADC12Bit}, 0x019F, 1064 * time.Microsecond},
		{Config{ShuntMicroOhms: 100_000, MaxCurrentUA: 3_200_000}, 0x399F, 1064 * time.Microsecond},
		{Config{ShuntMicroOhms: 100, MaxCurrentUA: 1_000_000, BusADC: ADC9Bit, ShuntADC: ADC10Bit}, 0x200F, 232 * time.Microsecond},
		{Config{ShuntMicroOhms: 100_000, MaxCurrentUA: 300_000, ShuntADC: ADCAvg128}, 0x21FF, 532*time.Microsecond + 68100*time.Microsecond},
	}
	for _, tt := range tests {
		d, chip := open(t, tt.cfg)
		if got := chip.Reg(inasim.RegConfig); got != tt.wantConfig {
			t.Errorf("config 0x%04x, want 0x%04x", got, tt.wantConfig)
		}
		if d.UpdatePeriod() != tt.wantPeriod {
			t.Errorf("period %v, want %v", d.UpdatePeriod(), tt.wantPeriod)
		}
	}
}

func TestProbe(t *testing.T) {
	bus := inasim.NewBus("sim")
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
	overflowCfg := example
	overflowCfg.CurrentLSBNanoAmps = 500_000 // CAL 40960
	tests := []struct {
		name                   string
		cfg                    Config
		shuntNV, busUV         int64
		regs                   [4]uint16 // shunt, bus (raw, no flags), current, power
		wantCurUA, wantPowUW   int64
		wantShuntNV, wantBusUV int64
		wantOverflow           bool
	}{
		{"datasheet example", example, 20_000_000, 11_980_000, [4]uint16{0x07D0, 0x5D98, 0x2710, 0x1766},
			10_000_000, 119_800_000, 20_000_000, 11_980_000, false},
		{"negative current", example, -10_000_000, 11_980_000, [4]uint16{0xFC18, 0x5D98, 0xEC78, 2995},
			-5_000_000, -59_900_000, -10_000_000, 11_980_000, false},
		{"math overflow", overflowCfg, 35_000_000, 12_000_000, [4]uint16{3500, 3000 << 3, 32767, 19660},
			16_383_500, 196_600_000, 35_000_000, 12_000_000, true},
		{"shunt at range end", example, 45_000_000, 5_000_000, [4]uint16{4000, 1250 << 3, 20000, 5000},
			20_000_000, 100_000_000, 40_000_000, 5_000_000, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, chip := open(t, tt.cfg)
			s := inatest.ConvertThenNext(t, d, chip, tt.shuntNV, tt.busUV)
			for i, reg := range []byte{inasim.RegShunt, inasim.RegBus, inasim.RegCurrent, inasim.RegPower} {
				if got := chip.Reg(reg); got != tt.regs[i] {
					t.Errorf("register %d = 0x%04x, want 0x%04x", reg, got, tt.regs[i])
				}
			}
			if s.CurrentUA != tt.wantCurUA || s.PowerUW != tt.wantPowUW || s.ShuntNV != tt.wantShuntNV || s.BusUV != tt.wantBusUV {
				t.Errorf("sample I=%d µA P=%d µW Vsh=%d nV Vbus=%d µV, want %d, %d, %d, %d",
					s.CurrentUA, s.PowerUW, s.ShuntNV, s.BusUV, tt.wantCurUA, tt.wantPowUW, tt.wantShuntNV, tt.wantBusUV)
			}
			if s.Overflow != tt.wantOverflow {
				t.Errorf("Overflow = %v, want %v", s.Overflow, tt.wantOverflow)
			}
		})
	}
}

// TestLockstepNeverTwiceNeverSkipped checks both reported CNVR behaviours.
func TestLockstepNeverTwiceNeverSkipped(t *testing.T) {
	for _, clearsOnBus := range []bool{false, true} {
		t.Run(fmt.Sprintf("clears on bus %v", clearsOnBus), func(t *testing.T) {
			d, chip := open(t, example)
			chip.CNVRClearsOnBusRead = clearsOnBus
			inatest.Lockstep(t, d, chip, 100, 3, func(i int) (int64, int64) { return 10000, int64(4000 * (i + 1)) })
		})
	}
}

func TestSpontaneousResetRestored(t *testing.T) {
	d, chip := open(t, example)
	if s := inatest.ConvertThenNext(t, d, chip, 20_000_000, 11_980_000); s.CurrentUA != 10_000_000 {
		t.Fatalf("before reset: %d µA", s.CurrentUA)
	}
	chip.PowerCycle()
	chip.SetInputs(20_000_000, 11_980_000)
	chip.Convert() // converted with CAL = 0 in the power-on configuration
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	go func() {
		for chip.Reg(inasim.RegCal) != 20480 && ctx.Err() == nil {
			time.Sleep(100 * time.Microsecond)
		}
		chip.SetInputs(-2_000_000, 12_000_000)
		chip.Convert()
	}()
	s, err := d.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.CurrentUA != -1_000_000 || s.BusUV != 12_000_000 || d.Resets() != 1 {
		t.Fatalf("got I=%d V=%d resets=%d, want the post-repair conversion and 1 reset", s.CurrentUA, s.BusUV, d.Resets())
	}
	if chip.Reg(inasim.RegConfig) != 0x0007 {
		t.Fatalf("config 0x%04x not restored", chip.Reg(inasim.RegConfig))
	}
}

func TestNACKBurst(t *testing.T) {
	d, chip := open(t, example)
	chip.SetInputs(20_000_000, 11_980_000)
	chip.Convert()
	chip.FailNext(3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for range 3 {
		if s, err := d.Next(ctx); err == nil || !errors.Is(err, inasim.ErrNACK) {
			t.Fatalf("during burst got %+v, %v; want a wrapped NACK", s, err)
		}
	}
	// CNVR clears only on a Power read, so the pending conversion survives.
	s, err := d.Next(ctx)
	if err != nil || s.CurrentUA != 10_000_000 || s.PowerUW != 119_800_000 {
		t.Fatalf("after burst got %+v, %v", s, err)
	}
}

func TestAccuracy(t *testing.T) {
	d, _ := open(t, example)
	a := d.Accuracy()
	if a.GainErr != 0.01 {
		t.Fatalf("GainErr %v", a.GainErr)
	}
	// 12 V × 100 µV / 2 mΩ = 600 mW, plus Power_LSB 20 mW.
	if got := a.OffsetUW(12_000_000); got != 620_000 {
		t.Fatalf("OffsetUW(12 V) = %v, want 620000", got)
	}
}
