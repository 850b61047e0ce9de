package ina226

import (
	"context"
	"errors"
	"testing"
	"time"

	"meshd/drivers"
	"meshd/drivers/inasim"
	"meshd/drivers/internal/inatest"

	"periph.io/x/conn/v3/i2c"
)

const addr = 0x40

// example is the SBOS547 worked example: 2 mΩ shunt, Current_LSB 1 mA.
var example = Config{
	ShuntMicroOhms:     2000,
	MaxCurrentUA:       15_000_000,
	CurrentLSBNanoAmps: 1_000_000,
	Averages:           1,
	BusConvTime:        140 * time.Microsecond,
	ShuntConvTime:      140 * time.Microsecond,
	PollInterval:       100 * time.Microsecond,
}

func open(t *testing.T, cfg Config) (*Dev, *inasim.Chip) {
	t.Helper()
	return inatest.Open(t, inasim.INA226, addr, func(bus i2c.Bus, addr uint16) (*Dev, error) { return Open(bus, addr, cfg) })
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bus := inasim.NewBus("sim")
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

func TestConfigRegisterAndPeriod(t *testing.T) {
	tests := []struct {
		avg        int
		vbus, vsh  time.Duration
		wantConfig uint16
		wantPeriod time.Duration
	}{
		{0, 0, 0, 0x4527, 16 * 2200 * time.Microsecond}, // the kernel's default
		{1, 140 * time.Microsecond, 140 * time.Microsecond, 0x4007, 280 * time.Microsecond},
		{1024, 8244 * time.Microsecond, 588 * time.Microsecond, 0x4FDF, 1024 * 8832 * time.Microsecond},
		{4, 332 * time.Microsecond, 2116 * time.Microsecond, 0x42AF, 4 * 2448 * time.Microsecond},
	}
	for _, tt := range tests {
		cfg := Config{ShuntMicroOhms: 2000, MaxCurrentUA: 10_000_000, Averages: tt.avg, BusConvTime: tt.vbus, ShuntConvTime: tt.vsh}
		d, chip := open(t, cfg)
		if got := chip.Reg(inasim.RegConfig); got != tt.wantConfig {
			t.Errorf("avg %d: config register 0x%04x, want 0x%04x", tt.avg, got, tt.wantConfig)
		}
		if d.UpdatePeriod() != tt.wantPeriod {
			t.Errorf("avg %d: UpdatePeriod %v, want %v", tt.avg, d.UpdatePeriod(), tt.wantPeriod)
		}
	}
}

func TestProbe(t *testing.T) {
	bus := inasim.NewBus("sim")
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

func TestConversions(t *testing.T) {
	tests := []struct {
		name                   string
		shuntNV, busUV         int64
		regShunt, regBus       uint16
		regCurrent, regPower   uint16
		wantCurUA, wantPowUW   int64
		wantShuntNV, wantBusUV int64
		wantOverflow           bool
	}{
		{"datasheet example", 20_000_000, 11_980_000, 8000, 9584, 10000, 4792,
			10_000_000, 119_800_000, 20_000_000, 11_980_000, false},
		{"negative current", -10_000_000, 11_980_000, 0xF060, 9584, 0xEC78, 2396,
			-5_000_000, -59_900_000, -10_000_000, 11_980_000, false},
		{"zero bus", 4_000_000, 0, 1600, 0, 2000, 0,
			2_000_000, 0, 4_000_000, 0, false},
		{"math overflow", 80_000_000, 12_000_000, 32000, 9600, 32767, 15728,
			32_767_000, 393_200_000, 80_000_000, 12_000_000, true},
		{"shunt saturated", 90_000_000, 5_000_000, 32767, 4000, 32767, 6553,
			32_767_000, 163_825_000, 81_917_500, 5_000_000, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, chip := open(t, example)
			if got := chip.Reg(inasim.RegCal); got != 2560 {
				t.Fatalf("CAL register %d, want 2560", got)
			}
			s := inatest.ConvertThenNext(t, d, chip, tt.shuntNV, tt.busUV)
			for _, r := range []struct {
				reg  byte
				want uint16
			}{{inasim.RegShunt, tt.regShunt}, {inasim.RegBus, tt.regBus}, {inasim.RegCurrent, tt.regCurrent}, {inasim.RegPower, tt.regPower}} {
				if got := chip.Reg(r.reg); got != r.want {
					t.Errorf("register %d = %d (0x%04x), want %d", r.reg, got, got, r.want)
				}
			}
			if s.CurrentUA != tt.wantCurUA || s.PowerUW != tt.wantPowUW || s.ShuntNV != tt.wantShuntNV || s.BusUV != tt.wantBusUV {
				t.Errorf("sample I=%d µA P=%d µW Vsh=%d nV Vbus=%d µV, want %d, %d, %d, %d",
					s.CurrentUA, s.PowerUW, s.ShuntNV, s.BusUV, tt.wantCurUA, tt.wantPowUW, tt.wantShuntNV, tt.wantBusUV)
			}
			if s.Overflow != tt.wantOverflow {
				t.Errorf("Overflow = %v, want %v", s.Overflow, tt.wantOverflow)
			}
			if s.Averaged != 280*time.Microsecond || s.At.IsZero() {
				t.Errorf("Averaged %v, At %v", s.Averaged, s.At)
			}
		})
	}
}

// TestLockstepNeverTwiceNeverSkipped converts at random moments relative
// to the driver's polling, each one only after the consumer got the
// previous one (a consumer that keeps up), and checks that the driver
// returns every conversion once, in order.
func TestLockstepNeverTwiceNeverSkipped(t *testing.T) {
	d, chip := open(t, example)
	inatest.Lockstep(t, d, chip, 150, 1, func(i int) (int64, int64) { return int64(2500 * (i + 1)), int64(1_000_000 + 1250*i) })
	if _, _, over := chip.Stats(); over != 0 {
		t.Fatalf("%d conversions were overwritten before being read", over)
	}
}

// TestFreeRunningNoRepeats runs the chip on its own clock and checks that
// no conversion is ever returned twice or out of order.
func TestFreeRunningNoRepeats(t *testing.T) {
	d, chip := open(t, example)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	go chip.Run(ctx, 2*time.Millisecond, func(n uint64) (int64, int64) { return 1_000_000, int64(n) * 1250 })
	last := int64(-1)
	for i := range 100 {
		s, err := d.Next(ctx)
		if err != nil {
			t.Fatalf("sample %d: %v", i, err)
		}
		if s.BusUV <= last {
			t.Fatalf("sample %d: bus %d µV after %d: returned twice or out of order", i, s.BusUV, last)
		}
		last = s.BusUV
	}
}

func TestSpontaneousResetRestored(t *testing.T) {
	d, chip := open(t, example)
	for i := range 3 {
		s := inatest.ConvertThenNext(t, d, chip, 20_000_000, 11_980_000)
		if s.CurrentUA != 10_000_000 {
			t.Fatalf("before reset, sample %d: %d µA", i, s.CurrentUA)
		}
	}
	chip.PowerCycle()
	if chip.Reg(inasim.RegCal) != 0 || chip.Reg(inasim.RegConfig) != 0x4127 {
		t.Fatal("simulated power cycle did not restore power-on values")
	}
	// The chip keeps converting in its power-on mode, with CAL = 0.
	chip.SetInputs(20_000_000, 11_980_000)
	chip.Convert()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	got := make(chan drivers.Sample, 1)
	go func() {
		s, err := d.Next(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- s
	}()
	// Wait for the driver to repair the chip, then convert again.
	for chip.Reg(inasim.RegCal) != 2560 {
		if ctx.Err() != nil {
			t.Fatal("driver never restored the calibration")
		}
		time.Sleep(100 * time.Microsecond)
	}
	chip.SetInputs(-4_000_000, 12_000_000)
	chip.Convert()
	s := <-got
	if s.CurrentUA != -2_000_000 || s.BusUV != 12_000_000 {
		t.Fatalf("after reset got I=%d µA V=%d µV, want the post-repair conversion (-2 A, 12 V)", s.CurrentUA, s.BusUV)
	}
	if d.Resets() != 1 {
		t.Fatalf("Resets() = %d, want 1", d.Resets())
	}
	if chip.Reg(inasim.RegConfig) != 0x4007 {
		t.Fatalf("config 0x%04x not restored", chip.Reg(inasim.RegConfig))
	}
}

func TestNACKBurst(t *testing.T) {
	d, chip := open(t, example)
	chip.SetInputs(20_000_000, 11_980_000)
	chip.Convert()
	chip.FailNext(4)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var errs int
	for range 4 {
		s, err := d.Next(ctx)
		if err == nil {
			t.Fatalf("Next returned %+v during a NACK burst", s)
		}
		if !errors.Is(err, inasim.ErrNACK) {
			t.Fatalf("error %v does not wrap the bus error", err)
		}
		errs++
	}
	// The burst may have eaten the pending conversion's flag; convert anew.
	s := inatest.ConvertThenNext(t, d, chip, 20_000_000, 11_980_000)
	if s.CurrentUA != 10_000_000 || s.PowerUW != 119_800_000 {
		t.Fatalf("after the burst got I=%d P=%d", s.CurrentUA, s.PowerUW)
	}
	if errs != 4 || d.Resets() != 0 {
		t.Fatalf("errors %d, resets %d", errs, d.Resets())
	}
}

func TestNACKWhileChipResets(t *testing.T) {
	d, chip := open(t, example)
	chip.FailNext(2)
	chip.PowerCycle()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for range 2 {
		if _, err := d.Next(ctx); err == nil {
			t.Fatal("Next succeeded during a NACK burst")
		}
	}
	// The first call after errors checks the settings before polling.
	chip.SetInputs(2_000_000, 5_000_000)
	go func() {
		for chip.Reg(inasim.RegCal) != 2560 && ctx.Err() == nil {
			time.Sleep(100 * time.Microsecond)
		}
		chip.Convert()
	}()
	s, err := d.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.CurrentUA != 1_000_000 || d.Resets() != 1 {
		t.Fatalf("got %d µA with %d resets, want 1 A and 1 reset", s.CurrentUA, d.Resets())
	}
}

func TestAccuracy(t *testing.T) {
	d, _ := open(t, example)
	a := d.Accuracy()
	if a.GainErr != 0.002 {
		t.Fatalf("GainErr %v, want 0.002", a.GainErr)
	}
	// 12 V × 10 µV / 2 mΩ = 60 mW; 7.5 mV × 15 A = 112.5 mW; Power_LSB 25 mW.
	if got, want := a.OffsetUW(12_000_000), 60_000.0+112_500+25_000; got != want {
		t.Fatalf("OffsetUW(12 V) = %v, want %v", got, want)
	}
	if a.OffsetUW(24_000_000) <= a.OffsetUW(12_000_000) {
		t.Fatal("offset does not grow with bus voltage")
	}
}

func TestClosed(t *testing.T) {
	d, _ := open(t, example)
	d.Close()
	if _, err := d.Next(context.Background()); err == nil {
		t.Fatal("Next after Close succeeded")
	}
}

func TestDerivedLSBFitsRegister(t *testing.T) {
	tests := []struct {
		r, imax int64
	}{{2000, 1_000_000}, {2000, 10_000_000}, {100, 100_000}, {50_000, 1_600_000}}
	for _, tt := range tests {
		d, chip := open(t, Config{ShuntMicroOhms: tt.r, MaxCurrentUA: tt.imax})
		cal := chip.Reg(inasim.RegCal)
		if cal == 0 || cal > 0x7FFF || cal != d.Calibration() {
			t.Fatalf("R=%d Imax=%d: CAL %d", tt.r, tt.imax, cal)
		}
		if lsb := d.CurrentLSBNanoAmps(); lsb*32767 < float64(tt.imax)*1000 {
			t.Fatalf("R=%d Imax=%d: Current_LSB %.1f nA cannot reach the maximum", tt.r, tt.imax, lsb)
		}
	}
}

// BenchmarkNext measures the driver's cost per conversion on the
// simulated bus and reports the I²C register reads it spends per sample
// (at 400 kHz each read is about 0.12 ms on a real bus).
func BenchmarkNext(b *testing.B) {
	bus := inasim.NewBus("sim")
	chip := bus.Add(inasim.INA226, addr)
	d, err := Open(bus, addr, example)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	chip.SetInputs(20_000_000, 11_980_000)
	before := chip.Reads(inasim.RegMask) + chip.Reads(inasim.RegShunt) + chip.Reads(inasim.RegBus) +
		chip.Reads(inasim.RegCurrent) + chip.Reads(inasim.RegPower) + chip.Reads(inasim.RegCal) + chip.Reads(inasim.RegConfig)
	b.ResetTimer()
	for b.Loop() {
		chip.Convert()
		if _, err := d.Next(ctx); err != nil {
			b.Fatal(err)
		}
	}
	after := chip.Reads(inasim.RegMask) + chip.Reads(inasim.RegShunt) + chip.Reads(inasim.RegBus) +
		chip.Reads(inasim.RegCurrent) + chip.Reads(inasim.RegPower) + chip.Reads(inasim.RegCal) + chip.Reads(inasim.RegConfig)
	b.ReportMetric(float64(after-before)/float64(b.N), "reads/sample")
}
