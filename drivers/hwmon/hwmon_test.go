package hwmon

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"meshd/drivers"
	"meshd/drivers/drivertest"

	"periph.io/x/conn/v3/physic"
)

// tree copies the checked-in sysfs fixture (testdata/hwmon, see its
// README) into a temporary directory, so that a test may rewrite
// attributes, and returns the copy's root.
func tree(t *testing.T) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "hwmon")
	if err := os.CopyFS(root, os.DirFS("testdata/hwmon")); err != nil {
		t.Fatal(err)
	}
	return root
}

// set rewrites attributes of dir, as the kernel would between two reads.
func set(t *testing.T, dir string, kv ...string) {
	t.Helper()
	for i := 0; i+1 < len(kv); i += 2 {
		if err := os.WriteFile(filepath.Join(dir, kv[i]), []byte(kv[i+1]+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// rail finds the rail String() names under root.
func rail(t *testing.T, root, name string) Rail {
	t.Helper()
	rails, err := Discover(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rails {
		if r.String() == name {
			return r
		}
	}
	t.Fatalf("no rail %s in %v", name, rails)
	return Rail{}
}

// open opens a rail on a simulated clock in auto mode: every pacing wait
// advances virtual time by exactly the interval, so each read happens at
// a known instant.
func open(t *testing.T, r Rail, opts Options) (*Sensor, *drivertest.Clock) {
	t.Helper()
	clk := drivertest.NewClock(drivertest.Epoch, true)
	opts.Clock = clk
	s, err := Open(r, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, clk
}

func at(d time.Duration) time.Time { return drivertest.Epoch.Add(d) }

func TestDiscover(t *testing.T) {
	rails, err := Discover(tree(t))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name          string
		power, energy bool
	}{
		{"hwmon1/ina3221:1(VDD_IN)", false, false},
		{"hwmon1/ina3221:2(VDD_CPU_GPU_CV)", false, false},
		{"hwmon1/ina3221:3(VDD_SOC)", false, false},
		{"hwmon2/ina226:1", true, false},
		{"hwmon3/ina228:1", true, true},
		{"device/ina219:1", true, false},
	}
	if len(rails) != len(want) {
		t.Fatalf("found %v, want %d rails", rails, len(want))
	}
	for i, w := range want {
		r := rails[i]
		if r.String() != w.name || r.HasPower() != w.power || r.HasEnergy() != w.energy {
			t.Errorf("rail %d = %s power %v energy %v, want %s power %v energy %v",
				i, r, r.HasPower(), r.HasEnergy(), w.name, w.power, w.energy)
		}
	}
}

func TestDiscoverSkipsDisabledINA3221Channel(t *testing.T) {
	root := tree(t)
	set(t, filepath.Join(root, "hwmon1"), "in2_enable", "0")
	rails, err := Discover(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rails {
		if r.Chip == "ina3221" && r.Channel == 2 {
			t.Fatalf("disabled channel listed: %v", rails)
		}
	}
	if len(rails) != 5 {
		t.Fatalf("found %v, want the other 5 rails", rails)
	}
}

func TestDiscoverMissingRoot(t *testing.T) {
	rails, err := Discover(filepath.Join(t.TempDir(), "absent"))
	if err != nil || len(rails) != 0 {
		t.Fatalf("got %v, %v; want nothing and no error", rails, err)
	}
}

// TestPointReadings checks the first paced reading of each point rail
// against the fixture's kernel-consistent values: units, the INA3221's
// V × I from its 8 mV and rounded-mA attributes, and the point shape.
func TestPointReadings(t *testing.T) {
	mV, uV, mA, uW := physic.MilliVolt, physic.MicroVolt, physic.MilliAmpere, physic.MicroWatt
	tests := []struct {
		rail        string
		bus, shunt  physic.ElectricPotential
		curr        physic.ElectricCurrent
		power       physic.Power
		period, unc time.Duration
	}{
		// Averaged values are read at 8/10 of the shortest window, so
		// that no window passes unread. The INA3221's window follows from
		// its three enabled channels, samples 1 and update_interval 7:
		// 3 × (1.1 + 1.1) ms = 6.6 ms, less 10 % is 5.94, → 4.752 ms.
		// The INA226's is update_interval less 10 % and its
		// half-millisecond rounding: 35 ms → 31 → 24.8 ms.
		{"hwmon1/ina3221:1(VDD_IN)", 19072 * mV, 7560 * uV, 1512 * mA, 19072 * 1512 * uW, 4752 * time.Microsecond, 7 * time.Millisecond},
		{"hwmon1/ina3221:2(VDD_CPU_GPU_CV)", 19064 * mV, -1240 * uV, -248 * mA, -19064 * 248 * uW, 4752 * time.Microsecond, 7 * time.Millisecond},
		{"hwmon1/ina3221:3(VDD_SOC)", 19080 * mV, 2000 * uV, 400 * mA, 19080 * 400 * uW, 4752 * time.Microsecond, 7 * time.Millisecond},
		{"hwmon2/ina226:1", 11980 * mV, 20 * mV, 10000 * mA, 119781250 * uW, 24800 * time.Microsecond, 35 * time.Millisecond},
		// No update_interval: paced at DefaultInterval, the value is at
		// most one 12-bit shunt + bus conversion (1.064 ms) old.
		{"device/ina219:1", 5000 * mV, 4 * mV, 400 * mA, 2 * physic.Watt, DefaultInterval, 1064 * time.Microsecond},
	}
	root := tree(t)
	for _, tt := range tests {
		t.Run(tt.rail, func(t *testing.T) {
			s, _ := open(t, rail(t, root, tt.rail), Options{})
			info := s.Info()
			if info.Kind != drivers.KindPoint || info.Period != tt.period || info.MaxPeriod != tt.period {
				t.Fatalf("info %+v, want point every %v", info, tt.period)
			}
			smp, err := s.Next(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			want := drivers.Sample{
				Start: at(tt.period), End: at(tt.period), Uncertainty: tt.unc,
				Bus: tt.bus, Shunt: tt.shunt, Current: tt.curr, Power: tt.power,
			}
			if smp != want {
				t.Fatalf("got  %+v\nwant %+v", smp, want)
			}
		})
	}
}

// TestStale freezes every attribute and checks that the error comes at the
// first read more than max(3 × update_interval, StaleAfter) after the
// values were first seen, not one read before; and that a single changed
// attribute keeps a reading fresh.
func TestStale(t *testing.T) {
	tests := []struct {
		rail       string
		staleAfter time.Duration
		pace       time.Duration
		firstStale int // index of the first Next that must fail
	}{
		{"hwmon2/ina226:1", 0, 24800 * time.Microsecond, 5},                       // 124 ms > 105 ms, 99.2 ms is not
		{"hwmon2/ina226:1", 500 * time.Millisecond, 24800 * time.Microsecond, 21}, // 520.8 ms > 500 ms, 496 ms is not
		{"hwmon1/ina3221:1(VDD_IN)", 0, 4752 * time.Microsecond, 5},               // 23.76 ms > 21 ms
		{"device/ina219:1", 0, DefaultInterval, 4},                                // read interval stands in: 400 ms > 300 ms
	}
	for _, tt := range tests {
		t.Run(tt.rail+"/"+tt.staleAfter.String(), func(t *testing.T) {
			s, clk := open(t, rail(t, tree(t), tt.rail), Options{StaleAfter: tt.staleAfter})
			ctx := context.Background()
			for k := 1; k < tt.firstStale; k++ {
				if _, err := s.Next(ctx); err != nil {
					t.Fatalf("read %d at %v, frozen for %v: %v", k, clk.Now().Sub(drivertest.Epoch), time.Duration(k)*tt.pace, err)
				}
			}
			_, err := s.Next(ctx)
			if !errors.Is(err, drivers.ErrStale) {
				t.Fatalf("read %d, frozen for %v: error %v, want ErrStale", tt.firstStale, time.Duration(tt.firstStale)*tt.pace, err)
			}
			if got := clk.Now().Sub(drivertest.Epoch); got != time.Duration(tt.firstStale)*tt.pace {
				t.Fatalf("stale read at %v, want %v", got, time.Duration(tt.firstStale)*tt.pace)
			}
			// Still frozen: still stale, never a reading.
			if smp, err := s.Next(ctx); !errors.Is(err, drivers.ErrStale) {
				t.Fatalf("frozen rail gave %+v, %v", smp, err)
			}
		})
	}

	// The INA3221 converts its channels in turn: a sibling channel's
	// change proves the chip converts while this rail's values stay
	// identical (a quiet rail), and a whole chip frozen is still stale.
	t.Run("ina3221 quiet rail, converting chip", func(t *testing.T) {
		root := tree(t)
		s, _ := open(t, rail(t, root, "hwmon1/ina3221:1(VDD_IN)"), Options{})
		for k := 1; k <= 40; k++ {
			set(t, filepath.Join(root, "hwmon1"), "in6_input", strconv.Itoa(2000+40*(k%3)))
			if _, err := s.Next(context.Background()); err != nil {
				t.Fatalf("read %d: %v", k, err)
			}
		}
		// The sibling stops too: five reads (23.76 ms > 21 ms) on, stale.
		var err error
		for k := 1; k <= 5 && err == nil; k++ {
			_, err = s.Next(context.Background())
		}
		if !errors.Is(err, drivers.ErrStale) {
			t.Fatalf("whole chip frozen: %v, want ErrStale", err)
		}
	})
	t.Run("ina3221 disabled sibling is no witness", func(t *testing.T) {
		root := tree(t)
		dir := filepath.Join(root, "hwmon1")
		set(t, dir, "in3_enable", "0")
		s, _ := open(t, rail(t, root, "hwmon1/ina3221:1(VDD_IN)"), Options{})
		var err error
		for k := 1; k <= 5 && err == nil; k++ {
			// A disabled channel's inputs are not read: its file moving
			// (it would fail with ENODATA on a real kernel) proves nothing.
			set(t, dir, "in6_input", strconv.Itoa(2000+40*(k%2)))
			_, err = s.Next(context.Background())
		}
		if !errors.Is(err, drivers.ErrStale) {
			t.Fatalf("only a disabled sibling moved: %v, want ErrStale", err)
		}
	})

	t.Run("changing attribute stays fresh", func(t *testing.T) {
		root := tree(t)
		s, _ := open(t, rail(t, root, "hwmon2/ina226:1"), Options{})
		for k := 1; k <= 20; k++ {
			// Only the bus voltage moves: the chip is converting.
			set(t, filepath.Join(root, "hwmon2"), "in1_input", strconv.Itoa(11980+k%2))
			if _, err := s.Next(context.Background()); err != nil {
				t.Fatalf("read %d: %v", k, err)
			}
		}
	})
}

// ina228 opens the fixture's energy rail with a 5 mΩ shunt, read every
// 100 ms: energy steps of 3200 µJ, 24 W is 2400000 µJ per read.
func ina228(t *testing.T) (*Sensor, string) {
	root := tree(t)
	s, _ := open(t, rail(t, root, "hwmon3/ina228:1"), Options{ShuntMicroOhms: 5000, Interval: 100 * time.Millisecond})
	return s, filepath.Join(root, "hwmon3")
}

func setEnergy(t *testing.T, dir string, uj uint64) {
	set(t, dir, "energy1_input", strconv.FormatUint(uj, 10))
}

// counterWant is the sample a 100 ms counter read ending at end gives for
// 24 W under the fixture's other attributes.
func counterWant(end time.Duration, contiguous bool) drivers.Sample {
	return drivers.Sample{
		Start: at(end - 100*time.Millisecond), End: at(end),
		Uncertainty: ina238Conv,
		Contiguous:  contiguous,
		// Bus and temperature take two of each three conversion slots.
		Dead: 66666667 * time.Nanosecond,
		Bus:  12 * physic.Volt, Shunt: 10 * physic.MilliVolt, Current: 2 * physic.Ampere,
		Power: 24 * physic.Watt,
	}
}

func TestCounterProgression(t *testing.T) {
	s, dir := ina228(t)
	info := s.Info()
	if info.Kind != drivers.KindCounter || info.Period != 100*time.Millisecond || info.MaxPeriod != 100*time.Millisecond+ina238Conv {
		t.Fatalf("info %+v", info)
	}
	if info.Accuracy.Quantum != 3200*physic.MicroJoule {
		t.Fatalf("quantum %v, want the kernel's 3200 µJ step", info.Accuracy.Quantum)
	}
	e := uint64(3_200_000_000)
	for k := 1; k <= 4; k++ {
		e += 2_400_000
		setEnergy(t, dir, e)
		smp, err := s.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		// The first sample after opening cannot claim to follow anything.
		if want := counterWant(time.Duration(k)*100*time.Millisecond, k > 1); smp != want {
			t.Fatalf("read %d:\ngot  %+v\nwant %+v", k, smp, want)
		}
	}
	// A load change shows in the next interval's mean exactly: 750 → 1500
	// counts in 100 ms is 48 W.
	e += 4_800_000
	setEnergy(t, dir, e)
	if smp, err := s.Next(context.Background()); err != nil || smp.Power != 48*physic.Watt || !smp.Contiguous {
		t.Fatalf("doubled load: %+v, %v", smp, err)
	}
}

func TestCounterWrapCountedOnce(t *testing.T) {
	s, dir := ina228(t)
	modulus := uint64(3200) << 40
	// Reads 1 and 2 are just below the top; read 3 has wrapped; read 4
	// goes on from there and must not be taken for a second wrap.
	for k, e := range []uint64{modulus - 3_600_000, modulus - 1_200_000, 1_200_000, 3_600_000} {
		setEnergy(t, dir, e)
		smp, err := s.Next(context.Background())
		if err != nil {
			t.Fatalf("read %d: %v", k+1, err)
		}
		if want := counterWant(time.Duration(k+1)*100*time.Millisecond, k > 0); k > 0 && smp != want {
			t.Fatalf("read %d:\ngot  %+v\nwant %+v", k+1, smp, want)
		}
		wraps := uint64(0)
		if k >= 2 {
			wraps = 1
		}
		if s.Wraps() != wraps {
			t.Fatalf("after read %d: %d wraps, want %d", k+1, s.Wraps(), wraps)
		}
	}
}

func TestCounterResetThenNotContiguous(t *testing.T) {
	s, dir := ina228(t)
	ctx := context.Background()
	setEnergy(t, dir, 3_202_400_000)
	if _, err := s.Next(ctx); err != nil {
		t.Fatal(err)
	}
	// The chip lost its accumulator: a fall no wrap at full scale explains.
	setEnergy(t, dir, 6400)
	if smp, err := s.Next(ctx); !errors.Is(err, ErrCounterReset) {
		t.Fatalf("reset gave %+v, %v", smp, err)
	}
	if s.Wraps() != 0 {
		t.Fatalf("reset counted as %d wraps", s.Wraps())
	}
	// The read that saw the reset is the new base: the next sample spans
	// from it and does not claim to follow the last one returned.
	setEnergy(t, dir, 6400+2_400_000)
	smp, err := s.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := counterWant(300*time.Millisecond, false); smp != want {
		t.Fatalf("after reset:\ngot  %+v\nwant %+v", smp, want)
	}
	setEnergy(t, dir, 6400+4_800_000)
	if smp, err := s.Next(ctx); err != nil || smp != counterWant(400*time.Millisecond, true) {
		t.Fatalf("chain after reset: %+v, %v", smp, err)
	}
}

// TestCounterRebasesAfterError: energy the chip may not have counted while
// its attributes were unreadable must not be folded into a sample; the
// driver takes a new base after the error and the first sample from it
// is not Contiguous.
func TestCounterRebasesAfterError(t *testing.T) {
	s, dir := ina228(t)
	ctx := context.Background()
	setEnergy(t, dir, 3_202_400_000)
	if _, err := s.Next(ctx); err != nil {
		t.Fatal(err)
	}
	set(t, dir, "energy1_input", "garbage")
	if smp, err := s.Next(ctx); err == nil {
		t.Fatalf("malformed counter gave %+v", smp)
	}
	// Reads at 300 ms (new base) and 400 ms (the sample).
	setEnergy(t, dir, 3_210_000_000)
	smp, err := s.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if smp.Start != at(300*time.Millisecond) || smp.End != at(400*time.Millisecond) || smp.Contiguous || smp.Power != 0 {
		t.Fatalf("after error: %+v, want a non-contiguous sample over [300, 400] ms", smp)
	}
}

func TestReadErrorsNeverZero(t *testing.T) {
	root := tree(t)
	dir := filepath.Join(root, "hwmon1")
	s, _ := open(t, rail(t, root, "hwmon1/ina3221:1(VDD_IN)"), Options{})
	set(t, dir, "curr1_input", "garbage")
	if smp, err := s.Next(context.Background()); err == nil {
		t.Fatalf("malformed attribute gave %+v", smp)
	}
	os.Remove(filepath.Join(dir, "curr1_input"))
	if smp, err := s.Next(context.Background()); err == nil {
		t.Fatalf("vanished attribute gave %+v", smp)
	}
	if _, err := Open(Rail{Dir: root, Chip: "nvme"}, Options{}); err == nil {
		t.Fatal("unknown chip accepted")
	}
	// The ina238 family publishes no shunt resistor: without one the
	// driver cannot state a full scale, so it refuses the rail.
	if _, err := Open(rail(t, root, "hwmon3/ina228:1"), Options{}); err == nil {
		t.Fatal("ina228 opened without a shunt resistance")
	}
	s.Close()
	if _, err := s.Next(context.Background()); err == nil {
		t.Fatal("Next on a closed sensor succeeded")
	}
}

func TestNextHonoursContext(t *testing.T) {
	s, _ := open(t, rail(t, tree(t), "hwmon2/ina226:1"), Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled context: %v", err)
	}
}

// TestAccuracy checks the budget as the kernel scales each chip. The INA226
// line is the kernel's: CAL 2048 makes Current_LSB 2.5 µV / R (1250 µA at
// 2 mΩ) and power1_input steps 25 × that (31.25 mW).
func TestAccuracy(t *testing.T) {
	mW := physic.MilliWatt
	tests := []struct {
		name      string
		rail      string
		opts      Options
		shunt     string // rewrites the shunt resistor attribute when set
		bus       physic.ElectricPotential
		gain      float64
		offset    physic.Power
		fullScale physic.Power
		quantum   physic.Energy
	}{
		{
			// 12 V × (10 µV / 2 mΩ + 1250 µA) = 75 mW; one power step
			// 31.25 mW; (7.5 + 1.25) mV × 40.96 A = 358.4 mW.
			name: "ina226 2 mΩ", rail: "hwmon2/ina226:1", bus: 12 * physic.Volt,
			gain: 0.002, offset: 75*mW + 31250*physic.MicroWatt + 358400*physic.MicroWatt,
			fullScale: 491520 * mW, // 81.92 mV / 2 mΩ × 12 V
		},
		{
			// 1.6 mΩ: the kernel rounds 1562.5 µA up to 1563 µA, a gain
			// error of its own, and steps power by 25 × 1563 µW. 12 V ×
			// (6.25 + 1.563) mA = 93.756 mW; 8.75 mV × 51.2 A = 448 mW.
			name: "ina226 1.6 mΩ", rail: "hwmon2/ina226:1", shunt: "1600", bus: 12 * physic.Volt,
			gain:      0.002 + 0.5/1562.5,
			offset:    93756*physic.MicroWatt + 39075*physic.MicroWatt + 448*mW,
			fullScale: 614400 * mW, // 81.92 mV / 1.6 mΩ × 12 V
		},
		{
			// 19 V × (80 µV / 5 mΩ + 40 µV / 5 mΩ + 0.5 mA rounding) =
			// 465.5 mW; (16 + 8) mV × 32.76 A = 786.24 mW; no power
			// register.
			name: "ina3221 5 mΩ", rail: "hwmon1/ina3221:1(VDD_IN)", bus: 19 * physic.Volt,
			gain: 0.005, offset: 465500*physic.MicroWatt + 786240*physic.MicroWatt,
			fullScale: 622440 * mW, // 163.8 mV / 5 mΩ × 19 V
		},
		{
			// 12 V × (1 µV / 5 mΩ + 62.5 µA) = 3.15 mW; one 200 µW step;
			// (5 mV + 195.313 µV) × 32.768 A, rounded up to the nW.
			name: "ina228 5 mΩ", rail: "hwmon3/ina228:1", opts: Options{ShuntMicroOhms: 5000}, bus: 12 * physic.Volt,
			gain:      0.01,
			offset:    3150*physic.MicroWatt + 200*physic.MicroWatt + 170240017*physic.NanoWatt,
			fullScale: 393216 * mW, // 163.84 mV / 5 mΩ × 12 V
			quantum:   3200 * physic.MicroJoule,
		},
		{
			name: "MaxPower replaces the full scale", rail: "hwmon2/ina226:1", opts: Options{MaxPower: 60 * physic.Watt},
			bus: 12 * physic.Volt, gain: 0.002, offset: 464650 * physic.MicroWatt, fullScale: 60 * physic.Watt,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := tree(t)
			r := rail(t, root, tt.rail)
			if tt.shunt != "" {
				set(t, r.Dir, "shunt_resistor", tt.shunt)
			}
			s, _ := open(t, r, tt.opts)
			a := s.Info().Accuracy
			if math.Abs(a.GainErr-tt.gain) > 1e-12 {
				t.Errorf("gain %v, want %v", a.GainErr, tt.gain)
			}
			if got := a.Offset(tt.bus); got != tt.offset {
				t.Errorf("offset at %v = %v (%d nW), want %v (%d nW)", tt.bus, got, int64(got), tt.offset, int64(tt.offset))
			}
			if got := a.Offset(-tt.bus); got != tt.offset {
				t.Errorf("offset at %v = %v, want it symmetric", -tt.bus, got)
			}
			if got := a.FullScale(tt.bus); got != tt.fullScale {
				t.Errorf("full scale at %v = %v, want %v", tt.bus, got, tt.fullScale)
			}
			if a.Quantum != tt.quantum {
				t.Errorf("quantum %v, want %v", a.Quantum, tt.quantum)
			}
		})
	}
}

// TestOverflowBeyondFullScale: a reading above what the configured shunt
// can measure is not a measurement.
func TestOverflowBeyondFullScale(t *testing.T) {
	root := tree(t)
	s, _ := open(t, rail(t, root, "hwmon2/ina226:1"), Options{MaxPower: 100 * physic.Watt})
	smp, err := s.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !smp.Overflow {
		t.Fatalf("119.8 W against a 100 W full scale: %+v", smp)
	}
	set(t, filepath.Join(root, "hwmon2"), "power1_input", "60000000")
	if smp, err := s.Next(context.Background()); err != nil || smp.Overflow {
		t.Fatalf("60 W: %+v, %v", smp, err)
	}
}

func TestRead(t *testing.T) {
	clk := drivertest.NewClock(drivertest.Epoch, true)
	smp, err := Read(rail(t, tree(t), "hwmon3/ina228:1"), clk)
	if err != nil {
		t.Fatal(err)
	}
	want := drivers.Sample{Start: drivertest.Epoch, End: drivertest.Epoch, Bus: 12 * physic.Volt,
		Shunt: 10 * physic.MilliVolt, Current: 2 * physic.Ampere, Power: 24 * physic.Watt}
	if smp != want {
		t.Fatalf("got %+v, want %+v", smp, want)
	}
}

// TestINA3221Window recovers the chip's true averaging window from the
// enabled channels, samples and update_interval, under both conventions
// ina3221.c has used for update_interval (with and without the samples
// factor).
func TestINA3221Window(t *testing.T) {
	tests := []struct {
		name            string
		enabled         [3]string
		samples, update string
		lo, hi          time.Duration
		ok              bool
	}{
		{"default 0x7127", [3]string{"1", "1", "1"}, "1", "7", 6600 * time.Microsecond, 6600 * time.Microsecond, true},
		{"one channel", [3]string{"1", "0", "0"}, "1", "2", 2200 * time.Microsecond, 2200 * time.Microsecond, true},
		// Newer kernels publish channels × (CT + CT) whatever samples is:
		// 7 ms with 4 samples is a 26.4 ms window; older ones include
		// samples, and no CT gives 4 × 6 × CT ≈ 7 ms.
		{"samples not in update_interval", [3]string{"1", "1", "1"}, "4", "7", 26400 * time.Microsecond, 26400 * time.Microsecond, true},
		{"samples in update_interval", [3]string{"1", "1", "1"}, "4", "26", 26400 * time.Microsecond, 26400 * time.Microsecond, true},
		// 140 µs and 204 µs CTs both round to 1 ms on three channels.
		{"ambiguous", [3]string{"1", "1", "1"}, "1", "1", 840 * time.Microsecond, 1224 * time.Microsecond, true},
		{"no CT fits", [3]string{"1", "1", "1"}, "1", "3", 0, 0, false},
		{"no samples", [3]string{"1", "1", "1"}, "", "7", 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := tree(t)
			dir := filepath.Join(root, "hwmon1")
			set(t, dir, "in1_enable", tt.enabled[0], "in2_enable", tt.enabled[1], "in3_enable", tt.enabled[2])
			if tt.samples == "" {
				if err := os.Remove(filepath.Join(dir, "samples")); err != nil {
					t.Fatal(err)
				}
			} else {
				set(t, dir, "samples", tt.samples)
			}
			u, _ := strconv.Atoi(tt.update)
			lo, hi, ok := ina3221Window(rail(t, root, "hwmon1/ina3221:1(VDD_IN)"), time.Duration(u)*time.Millisecond)
			if lo != tt.lo || hi != tt.hi || ok != tt.ok {
				t.Fatalf("got [%v, %v] %v, want [%v, %v] %v", lo, hi, ok, tt.lo, tt.hi, tt.ok)
			}
		})
	}
}
