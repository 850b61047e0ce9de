package rapl_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"meshd/drivers"
	"meshd/drivers/drivertest"
	"meshd/rapl"

	"periph.io/x/conn/v3/physic"
)

// simFS serves a fixture tree but answers energy_uj reads from counter
// functions, so that a test moves the counters with the simulated clock.
type simFS struct {
	fs.FS
	counter map[string]func() (uint64, error) // by zone ID
}

func (f *simFS) ReadFile(name string) ([]byte, error) {
	if dir, file := path.Split(name); file == "energy_uj" {
		if c := f.counter[path.Clean(dir)]; c != nil {
			v, err := c()
			if err != nil {
				return nil, &fs.PathError{Op: "open", Path: name, Err: err}
			}
			return fmt.Appendf(nil, "%d\n", v), nil
		}
	}
	return fs.ReadFile(f.FS, name)
}

// ramp is a counter that starts at start µJ when the clock reads
// drivertest.Epoch and climbs at p, wrapping modulo mod.
func ramp(clk *drivertest.Clock, start uint64, p physic.Power, mod uint64) func() (uint64, error) {
	return func() (uint64, error) {
		dt := clk.Now().Sub(drivertest.Epoch)
		uj := uint64(p/physic.MicroWatt) * uint64(dt) / uint64(time.Second)
		return (start + uj) % mod, nil
	}
}

func fixture(t *testing.T, name string) fs.FS {
	t.Helper()
	return os.DirFS(filepath.Join("testdata", name))
}

func intelCfg(fsys fs.FS, clk drivers.Clock) rapl.Config {
	return rapl.Config{FS: fsys, CPUInfo: "testdata/cpuinfo/intel", Clock: clk}
}

func TestDiscoverIntel(t *testing.T) {
	zones, err := rapl.Discover(intelCfg(fixture(t, "intel"), nil))
	if err != nil {
		t.Fatal(err)
	}
	want := []rapl.Zone{
		{ID: "intel-rapl:0", Name: "package-0", Key: "package-0",
			Children:         []string{"intel-rapl:0:0", "intel-rapl:0:1", "intel-rapl:0:2"},
			MaxEnergyRangeUJ: 262143328850, ConstraintMaxPower: 253 * physic.Watt},
		{ID: "intel-rapl:0:0", Name: "core", Key: "package-0/core", Parent: "intel-rapl:0",
			MaxEnergyRangeUJ: 262143328850},
		{ID: "intel-rapl:0:1", Name: "uncore", Key: "package-0/uncore", Parent: "intel-rapl:0",
			MaxEnergyRangeUJ: 262143328850},
		{ID: "intel-rapl:0:2", Name: "dram", Key: "package-0/dram", Parent: "intel-rapl:0",
			MaxEnergyRangeUJ: 65712999613, ConstraintMaxPower: 39 * physic.Watt},
		{ID: "intel-rapl:1", Name: "psys", Key: "psys", MaxEnergyRangeUJ: 262143328850},
	}
	for i := range want {
		want[i].Vendor = rapl.VendorIntel
	}
	if d := diffZones(zones, want); d != "" {
		t.Error(d)
	}
}

func TestDiscoverAMD(t *testing.T) {
	zones, err := rapl.Discover(rapl.Config{FS: fixture(t, "amd"), CPUInfo: "testdata/cpuinfo/amd"})
	if err != nil {
		t.Fatal(err)
	}
	want := []rapl.Zone{
		{ID: "intel-rapl:0", Name: "package-0", Key: "package-0", Children: []string{"intel-rapl:0:0"},
			MaxEnergyRangeUJ: 65532610987, Vendor: rapl.VendorAMD},
		{ID: "intel-rapl:0:0", Name: "core", Key: "package-0/core", Parent: "intel-rapl:0",
			MaxEnergyRangeUJ: 65532610987, Vendor: rapl.VendorAMD},
	}
	if d := diffZones(zones, want); d != "" {
		t.Error(d)
	}
}

