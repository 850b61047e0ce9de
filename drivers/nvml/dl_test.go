//go:build !nonvml

package nvml_test

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"meshd/drivers"
	"meshd/drivers/drivertest"
	gpu "meshd/drivers/nvml"

	"github.com/ebitengine/purego"
	"periph.io/x/conn/v3/physic"
)

// gnuArch is the start of `cc -dumpmachine` for a compiler that targets
// GOARCH.
var gnuArch = map[string][]string{
	"amd64": {"x86_64"}, "arm64": {"aarch64"}, "arm": {"arm"}, "riscv64": {"riscv64"}, "386": {"i386", "i486", "i586", "i686"},
}

// buildFake compiles testdata/fakenvml.c into a shared library, as the
// real libnvidia-ml.so.1 is one, with the given -D flags. It skips where
// there is no C compiler for this GOARCH (a cross-built test binary).
func buildFake(t *testing.T, defines ...string) string {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skipf("no C compiler to build the fake libnvidia-ml: %v", err)
	}
	machine, err := exec.Command(cc, "-dumpmachine").Output()
	if err != nil {
		t.Skipf("cc -dumpmachine: %v", err)
	}
	ok := false
	for _, p := range gnuArch[runtime.GOARCH] {
		ok = ok || strings.HasPrefix(string(machine), p)
	}
	if !ok {
		t.Skipf("cc targets %s, not GOARCH %s", strings.TrimSpace(string(machine)), runtime.GOARCH)
	}
	so := filepath.Join(t.TempDir(), "libnvidia-ml.so.1")
	args := append([]string{"-shared", "-fPIC", "-Wall", "-Werror", "-o", so}, defines...)
	if out, err := exec.Command(cc, append(args, filepath.Join("testdata", "fakenvml.c"))...).CombinedOutput(); err != nil {
		t.Fatalf("building the fake library: %v\n%s", err, out)
	}
	return so
}

// fakeInits reads how many nvmlInit_v2 calls the library has not yet
// seen matched by nvmlShutdown.
func fakeInits(t *testing.T, so string) func() int32 {
	t.Helper()
	h, err := purego.Dlopen(so, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		t.Fatal(err)
	}
	var f func() int32
	purego.RegisterLibFunc(&f, h, "fake_inits")
	return f
}

const longName = "NVIDIA H100 80GB HBM3, a fake whose name is longer than sixty-four bytes"

