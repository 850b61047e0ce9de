package nvml_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"meshd/drivers"
	"meshd/drivers/drivertest"
	gpu "meshd/drivers/nvml"

	"periph.io/x/conn/v3/physic"
)

// newLib is an NVML with the given GPUs that initialises and shuts down
// cleanly.
func newLib(devs ...*fakeGPU) *fakeLib {
	return &fakeLib{
		devs:               devs,
		InitFunc:           func() gpu.Return { return gpu.Success },
		ShutdownFunc:       func() gpu.Return { return gpu.Success },
		DeviceGetCountFunc: func() (int, gpu.Return) { return len(devs), gpu.Success },
		DeviceGetHandleByIndexFunc: func(i int) (gpu.Device, gpu.Return) {
			if i < 0 || i >= len(devs) {
				return 0, gpu.ErrorInvalidArgument
			}
			return handleOf(i), gpu.Success
		},
	}
}

// newGPU is a GPU with an energy counter (nil: unsupported), a power
// reading and an enforced power limit in mW.
func newGPU(name string, energy func() (uint64, gpu.Return), powerMW uint32, limitMW uint32) *fakeGPU {
	if energy == nil {
		energy = func() (uint64, gpu.Return) { return 0, gpu.ErrorNotSupported }
	}
	return &fakeGPU{
		GetNameFunc:                   func() (string, gpu.Return) { return name, gpu.Success },
		GetUUIDFunc:                   func() (string, gpu.Return) { return "GPU-" + strings.ReplaceAll(name, " ", "-"), gpu.Success },
		GetTotalEnergyConsumptionFunc: energy,
		GetPowerUsageFunc:             func() (uint32, gpu.Return) { return powerMW, gpu.Success },
		GetEnforcedPowerLimitFunc: func() (uint32, gpu.Return) {
			if limitMW == 0 {
				return 0, gpu.ErrorNotSupported
			}
			return limitMW, gpu.Success
		},
		GetPowerManagementLimitFunc: func() (uint32, gpu.Return) { return 0, gpu.ErrorNotSupported },
	}
}

// ramp is an energy counter at start mJ at drivertest.Epoch climbing at
// p, truncated to whole millijoules as NVML reports it.
type ramp struct {
	start uint64
	p     physic.Power
}

func (r ramp) at(t time.Time) uint64 {
	dt := t.Sub(drivertest.Epoch)
	return r.start + uint64(r.p/physic.MilliWatt)*uint64(dt)/uint64(time.Second)
}

func (r ramp) on(clk *drivertest.Clock) func() (uint64, gpu.Return) {
	return func() (uint64, gpu.Return) { return r.at(clk.Now()), gpu.Success }
}