func diffZones(got, want []rapl.Zone) string {
	if len(got) != len(want) {
		return fmt.Sprintf("got %d zones %+v, want %d", len(got), got, len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if !slices.Equal(g.Children, w.Children) {
			return fmt.Sprintf("zone %d children %v, want %v", i, g.Children, w.Children)
		}
		g.Children, w.Children = nil, nil
		if !reflect.DeepEqual(g, w) {
			return fmt.Sprintf("zone %d:\n got %+v\nwant %+v", i, g, w)
		}
	}
	return ""
}

func TestDiscoverSkipsDisabled(t *testing.T) {
	tests := []struct {
		name    string
		disable string // directory whose enabled file is set to 0
		want    []string
	}{
		{"none", "", []string{"package-0", "package-0/core", "package-0/uncore", "package-0/dram", "psys"}},
		{"sub-zone", "intel-rapl:0:1", []string{"package-0", "package-0/core", "package-0/dram", "psys"}},
		{"package takes its sub-zones", "intel-rapl:0", []string{"psys"}},
		{"control type", "intel-rapl", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.CopyFS(dir, fixture(t, "intel")); err != nil {
				t.Fatal(err)
			}
			if tc.disable != "" {
				if err := os.WriteFile(filepath.Join(dir, tc.disable, "enabled"), []byte("0\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			zones, err := rapl.Discover(rapl.Config{Root: dir, Vendor: rapl.VendorIntel})
			if err != nil {
				t.Fatal(err)
			}
			var keys []string
			for _, z := range zones {
				keys = append(keys, z.Key)
				if z.Key == "package-0" && slices.Contains(z.Children, tc.disable) {
					t.Errorf("package lists disabled child %s", tc.disable)
				}
			}
			if !slices.Equal(keys, tc.want) {
				t.Errorf("zones %v, want %v", keys, tc.want)
			}
		})
	}
}

func TestDiscoverKeys(t *testing.T) {
	dir := t.TempDir()
	if err := os.CopyFS(dir, fixture(t, "intel")); err != nil {
		t.Fatal(err)
	}
	// Client parts expose the package a second time through MMIO, and a
	// second psys would make the name ambiguous.
	for from, to := range map[string]string{"intel-rapl:0": "intel-rapl-mmio:0", "intel-rapl:1": "intel-rapl:2"} {
		if err := os.CopyFS(filepath.Join(dir, to), os.DirFS(filepath.Join(dir, from))); err != nil {
			t.Fatal(err)
		}
	}
	zones, err := rapl.Discover(rapl.Config{Root: dir, Vendor: rapl.VendorIntel})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, z := range zones {
		keys = append(keys, z.Key)
	}
	want := []string{"package-0", "package-0/core", "package-0/uncore", "package-0/dram", "intel-rapl:1", "intel-rapl:2", "intel-rapl-mmio/package-0"}
	if !slices.Equal(keys, want) {
		t.Errorf("keys %v, want %v", keys, want)
	}
}

func TestDiscoverMissingRoot(t *testing.T) {
	zones, err := rapl.Discover(rapl.Config{Root: filepath.Join(t.TempDir(), "absent"), Vendor: rapl.VendorIntel})
	if err != nil || zones != nil {
		t.Fatalf("Discover = %v, %v; want nothing, no error", zones, err)
	}
	_, err = rapl.Open("package-0", rapl.Config{Root: filepath.Join(t.TempDir(), "absent"), Vendor: rapl.VendorIntel})
	if !errors.Is(err, drivers.ErrNoDevice) {
		t.Fatalf("Open on a machine without RAPL: %v, want ErrNoDevice", err)
	}
}

func TestReadVendor(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name    string
		path    string
		want    rapl.Vendor
		wantErr bool
	}{
		{"intel", "testdata/cpuinfo/intel", rapl.VendorIntel, false},
		{"amd", "testdata/cpuinfo/amd", rapl.VendorAMD, false},
		{"hygon", write("hygon", "processor\t: 0\nvendor_id\t: HygonGenuine\n"), rapl.VendorAMD, false},
		{"other", write("other", "vendor_id\t: CentaurHauls\n"), rapl.VendorUnknown, false},
		{"no vendor line", write("arm", "processor\t: 0\nBogoMIPS\t: 50.00\n"), rapl.VendorUnknown, true},
		{"missing", filepath.Join(dir, "absent"), rapl.VendorUnknown, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := rapl.ReadVendor(tc.path)
			if got != tc.want || (err != nil) != tc.wantErr {
				t.Fatalf("ReadVendor = %q, %v; want %q, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestFind(t *testing.T) {
	zones, err := rapl.Discover(intelCfg(fixture(t, "intel"), nil))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ spec, wantID string }{
		{"package-0", "intel-rapl:0"},
		{"package-0/dram", "intel-rapl:0:2"},
		{"intel-rapl:0:1", "intel-rapl:0:1"},
		{"core", "intel-rapl:0:0"},
		{"psys", "intel-rapl:1"},
		{"package-1", ""},
	}
	for _, tc := range tests {
		z, err := rapl.Find(zones, tc.spec)
		if tc.wantID == "" {
			if err == nil || !strings.Contains(err.Error(), "package-0/dram") {
				t.Errorf("Find(%q) = %v, %v; want an error listing the zones", tc.spec, z.ID, err)
			}
			continue
		}
		if err != nil || z.ID != tc.wantID {
			t.Errorf("Find(%q) = %v, %v; want %s", tc.spec, z.ID, err, tc.wantID)
		}
	}
	// Two packages both have a "core": the bare name is ambiguous.
	two := []rapl.Zone{{ID: "intel-rapl:0:0", Name: "core", Key: "package-0/core"}, {ID: "intel-rapl:1:0", Name: "core", Key: "package-1/core"}}
	if _, err := rapl.Find(two, "core"); err == nil || !strings.Contains(err.Error(), "ambiguous") {
		t.Errorf("Find(core) over two packages: %v, want ambiguous", err)
	}
}

func TestInfo(t *testing.T) {
	tests := []struct {
		fixture, cpu, zone string
		cfg                rapl.Config
		name               string
		period, maxPeriod  time.Duration
		fullScale          physic.Power
		gain               float64
		quantum            physic.Energy
	}{
		// 262143328851 µJ / (4 × 253 W): the short-term limit is the ceiling.
		{"intel", "intel", "package-0", rapl.Config{}, "rapl:package-0",
			100 * time.Millisecond, 259034909931, 253 * physic.Watt, 0.05, 15259 * physic.NanoJoule},
		{"intel", "intel", "dram", rapl.Config{EnergyUnit: 61 * physic.MicroJoule}, "rapl:package-0/dram",
			100 * time.Millisecond, 421237177012, 39 * physic.Watt, 0.05, 61 * physic.MicroJoule},
		{"intel", "intel", "package-0/core", rapl.Config{Poll: 10 * time.Millisecond}, "rapl:package-0/core",
			10 * time.Millisecond, 65535832212, 1000 * physic.Watt, 0.05, 15259 * physic.NanoJoule},
		{"intel", "intel", "psys", rapl.Config{MaxPower: 500 * physic.Watt, GainErr: 0.2}, "rapl:psys",
			100 * time.Millisecond, 131071664425, 500 * physic.Watt, 0.2, 15259 * physic.NanoJoule},
		{"amd", "amd", "package-0", rapl.Config{}, "rapl:package-0",
			100 * time.Millisecond, 16383152747, 1000 * physic.Watt, 0.10, 15259 * physic.NanoJoule},
		// 1 J range at 10 W: the 100 ms poll would miss wraps, 25 ms does not.
		{"shortrange", "intel", "package-0", rapl.Config{}, "rapl:package-0",
			25 * time.Millisecond, 25 * time.Millisecond, 10 * physic.Watt, 0.05, 15259 * physic.NanoJoule},
	}
	for _, tc := range tests {
		t.Run(tc.fixture+"/"+tc.zone, func(t *testing.T) {
			cfg := tc.cfg
			cfg.FS, cfg.CPUInfo = fixture(t, tc.fixture), "testdata/cpuinfo/"+tc.cpu
			s, err := rapl.Open(tc.zone, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			in := s.Info()
			if s.Name() != tc.name || in.Kind != drivers.KindModel || in.Kind.Hardware() {
				t.Errorf("Name %q kind %v; want %q, model", s.Name(), in.Kind, tc.name)
			}
			if in.Period != tc.period || in.MaxPeriod != tc.maxPeriod {
				t.Errorf("Period %v MaxPeriod %v; want %v %v", in.Period, in.MaxPeriod, tc.period, tc.maxPeriod)
			}
			a := in.Accuracy
			if fs := a.FullScale(0); fs != tc.fullScale {
				t.Errorf("FullScale %v, want %v", fs, tc.fullScale)
			}
			if a.GainErr != tc.gain || a.Quantum != tc.quantum || a.Offset(0) != 0 {
				t.Errorf("GainErr %v Quantum %v Offset %v; want %v %v 0", a.GainErr, a.Quantum, a.Offset(0), tc.gain, tc.quantum)
			}
		})
	}
}

func TestNextCounterDelta(t *testing.T) {
	tests := []struct {
		zone, id string
		start    uint64
		p        physic.Power
	}{
		{"package-0", "intel-rapl:0", 48306277110, 42 * physic.Watt},
		{"core", "intel-rapl:0:0", 21904583355, 17500 * physic.MilliWatt},
		{"dram", "intel-rapl:0:2", 65712999613 - 200000, 3 * physic.Watt}, // wraps on the first sample
		{"psys", "intel-rapl:1", 97012236514, 61 * physic.Watt},
	}
	for _, tc := range tests {
		t.Run(tc.zone, func(t *testing.T) {
			clk := drivertest.NewClock(drivertest.Epoch, true)
			fsys := &simFS{FS: fixture(t, "intel"), counter: map[string]func() (uint64, error){}}
			zones, err := rapl.Discover(intelCfg(fsys, clk))
			if err != nil {
				t.Fatal(err)
			}
			z, err := rapl.Find(zones, tc.zone)
			if err != nil {
				t.Fatal(err)
			}
			fsys.counter[tc.id] = ramp(clk, tc.start, tc.p, z.MaxEnergyRangeUJ+1)
			s, err := rapl.New(z, intelCfg(fsys, clk))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			prevEnd := time.Time{}
			for i := range 5 {
				smp, err := s.Next(ctx)
				if err != nil {
					t.Fatalf("sample %d: %v", i, err)
				}
				// The first read only primes: the first sample spans
				// [0, 100 ms] and cannot claim to follow anything.
				wantStart := drivertest.Epoch.Add(time.Duration(i) * 100 * time.Millisecond)
				want := drivers.Sample{Start: wantStart, End: wantStart.Add(100 * time.Millisecond),
					Uncertainty: time.Millisecond, Contiguous: i > 0, Power: tc.p}
				if smp != want {
					t.Fatalf("sample %d:\n got %+v\nwant %+v", i, smp, want)
				}
				if i > 0 && smp.Start != prevEnd {
					t.Fatalf("sample %d starts at %v, previous ended %v", i, smp.Start, prevEnd)
				}
				prevEnd = smp.End
			}
			wantWraps := uint64(0)
			if tc.zone == "dram" {
				wantWraps = 1
			}
			if s.Wraps() != wantWraps {
				t.Errorf("Wraps %d, want %d", s.Wraps(), wantWraps)
			}
		})
	}
}

// openShort opens the 1 J-range fixture zone with its counter served by c.
func openShort(t *testing.T, clk *drivertest.Clock, c func() (uint64, error), cfg rapl.Config) *rapl.Sensor {
	t.Helper()
	fsys := &simFS{FS: fixture(t, "shortrange"), counter: map[string]func() (uint64, error){"intel-rapl:0": c}}
	cfg.FS, cfg.Clock, cfg.Vendor = fsys, clk, rapl.VendorIntel
	s, err := rapl.Open("package-0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// openPkg opens the Intel fixture's package zone (100 ms poll, wrap-safe
// for minutes) with its counter served by c.
func openPkg(t *testing.T, clk *drivertest.Clock, c func() (uint64, error)) *rapl.Sensor {
	t.Helper()
	fsys := &simFS{FS: fixture(t, "intel"), counter: map[string]func() (uint64, error){"intel-rapl:0": c}}
	s, err := rapl.Open("package-0", intelCfg(fsys, clk))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const pkgMod = 262143328850 + 1

func TestWrapsTwiceInOneWindow(t *testing.T) {
	clk := drivertest.NewClock(drivertest.Epoch, true)
	// 9.6 W on a 10^6 µJ counter polled every 25 ms: 240 000 µJ a read,
	// reads 800000, 40000, 280000, 520000, 760000, 0 — two wraps in
	// five samples, the second landing exactly on zero.
	s := openShort(t, clk, ramp(clk, 800000, 9600*physic.MilliWatt, 1000000), rapl.Config{})
	var total physic.Energy
	for i := range 5 {
		smp, err := s.Next(context.Background())
		if err != nil {
			t.Fatalf("sample %d: %v", i, err)
		}
		if smp.Power != 9600*physic.MilliWatt || smp.End.Sub(smp.Start) != 25*time.Millisecond || smp.Overflow {
			t.Fatalf("sample %d: %+v; want 9.6 W over 25 ms", i, smp)
		}
		total += physic.Energy(int64(smp.Power) * int64(smp.End.Sub(smp.Start)) / int64(time.Second))
	}
	if s.Wraps() != 2 {
		t.Errorf("Wraps %d, want 2", s.Wraps())
	}
	if total != 1200*physic.MilliJoule {
		t.Errorf("window energy %v, want 1.2 J", total)
	}
}

func TestGapBeyondSafePeriodIsAmbiguous(t *testing.T) {
	clk := drivertest.NewClock(drivertest.Epoch, true)
	r := ramp(clk, 500000, 8*physic.Watt, 1000000)
	reads := 0
	s := openShort(t, clk, func() (uint64, error) {
		v, err := r()
		reads++
		if reads == 4 { // open's check, prime, sample 1, then this read
			clk.Spend(30 * time.Millisecond) // the process is descheduled
		}
		return v, err
	}, rapl.Config{})
	ctx := context.Background()
	if _, err := s.Next(ctx); err != nil {
		t.Fatal(err)
	}
	smp, err := s.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stuck := smp.End.Add(30 * time.Millisecond) // when the delayed read returned
	_, err = s.Next(ctx)
	if err == nil || !strings.Contains(err.Error(), "ambiguous") {
		t.Fatalf("read after a 55 ms gap: %v, want an ambiguity error", err)
	}
	smp, err = s.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := drivers.Sample{Start: stuck, End: stuck.Add(25 * time.Millisecond), Uncertainty: time.Millisecond,
		Contiguous: false, Power: 8 * physic.Watt}
	if smp != want {
		t.Fatalf("after the gap:\n got %+v\nwant %+v", smp, want)
	}
	if smp, err = s.Next(ctx); err != nil || !smp.Contiguous {
		t.Fatalf("chain did not resume: %+v, %v", smp, err)
	}
	// 8 W × 25 ms = 200 000 µJ a read from 500 000: the counter wrapped
	// only inside the ambiguous gap (900 000 → 140 000), which no
	// sample accounts for.
	if s.Wraps() != 0 {
		t.Errorf("Wraps %d, want 0", s.Wraps())
	}
}

func TestPermissionDenied(t *testing.T) {
	checkMsg := func(t *testing.T, err error) {
		t.Helper()
		if !errors.Is(err, fs.ErrPermission) {
			t.Fatalf("error %v does not wrap fs.ErrPermission", err)
		}
		for _, s := range []string{"CVE-2020-8694", "root", rapl.PermissionRule, "group meshd", "package-0"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q does not mention %q", err, s)
			}
		}
	}
	for _, errno := range []error{fs.ErrPermission, syscall.EACCES, syscall.EPERM} {
		t.Run("open/"+errno.Error(), func(t *testing.T) {
			clk := drivertest.NewClock(drivertest.Epoch, true)
			fsys := &simFS{FS: fixture(t, "intel"), counter: map[string]func() (uint64, error){
				"intel-rapl:0": func() (uint64, error) { return 0, errno },
			}}
			_, err := rapl.Open("package-0", intelCfg(fsys, clk))
			checkMsg(t, err)
		})
	}
	t.Run("mid-run", func(t *testing.T) {
		clk := drivertest.NewClock(drivertest.Epoch, true)
		r := ramp(clk, 0, 4*physic.Watt, pkgMod)
		deny := false
		s := openPkg(t, clk, func() (uint64, error) {
			if deny {
				return 0, syscall.EACCES
			}
			return r()
		})
		ctx := context.Background()
		if _, err := s.Next(ctx); err != nil {
			t.Fatal(err)
		}
		deny = true
		_, err := s.Next(ctx)
		checkMsg(t, err)
		deny = false
		smp, err := s.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// The counter kept counting: the sample spans the refused read
		// and says the chain broke.
		if smp.Contiguous || smp.End.Sub(smp.Start) != 200*time.Millisecond || smp.Power != 4*physic.Watt {
			t.Fatalf("after a refused read: %+v; want non-contiguous 4 W over 200 ms", smp)
		}
	})
}

func TestReadErrorBreaksChain(t *testing.T) {
	clk := drivertest.NewClock(drivertest.Epoch, true)
	r := ramp(clk, 0, 2*physic.Watt, pkgMod)
	fail := false
	s := openPkg(t, clk, func() (uint64, error) {
		if fail {
			return 0, syscall.EIO
		}
		return r()
	})
	ctx := context.Background()
	if smp, err := s.Next(ctx); err != nil || smp.Contiguous {
		t.Fatalf("first sample %+v, %v; want non-contiguous", smp, err)
	}
	if smp, err := s.Next(ctx); err != nil || !smp.Contiguous {
		t.Fatalf("second sample %+v, %v; want contiguous", smp, err)
	}
	fail = true
	_, err := s.Next(ctx)
	if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "rapl: package-0: reading counter") {
		t.Fatalf("error %v: want EIO with the zone's context", err)
	}
	fail = false
	// The counter lost nothing: the sample spans the failed read.
	if smp, err := s.Next(ctx); err != nil || smp.Contiguous || smp.Power != 2*physic.Watt ||
		smp.End.Sub(smp.Start) != 200*time.Millisecond {
		t.Fatalf("after the error %+v, %v; want non-contiguous 2 W over 200 ms", smp, err)
	}
}

func TestCounterBeyondRange(t *testing.T) {
	clk := drivertest.NewClock(drivertest.Epoch, true)
	v := uint64(0)
	s := openShort(t, clk, func() (uint64, error) { return v, nil }, rapl.Config{StaleAfter: -1})
	v = 1000000
	if _, err := s.Next(context.Background()); err == nil || !strings.Contains(err.Error(), "beyond max_energy_range_uj") {
		t.Fatalf("counter past its range: %v, want an error", err)
	}
}

func TestStale(t *testing.T) {
	clk := drivertest.NewClock(drivertest.Epoch, true)
	v := uint64(500)
	fsys := &simFS{FS: fixture(t, "intel"), counter: map[string]func() (uint64, error){
		"intel-rapl:0:1": func() (uint64, error) { return v, nil },
	}}
	s, err := rapl.Open("uncore", intelCfg(fsys, clk))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Unchanged for 100 ms is still believable: zero power.
	smp, err := s.Next(ctx)
	if err != nil || smp.Power != 0 {
		t.Fatalf("first sample %+v, %v; want 0 W", smp, err)
	}
	// 200 ms without a change is not.
	for i := range 2 {
		_, err = s.Next(ctx)
		if !errors.Is(err, drivers.ErrStale) || !strings.Contains(err.Error(), "unchanged at 500 µJ") {
			t.Fatalf("read %d: %v, want ErrStale", i, err)
		}
	}
	v += 300 // 3 mW over 100 ms
	smp, err = s.Next(ctx)
	if err != nil || smp.Contiguous || smp.Power != 3*physic.MilliWatt {
		t.Fatalf("after stale: %+v, %v; want a non-contiguous 3 mW sample", smp, err)
	}

	// A negative StaleAfter believes an idle zone indefinitely.
	s2, err := rapl.Open("uncore", rapl.Config{FS: fsys, Vendor: rapl.VendorIntel, Clock: clk, StaleAfter: -1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if smp, err := s2.Next(ctx); err != nil || smp.Power != 0 {
			t.Fatalf("read %d with the check off: %+v, %v", i, smp, err)
		}
	}
}

func TestOverflow(t *testing.T) {
	clk := drivertest.NewClock(drivertest.Epoch, true)
	// 11 W against a configured 10 W ceiling over 25 ms ± 1 ms edges:
	// 275 mJ exceeds 10 W × 27 ms = 270 mJ, 10.7 W would not.
	tests := []struct {
		p    physic.Power
		over bool
	}{{11 * physic.Watt, true}, {10700 * physic.MilliWatt, false}}
	for _, tc := range tests {
		s := openShort(t, clk, ramp(clk, 0, tc.p, 1000000), rapl.Config{MaxPower: 10 * physic.Watt})
		smp, err := s.Next(context.Background())
		if err != nil || smp.Overflow != tc.over {
			t.Errorf("%v: %+v, %v; want Overflow %v", tc.p, smp, err, tc.over)
		}
	}
}

func TestCancelAndClose(t *testing.T) {
	clk := drivertest.NewClock(drivertest.Epoch, true)
	s := openShort(t, clk, ramp(clk, 0, physic.Watt, 1000000), rapl.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next on a cancelled context: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Next(context.Background()); err == nil {
		t.Fatal("Next after Close succeeded")
	}
}

// The shipped tmpfiles rule must reach every zone's counter, sub-zones
// included, for group meshd.
func TestPermissionRuleCoversZones(t *testing.T) {
	f, err := os.Open(filepath.Join("..", rapl.PermissionRule))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type rule struct{ pattern, mode, user, group string }
	var rules []rule
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		if len(fields) != 6 || fields[0] != "z" {
			t.Fatalf("unexpected line %q", sc.Text())
		}
		rules = append(rules, rule{fields[1], fields[2], fields[3], fields[4]})
	}
	for _, fx := range []string{"intel", "amd", "shortrange"} {
		zones, err := rapl.Discover(rapl.Config{FS: fixture(t, fx), Vendor: rapl.VendorIntel})
		if err != nil {
			t.Fatal(err)
		}
		ids := []string{"intel-rapl-mmio:0"} // the MMIO interface of client parts
		for _, z := range zones {
			ids = append(ids, z.ID)
		}
		for _, id := range ids {
			p := path.Join(rapl.DefaultRoot, id, "energy_uj")
			covered := false
			for _, r := range rules {
				if ok, _ := path.Match(r.pattern, p); ok {
					covered = true
					if r.mode != "0440" || r.user != "root" || r.group != "meshd" {
						t.Errorf("%s: rule %+v, want 0440 root meshd", p, r)
					}
				}
			}
			if !covered {
				t.Errorf("%s is not covered by %s", p, rapl.PermissionRule)
			}
		}
	}
}