// TestLoadedLibrary runs the driver on a shared library with NVML's C
// signatures, through the same loader and calls as on a GPU.
func TestLoadedLibrary(t *testing.T) {
	so := buildFake(t)
	inits := fakeInits(t, so)
	got, err := gpu.ProbeSystem(gpu.Config{Library: so})
	if err != nil {
		t.Fatal(err)
	}
	want := []gpu.GPUInfo{
		{Index: 0, Name: longName, UUID: "GPU-5d0c8f2e-0000-4000-8000-000000000000",
			CounterSupported: true, EnergyMJ: 5000000000000, PowerSupported: true, PowerMW: 312345, PowerLimitMW: 700000},
		{Index: 1, Name: "Tesla P100-PCIE-16GB", UUID: "GPU-5d0c8f2e-0000-4000-8000-000000000001",
			PowerSupported: true, PowerMW: 41250},
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("ProbeSystem:\n got %+v\nwant %+v", got, want)
	}
	if n := inits(); n != 0 {
		t.Fatalf("%d inits left after Probe", n)
	}

	tests := []struct {
		index     int
		counter   bool
		kind      drivers.Kind
		fullScale physic.Power
		power     physic.Power // of the first sample
	}{
		// 35 J between reads 100 ms apart.
		{0, true, drivers.KindModel, 700 * physic.Watt, 350 * physic.Watt},
		// No enforced limit: the management limit is full scale.
		{1, false, drivers.KindPoint, 250 * physic.Watt, 41250 * physic.MilliWatt},
	}
	for _, tc := range tests {
		clk := drivertest.NewClock(drivertest.Epoch, true)
		s, err := gpu.Open(tc.index, gpu.Config{Library: so, Clock: clk})
		if err != nil {
			t.Fatalf("Open(%d): %v", tc.index, err)
		}
		sen := s.(*gpu.Sensor)
		in := s.Info()
		if sen.GPU() != want[tc.index].Name || sen.Counter() != tc.counter || in.Kind != tc.kind || in.Accuracy.FullScale(0) != tc.fullScale {
			t.Errorf("GPU %d: %q counter %v kind %v full scale %v", tc.index, sen.GPU(), sen.Counter(), in.Kind, in.Accuracy.FullScale(0))
		}
		smp, err := s.Next(context.Background())
		if err != nil || smp.Power != tc.power {
			t.Errorf("GPU %d: %+v, %v; want %v", tc.index, smp, err, tc.power)
		}
		if n := inits(); n != 1 {
			t.Errorf("GPU %d: %d inits held while open, want 1", tc.index, n)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if n := inits(); n != 0 {
			t.Errorf("GPU %d: %d inits left after Close", tc.index, n)
		}
	}

	if _, err := gpu.Open(2, gpu.Config{Library: so}); !errors.Is(err, drivers.ErrNoDevice) || !strings.Contains(err.Error(), "no GPU 2 (2 present)") {
		t.Errorf("Open(2): %v", err)
	}
	if n := inits(); n != 0 {
		t.Errorf("%d inits left after a failed Open", n)
	}
}

// An old driver without the energy counter's call falls back to power.
func TestLoadedLibraryWithoutEnergy(t *testing.T) {
	so := buildFake(t, "-DNO_ENERGY")
	clk := drivertest.NewClock(drivertest.Epoch, true)
	s, err := gpu.Open(0, gpu.Config{Library: so, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.(*gpu.Sensor).Counter() || s.Info().Kind != drivers.KindPoint {
		t.Fatalf("without nvmlDeviceGetTotalEnergyConsumption: counter %v kind %v", s.(*gpu.Sensor).Counter(), s.Info().Kind)
	}
	smp, err := s.Next(context.Background())
	if err != nil || smp.Power != 312345*physic.MilliWatt || smp.Uncertainty != time.Second {
		t.Fatalf("%+v, %v", smp, err)
	}
	got, err := gpu.ProbeSystem(gpu.Config{Library: so})
	if err != nil || len(got) != 2 || got[0].CounterSupported || !got[0].PowerSupported {
		t.Fatalf("ProbeSystem: %+v, %v", got, err)
	}
}

// The real loader, pointed at a library that cannot exist, says the
// driver is not installed.
func TestLoaderLibraryAbsent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "libnvidia-ml.so.1")
	s, err := gpu.Open(0, gpu.Config{Library: path})
	if s != nil || !errors.Is(err, drivers.ErrNoDevice) ||
		!strings.Contains(err.Error(), path+" not found: the NVIDIA driver is not installed") {
		t.Fatalf("Open(%s) = %v, %v; want ErrNoDevice naming it and the driver", path, s, err)
	}
	if _, err := gpu.ProbeSystem(gpu.Config{Library: path}); !errors.Is(err, drivers.ErrNoDevice) ||
		!strings.Contains(err.Error(), path+" not found") {
		t.Fatalf("ProbeSystem(%s): %v", path, err)
	}
}

// A library that is not NVML is refused before anything is called.
func TestLoadedLibraryNotNVML(t *testing.T) {
	so := buildFake(t, "-DNO_INIT")
	for _, err := range []error{
		func() error { _, err := gpu.Open(0, gpu.Config{Library: so}); return err }(),
		func() error { _, err := gpu.ProbeSystem(gpu.Config{Library: so}); return err }(),
	} {
		if !errors.Is(err, drivers.ErrNoDevice) || !strings.Contains(err.Error(), so+" is not NVML (no nvmlInit_v2)") {
			t.Errorf("%v; want ErrNoDevice saying it is not NVML", err)
		}
	}
}