func TestCounterProgression(t *testing.T) {
	tests := []struct {
		name string
		r    ramp
	}{
		{"whole mJ per read", ramp{98765432, 350 * physic.Watt}},
		{"fractional mJ per read", ramp{0, 123456 * physic.MilliWatt}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := drivertest.NewClock(drivertest.Epoch, true)
			lib := newLib(newGPU("NVIDIA H100 80GB HBM3", tc.r.on(clk), 0, 700000))
			s, err := gpu.New(lib, 0, gpu.Config{Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			in := s.Info()
			a := in.Accuracy
			if s.Name() != "nvml:0" || s.GPU() != "NVIDIA H100 80GB HBM3" || !s.Counter() ||
				in.Kind != drivers.KindModel || in.Period != 100*time.Millisecond || in.MaxPeriod != time.Second ||
				a.Quantum != physic.MilliJoule || a.FullScale(0) != 700*physic.Watt || a.Offset(0) != 5*physic.Watt || a.GainErr != 0.05 {
				t.Fatalf("sensor %s %q counter %v info %+v fullscale %v offset %v", s.Name(), s.GPU(), s.Counter(), in, a.FullScale(0), a.Offset(0))
			}
			ctx := context.Background()
			var total physic.Energy
			for i := range 10 {
				smp, err := s.Next(ctx)
				if err != nil {
					t.Fatalf("sample %d: %v", i, err)
				}
				// The first read only primes the counter.
				start := drivertest.Epoch.Add(time.Duration(i) * 100 * time.Millisecond)
				if smp.Start != start || smp.End != start.Add(100*time.Millisecond) ||
					smp.Uncertainty != 100*time.Millisecond || smp.Contiguous != (i > 0) || smp.Overflow {
					t.Fatalf("sample %d: %+v", i, smp)
				}
				// Each reading is the counter's delta over its 100 ms.
				delta := tc.r.at(smp.End) - tc.r.at(smp.Start)
				if want := physic.Power(delta) * 10 * physic.MilliWatt; smp.Power != want {
					t.Fatalf("sample %d: %v, want %v", i, smp.Power, want)
				}
				total += physic.Energy(int64(smp.Power) / 10)
			}
			if want := physic.Energy(int64(tc.r.p)); total != want { // one second at p
				t.Errorf("energy over 1 s: %v, want %v", total, want)
			}
			if err := s.Close(); err != nil || lib.shutdowns != 1 {
				t.Errorf("Close = %v after %d shutdowns; want one", err, lib.shutdowns)
			}
		})
	}
}

func TestFullScaleSource(t *testing.T) {
	tests := []struct {
		name       string
		enforced   gpu.Return
		management gpu.Return
		cfg        physic.Power
		want       physic.Power
	}{
		{"enforced limit", gpu.Success, gpu.Success, 0, 450 * physic.Watt},
		{"management limit", gpu.ErrorNotSupported, gpu.Success, 0, 300 * physic.Watt},
		{"configured", gpu.ErrorNotSupported, gpu.ErrorNoPermission, 250 * physic.Watt, 250 * physic.Watt},
		{"default", gpu.ErrorNotSupported, gpu.ErrorNotSupported, 0, gpu.DefaultFullScale},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := drivertest.NewClock(drivertest.Epoch, true)
			d := newGPU("NVIDIA A10", ramp{0, 100 * physic.Watt}.on(clk), 0, 0)
			d.GetEnforcedPowerLimitFunc = func() (uint32, gpu.Return) { return 450000, tc.enforced }
			d.GetPowerManagementLimitFunc = func() (uint32, gpu.Return) { return 300000, tc.management }
			s, err := gpu.New(newLib(d), 0, gpu.Config{Clock: clk, FullScale: tc.cfg})
			if err != nil {
				t.Fatal(err)
			}
			if got := s.Info().Accuracy.FullScale(0); got != tc.want {
				t.Errorf("FullScale %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPowerFallback(t *testing.T) {
	clk := drivertest.NewClock(drivertest.Epoch, true)
	d := newGPU("Tesla P100-PCIE-16GB", nil, 0, 250000)
	mw := []uint32{41250, 187003, 249999, 0, 260000}
	rets := []gpu.Return{gpu.Success, gpu.Success, gpu.Success, gpu.ErrorGPUIsLost, gpu.Success}
	reads := 0
	d.GetPowerUsageFunc = func() (uint32, gpu.Return) {
		if reads == 0 { // New's check
			reads++
			return 40000, gpu.Success
		}
		i := reads - 1
		reads++
		return mw[i], rets[i]
	}
	s, err := gpu.New(newLib(d), 0, gpu.Config{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	in := s.Info()
	if s.Counter() || in.Kind != drivers.KindPoint || in.Accuracy.Quantum != 0 || in.Accuracy.FullScale(0) != 250*physic.Watt {
		t.Fatalf("fallback sensor: counter %v info %+v", s.Counter(), in)
	}
	ctx := context.Background()
	for i := range mw {
		at := drivertest.Epoch.Add(time.Duration(i) * 100 * time.Millisecond)
		smp, err := s.Next(ctx)
		if rets[i] != gpu.Success {
			if !errors.Is(err, rets[i]) || !strings.Contains(err.Error(), "nvml: GPU 0: reading power") {
				t.Fatalf("read %d: %v, want %v with context", i, err, rets[i])
			}
			continue
		}
		want := drivers.Sample{Start: at, End: at, Uncertainty: time.Second,
			Contiguous: i > 0 && rets[i-1] == gpu.Success,
			Power:      physic.Power(mw[i]) * physic.MilliWatt, Overflow: mw[i] > 250000}
		if err != nil || smp != want {
			t.Fatalf("read %d: %+v, %v\nwant %+v", i, smp, err, want)
		}
	}
}

func TestNeitherEnergyNorPower(t *testing.T) {
	d := newGPU("GeForce GT 710", nil, 0, 0)
	d.GetPowerUsageFunc = func() (uint32, gpu.Return) { return 0, gpu.ErrorNotSupported }
	lib := newLib(d)
	_, err := gpu.New(lib, 0, gpu.Config{})
	if !errors.Is(err, drivers.ErrNoDevice) || !strings.Contains(err.Error(), "neither energy nor power") {
		t.Fatalf("New = %v, want ErrNoDevice", err)
	}
	if n := lib.shutdowns; n != 1 {
		t.Errorf("%d shutdowns after a failed open, want 1", n)
	}
}

func TestLibraryMissing(t *testing.T) {
	t.Run("fake", func(t *testing.T) {
		lib := &fakeLib{InitFunc: func() gpu.Return { return gpu.ErrorLibraryNotFound }}
		_, err := gpu.New(lib, 0, gpu.Config{})
		if !errors.Is(err, drivers.ErrNoDevice) || !errors.Is(err, gpu.ErrorLibraryNotFound) ||
			!strings.Contains(err.Error(), gpu.DefaultLibrary) {
			t.Fatalf("New without the library: %v", err)
		}
		_, err = gpu.Probe(lib)
		if !errors.Is(err, drivers.ErrNoDevice) || !strings.Contains(err.Error(), gpu.DefaultLibrary) {
			t.Fatalf("Probe without the library: %v", err)
		}
	})
	t.Run("driver not loaded", func(t *testing.T) {
		lib := &fakeLib{InitFunc: func() gpu.Return { return gpu.ErrorDriverNotLoaded }}
		if _, err := gpu.New(lib, 0, gpu.Config{}); !errors.Is(err, drivers.ErrNoDevice) || !strings.Contains(err.Error(), "kernel driver") {
			t.Fatalf("New without the kernel driver: %v", err)
		}
	})
}

func TestOpenErrors(t *testing.T) {
	tests := []struct {
		name    string
		lib     func(*fakeLib, *fakeGPU)
		index   int
		cfg     gpu.Config
		wantIs  error
		wantMsg string
		inits   int
	}{
		{"init refused", func(l *fakeLib, _ *fakeGPU) {
			l.InitFunc = func() gpu.Return { return gpu.ErrorNoPermission }
		}, 0, gpu.Config{}, gpu.ErrorNoPermission, "nvml: initialising", 0},
		{"count", func(l *fakeLib, _ *fakeGPU) {
			l.DeviceGetCountFunc = func() (int, gpu.Return) { return 0, gpu.ErrorUnknown }
		}, 0, gpu.Config{}, gpu.ErrorUnknown, "nvml: counting GPUs", 1},
		{"no such GPU", func(*fakeLib, *fakeGPU) {}, 1, gpu.Config{}, drivers.ErrNoDevice, "no GPU 1 (1 present)", 1},
		{"handle", func(l *fakeLib, _ *fakeGPU) {
			l.DeviceGetHandleByIndexFunc = func(int) (gpu.Device, gpu.Return) { return 0, gpu.ErrorGPUIsLost }
		}, 0, gpu.Config{}, gpu.ErrorGPUIsLost, "nvml: GPU 0", 1},
		{"energy counter", func(_ *fakeLib, d *fakeGPU) {
			d.GetTotalEnergyConsumptionFunc = func() (uint64, gpu.Return) { return 0, gpu.ErrorUnknown }
		}, 0, gpu.Config{}, gpu.ErrorUnknown, "reading energy counter", 1},
		{"poll too fast", func(*fakeLib, *fakeGPU) {}, 0, gpu.Config{Poll: 20 * time.Millisecond}, nil, "faster than NVML's 50ms floor", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newGPU("NVIDIA L4", ramp{0, 70 * physic.Watt}.on(drivertest.NewClock(drivertest.Epoch, true)), 0, 72000)
			lib := newLib(d)
			tc.lib(lib, d)
			_, err := gpu.New(lib, tc.index, tc.cfg)
			if err == nil || (tc.wantIs != nil && !errors.Is(err, tc.wantIs)) || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("New = %v; want %v containing %q", err, tc.wantIs, tc.wantMsg)
			}
			// Every Init that succeeded is matched by a Shutdown.
			if n := lib.shutdowns; n != tc.inits {
				t.Errorf("%d shutdowns, want %d", n, tc.inits)
			}
		})
	}
	if _, err := gpu.New(newLib(newGPU("NVIDIA L4", ramp{}.on(drivertest.NewClock(drivertest.Epoch, true)), 0, 72000)), 0,
		gpu.Config{Poll: gpu.MinPoll}); err != nil {
		t.Errorf("poll at the floor: %v", err)
	}
}

func TestCounterReset(t *testing.T) {
	clk := drivertest.NewClock(drivertest.Epoch, true)
	r := ramp{5000000, 200 * physic.Watt}
	reset := false
	d := newGPU("NVIDIA A100-SXM4-80GB", func() (uint64, gpu.Return) {
		if reset { // the driver reloaded at 150 ms and counts from zero
			return ramp{0, 200 * physic.Watt}.at(clk.Now().Add(-150 * time.Millisecond)), gpu.Success
		}
		return r.at(clk.Now()), gpu.Success
	}, 0, 400000)
	s, err := gpu.New(newLib(d), 0, gpu.Config{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.Next(ctx); err != nil {
		t.Fatal(err)
	}
	reset = true
	_, err = s.Next(ctx)
	if err == nil || !strings.Contains(err.Error(), "went back from 5020000 to 10000 mJ") {
		t.Fatalf("after a reset: %v, want a went-back error", err)
	}
	smp, err := s.Next(ctx)
	want := drivers.Sample{Start: drivertest.Epoch.Add(200 * time.Millisecond), End: drivertest.Epoch.Add(300 * time.Millisecond),
		Uncertainty: 100 * time.Millisecond, Contiguous: false, Power: 200 * physic.Watt}
	if err != nil || smp != want {
		t.Fatalf("after the reset: %+v, %v\nwant %+v", smp, err, want)
	}
	if smp, err := s.Next(ctx); err != nil || !smp.Contiguous {
		t.Fatalf("chain did not resume: %+v, %v", smp, err)
	}
}

func TestCounterUnsupportedMidRun(t *testing.T) {
	clk := drivertest.NewClock(drivertest.Epoch, true)
	r := ramp{0, 90 * physic.Watt}
	ret := gpu.Success
	d := newGPU("NVIDIA A30", func() (uint64, gpu.Return) { return r.at(clk.Now()), ret }, 90000, 165000)
	s, err := gpu.New(newLib(d), 0, gpu.Config{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.Next(ctx); err != nil {
		t.Fatal(err)
	}
	ret = gpu.ErrorNotSupported
	for i := range 2 { // it keeps saying so rather than switching kind
		_, err = s.Next(ctx)
		if !errors.Is(err, gpu.ErrorNotSupported) || !strings.Contains(err.Error(), "nvml: GPU 0: energy counter no longer supported") {
			t.Fatalf("read %d: %v", i, err)
		}
	}
	ret = gpu.ErrorGPUIsLost
	if _, err = s.Next(ctx); !errors.Is(err, gpu.ErrorGPUIsLost) || !strings.Contains(err.Error(), "reading energy counter") {
		t.Fatalf("lost GPU: %v", err)
	}
	ret = gpu.Success
	smp, err := s.Next(ctx)
	if err != nil || smp.Contiguous || smp.End.Sub(smp.Start) != 400*time.Millisecond || smp.Power != 90*physic.Watt {
		t.Fatalf("after the errors: %+v, %v; want non-contiguous 90 W over 400 ms", smp, err)
	}
	if s.Info().Kind != drivers.KindModel {
		t.Errorf("kind changed to %v", s.Info().Kind)
	}
}

func TestLongGapBreaksChain(t *testing.T) {
	clk := drivertest.NewClock(drivertest.Epoch, true)
	r := ramp{0, 60 * physic.Watt}
	reads := 0
	d := newGPU("NVIDIA T4", func() (uint64, gpu.Return) {
		v := r.at(clk.Now())
		if reads++; reads == 3 { // New's check, prime, then this read
			clk.Spend(2 * time.Second)
		}
		return v, gpu.Success
	}, 0, 70000)
	s, err := gpu.New(newLib(d), 0, gpu.Config{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if smp, err := s.Next(ctx); err != nil || smp.End.Sub(smp.Start) != 100*time.Millisecond {
		t.Fatalf("first sample %+v, %v", smp, err)
	}
	smp, err := s.Next(ctx)
	// The counter covers the gap: all its energy is there, but the chain
	// is broken.
	if err != nil || smp.Contiguous || smp.End.Sub(smp.Start) != 2*time.Second || smp.Power != 60*physic.Watt {
		t.Fatalf("after a 2 s gap: %+v, %v; want non-contiguous 60 W over 2 s", smp, err)
	}
}

func TestStale(t *testing.T) {
	clk := drivertest.NewClock(drivertest.Epoch, true)
	d := newGPU("NVIDIA H200", func() (uint64, gpu.Return) { return 777, gpu.Success }, 0, 700000)
	s, err := gpu.New(newLib(d), 0, gpu.Config{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 10 { // up to 1 s unchanged is believed
		if smp, err := s.Next(ctx); err != nil || smp.Power != 0 {
			t.Fatalf("read %d: %+v, %v", i, smp, err)
		}
	}
	if _, err := s.Next(ctx); !errors.Is(err, drivers.ErrStale) || !strings.Contains(err.Error(), "unchanged at 777 mJ for 1.1s") {
		t.Fatalf("after 1.1 s: %v, want ErrStale", err)
	}
}

func TestOverflow(t *testing.T) {
	tests := []struct {
		name string
		step uint64 // mJ per 100 ms read
		over bool
	}{
		// Two counter updates in one read (aliasing) at the 700 W limit:
		// 140 J fits 300 ms at full scale.
		{"aliased updates", 140000, false},
		{"beyond full scale", 210001, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := drivertest.NewClock(drivertest.Epoch, true)
			d := newGPU("NVIDIA H100", func() (uint64, gpu.Return) {
				return uint64(clk.Now().Sub(drivertest.Epoch)/(100*time.Millisecond)) * tc.step, gpu.Success
			}, 0, 700000)
			s, err := gpu.New(newLib(d), 0, gpu.Config{Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			smp, err := s.Next(context.Background())
			if err != nil || smp.Overflow != tc.over {
				t.Fatalf("%+v, %v; want Overflow %v", smp, err, tc.over)
			}
		})
	}
}

func TestProbe(t *testing.T) {
	lib := newLib(
		newGPU("NVIDIA H100 80GB HBM3", func() (uint64, gpu.Return) { return 123456789, gpu.Success }, 312345, 700000),
		newGPU("Tesla P100-PCIE-16GB", nil, 35000, 0),
	)
	got, err := gpu.Probe(lib)
	if err != nil {
		t.Fatal(err)
	}
	want := []gpu.GPUInfo{
		{Index: 0, Name: "NVIDIA H100 80GB HBM3", UUID: "GPU-NVIDIA-H100-80GB-HBM3", CounterSupported: true, EnergyMJ: 123456789,
			PowerSupported: true, PowerMW: 312345, PowerLimitMW: 700000},
		{Index: 1, Name: "Tesla P100-PCIE-16GB", UUID: "GPU-Tesla-P100-PCIE-16GB", PowerSupported: true, PowerMW: 35000},
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("Probe:\n got %+v\nwant %+v", got, want)
	}
	if lib.inits != 1 || lib.shutdowns != 1 {
		t.Errorf("%d inits, %d shutdowns; want 1 each", lib.inits, lib.shutdowns)
	}
	// A GPU failing mid-probe names itself; what was read before stays.
	bad := newGPU("NVIDIA A100", nil, 0, 0)
	bad.GetPowerUsageFunc = func() (uint32, gpu.Return) { return 0, gpu.ErrorGPUIsLost }
	got, err = gpu.Probe(newLib(newGPU("NVIDIA A100", nil, 1, 0), bad))
	if !errors.Is(err, gpu.ErrorGPUIsLost) || !strings.Contains(err.Error(), "nvml: GPU 1: power") || len(got) != 1 {
		t.Fatalf("Probe with a lost GPU: %+v, %v", got, err)
	}
}

func TestCloseAndCancel(t *testing.T) {
	clk := drivertest.NewClock(drivertest.Epoch, true)
	lib := newLib(newGPU("NVIDIA L40S", ramp{0, 100 * physic.Watt}.on(clk), 0, 350000))
	s, err := gpu.New(lib, 0, gpu.Config{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next on a cancelled context: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil || lib.shutdowns != 1 {
		t.Fatalf("second Close = %v with %d shutdowns; want one shutdown", err, lib.shutdowns)
	}
	if _, err := s.Next(context.Background()); err == nil {
		t.Fatal("Next after Close succeeded")
	}
}
