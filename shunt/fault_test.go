package shunt

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"meshd/drivers"
	"meshd/drivers/drivertest"
	"meshd/shunt/shunttest"
	"meshd/wire"
)

func constLoad(t testing.TB, w float64) *shunttest.Piecewise {
	l, err := shunttest.NewPiecewise(drivertest.Epoch, []int64{0}, []float64{w * 1e9})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// squareLoad alternates hi and lo watts every half period.
func squareLoad(t testing.TB, hi, lo float64, period time.Duration, d time.Duration) *shunttest.Piecewise {
	var at []int64
	var p []float64
	for x := int64(0); x < d.Nanoseconds(); x += period.Nanoseconds() {
		at = append(at, x, x+period.Nanoseconds()/2)
		p = append(p, hi*1e9, lo*1e9)
	}
	l, err := shunttest.NewPiecewise(drivertest.Epoch, at, p)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func fast() shunttest.ReplayConfig {
	return shunttest.ReplayConfig{Name: "ina226@sim", Kind: drivers.KindConversion, Period: 1100 * time.Microsecond,
		Lag: 150 * time.Microsecond, Uncertainty: 120 * time.Microsecond, Jitter: 50 * time.Microsecond,
		GainErr: 0.002, OffsetNW: 15e6, FullScaleNW: 18e9}
}

func at(i int, f shunttest.Fault) func(int) shunttest.Fault {
	return func(j int) shunttest.Fault {
		if j == i {
			return f
		}
		return shunttest.FaultNone
	}
}

// TestFaultBattery replays each fault an independent check found, at a
// known conversion inside a 100 ms window, and asserts the label and that
// the bound contains the true energy.
func TestFaultBattery(t *testing.T) {
	const d = 400 * time.Millisecond
	t0, t1 := drivertest.Epoch.Add(100*time.Millisecond), drivertest.Epoch.Add(200*time.Millisecond)
	inside := 136 // conversion 136 ends at 150.7 ms
	cases := []struct {
		name string
		rc   func() shunttest.ReplayConfig
		load func(testing.TB) *shunttest.Piecewise
		want wire.Provenance
		why  string
	}{
		{"clean", fast, func(t testing.TB) *shunttest.Piecewise { return constLoad(t, 5) }, wire.HwShunt, ""},
		{"one dropped conversion", func() shunttest.ReplayConfig { c := fast(); c.Faults = at(inside, shunttest.FaultDrop); return c },
			func(t testing.TB) *shunttest.Piecewise { return constLoad(t, 5) }, wire.ModelBased, "not covered by chained"},
		{"a drop the driver lies about", func() shunttest.ReplayConfig {
			c := fast()
			c.Faults = at(inside, shunttest.FaultDropLying)
			return c
		}, func(t testing.TB) *shunttest.Piecewise { return constLoad(t, 5) }, wire.ModelBased, "not covered by chained"},
		{"every other conversion dropped", func() shunttest.ReplayConfig {
			c := fast()
			c.Faults = func(i int) shunttest.Fault {
				if i%2 == 1 {
					return shunttest.FaultDrop
				}
				return shunttest.FaultNone
			}
			return c
		}, func(t testing.TB) *shunttest.Piecewise { return squareLoad(t, 12, 1, 2200*time.Microsecond, d) }, wire.ModelBased, "not covered by chained"},
		{"a NACK", func() shunttest.ReplayConfig { c := fast(); c.Faults = at(inside, shunttest.FaultReadError); return c },
			func(t testing.TB) *shunttest.Piecewise { return constLoad(t, 5) }, wire.ModelBased, "not covered by chained"},
		{"a duplicate", func() shunttest.ReplayConfig { c := fast(); c.Faults = at(inside, shunttest.FaultDuplicate); return c },
			func(t testing.TB) *shunttest.Piecewise { return constLoad(t, 5) }, wire.ModelBased, "not covered by chained"},
		{"a stale value", func() shunttest.ReplayConfig {
			c := fast()
			c.Faults = func(i int) shunttest.Fault {
				if i >= inside && i < inside+27 { // 30 ms of stale readings
					return shunttest.FaultStale
				}
				return shunttest.FaultNone
			}
			return c
		}, func(t testing.TB) *shunttest.Piecewise { return constLoad(t, 5) }, wire.ModelBased, "not covered by chained"},
		{"an overflow", func() shunttest.ReplayConfig { c := fast(); c.Faults = at(inside, shunttest.FaultOverflow); return c },
			func(t testing.TB) *shunttest.Piecewise { return constLoad(t, 5) }, wire.ModelBased, "not covered by chained"},
		{"a stall", func() shunttest.ReplayConfig { c := fast(); c.Faults = at(inside, shunttest.FaultStall); return c },
			func(t testing.TB) *shunttest.Piecewise { return constLoad(t, 5) }, wire.ModelBased, "not covered by chained"},
		{"a chip clock 30% slow", func() shunttest.ReplayConfig { c := fast(); c.ClockFactor = 1.3; return c },
			func(t testing.TB) *shunttest.Piecewise { return constLoad(t, 5) }, wire.ModelBased, "not covered by chained"},
		{"a host clock jump forward", func() shunttest.ReplayConfig { c := fast(); c.Faults = at(inside, shunttest.FaultClockJump); return c },
			func(t testing.TB) *shunttest.Piecewise { return constLoad(t, 5) }, wire.ModelBased, "not covered by chained"},
		{"a host clock step back", func() shunttest.ReplayConfig { c := fast(); c.Faults = at(inside, shunttest.FaultClockBack); return c },
			func(t testing.TB) *shunttest.Piecewise { return constLoad(t, 5) }, wire.ModelBased, "not covered by chained"},
		{"a late delivery", func() shunttest.ReplayConfig { c := fast(); c.Faults = at(inside, shunttest.FaultLate); return c },
			func(t testing.TB) *shunttest.Piecewise { return constLoad(t, 5) }, wire.HwShunt, ""},
		{"a point sampler on a 1 kHz square load", func() shunttest.ReplayConfig {
			return shunttest.ReplayConfig{Name: "um25c", Kind: drivers.KindPoint, Period: 100 * time.Millisecond, Point: true,
				Lag: 10 * time.Millisecond, GainErr: 0.01, OffsetNW: 10e6, FullScaleNW: 24e9}
		}, func(t testing.TB) *shunttest.Piecewise { return squareLoad(t, 12, 1, time.Millisecond, d) }, wire.ModelBased, "point meter"},
		{"a frozen sysfs value", func() shunttest.ReplayConfig {
			return shunttest.ReplayConfig{Name: "hwmon", Kind: drivers.KindPoint, Period: 10 * time.Millisecond, Point: true,
				GainErr: 0.002, OffsetNW: 10e6, FullScaleNW: 24e9, Faults: func(i int) shunttest.Fault {
					if i >= 12 && i < 22 {
						return shunttest.FaultStale
					}
					return shunttest.FaultNone
				}}
		}, func(t testing.TB) *shunttest.Piecewise { return constLoad(t, 12) }, wire.ModelBased, "point meter"},
		{"a modelled counter", func() shunttest.ReplayConfig {
			return shunttest.ReplayConfig{Name: "rapl:package-0", Kind: drivers.KindModel, Period: 10 * time.Millisecond,
				Uncertainty: time.Millisecond, GainErr: 0.05, FullScaleNW: 200e9}
		}, func(t testing.TB) *shunttest.Piecewise { return constLoad(t, 40) }, wire.ModelBased, "model meter"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			load := c.load(t)
			mc := meterConfig{name: c.name, rc: c.rc()}
			s, r := recorded(t, mc, load, d)
			rep, err := s.Energy(t0, t1)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Reading.Provenance != c.want || !strings.Contains(rep.Why, c.why) {
				t.Fatalf("provenance %v (why %q), want %v (%q); evidence %+v", rep.Reading.Provenance, rep.Why, c.want, c.why, rep.Reading.Metering)
			}
			want := truth(t, rep, r, load)
			if got := float64(rep.Reading.EnergyUJ); math.Abs(got-want) > float64(rep.Reading.Metering.ErrorUJ) {
				t.Fatalf("%.0f µJ, truth %.1f µJ, outside the bound %d µJ", got, want, rep.Reading.Metering.ErrorUJ)
			}
			m := rep.Reading.Metering
			if c.want == wire.HwShunt {
				checkHardwareClaim(t, rep, r, t0, t1)
			} else if mc.rc.Kind.Hardware() && m.CoveredPPM == wire.FullPPM {
				t.Fatalf("a %v window claims full coverage", c.want)
			}
			if m.ServeNs != uint64(t1.Sub(t0)) || m.WindowNs < m.ServeNs {
				t.Fatalf("serve %d ns, window %d ns", m.ServeNs, m.WindowNs)
			}
		})
	}
}

// TestCoverageOfHalfDroppedIsHalf: with every other conversion dropped the
// evidence says about half the window was observed.
func TestCoverageOfHalfDroppedIsHalf(t *testing.T) {
	rc := fast()
	rc.Faults = func(i int) shunttest.Fault {
		if i%2 == 1 {
			return shunttest.FaultDrop
		}
		return shunttest.FaultNone
	}
	load := constLoad(t, 5)
	s, _ := recorded(t, meterConfig{rc: rc}, load, 300*time.Millisecond)
	rep, err := s.Energy(drivertest.Epoch.Add(100*time.Millisecond), drivertest.Epoch.Add(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if c := rep.Reading.Metering.CoveredPPM; c < 450_000 || c > 550_000 {
		t.Fatalf("covered %d ppm, want about half", c)
	}
}

// TestStallIsReportedWithinThreePeriods: a sensor that stops converting is
// unhealthy three longest periods after its last valid reading, and the
// stall is counted.
func TestStallIsReportedWithinThreePeriods(t *testing.T) {
	rc := fast()
	rc.Faults = func(i int) shunttest.Fault {
		if i >= 50 {
			return shunttest.FaultStall
		}
		return shunttest.FaultNone
	}
	load := constLoad(t, 5)
	clock := drivertest.NewClock(load.Origin, true)
	r := shunttest.NewReplay(rc, load, clock)
	s, err := NewSeries(r.Name(), r.Info(), Config{Now: clock.Now, Epoch: load.Origin})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 50 {
		smp, err := r.Next(ctx)
		s.Record(smp, err)
	}
	if err := s.Health(); err != nil {
		t.Fatalf("healthy meter: %v", err)
	}
	last := s.Stats().LastValid
	period := r.Info().Period
	clock.Set(last.Add(3 * period))
	if err := s.Health(); err != nil {
		t.Fatalf("unhealthy at exactly three periods: %v", err)
	}
	clock.Set(last.Add(3*period + time.Nanosecond))
	if err := s.Health(); err == nil || !strings.Contains(err.Error(), "three periods") {
		t.Fatalf("Health = %v just past three periods", err)
	}
	smp, err := r.Next(ctx)
	s.Record(smp, err)
	if !errors.Is(err, drivers.ErrStalled) || s.Stats().Stalls != 1 {
		t.Fatalf("stall %v, counted %d", err, s.Stats().Stalls)
	}
}

// TestHugeWindowDoesNotOverflow: 12 MJ in one window (1 kW for 200
// minutes) is a figure, not a "reverse flow" error.
func TestHugeWindowDoesNotOverflow(t *testing.T) {
	rc := shunttest.ReplayConfig{Name: "counter", Kind: drivers.KindCounter, Period: time.Second,
		Uncertainty: time.Millisecond, GainErr: 0.005, FullScaleNW: 2e12}
	load := constLoad(t, 1000)
	d := 200 * time.Minute
	s, r := recorded(t, meterConfig{rc: rc}, load, d+10*time.Second)
	t0, t1 := load.Origin.Add(5*time.Second), load.Origin.Add(d)
	rep, err := s.Energy(t0, t1)
	if err != nil {
		t.Fatal(err)
	}
	want := truth(t, rep, r, load)
	if rep.Reading.Provenance != wire.HwShunt || math.Abs(float64(rep.Reading.EnergyUJ)-want) > float64(rep.Reading.Metering.ErrorUJ) || want < 11.9e12 {
		t.Fatalf("%v %d µJ ± %d, truth %.0f", rep.Reading.Provenance, rep.Reading.EnergyUJ, rep.Reading.Metering.ErrorUJ, want)
	}
}
