package shunt

import (
	"context"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"meshd/drivers"
	"meshd/drivers/drivertest"
	"meshd/shunt/shunttest"
	"meshd/wire"

	"periph.io/x/conn/v3/physic"
)

// meterConfig is one shipped meter configuration as the sampler sees it:
// the timing and error budget its driver states.
type meterConfig struct {
	name string
	rc   shunttest.ReplayConfig
	// hw: a clean run must earn HwShunt (the configuration's bound can
	// meet its declared accuracy at engine loads).
	hw bool
}

// shipped mirrors the drivers' configurations: INA226 presets (fast, long
// shunt conversion, the kernel's default), an INA219 at 12 bits, an INA226
// in shunt-only mode, a hardware energy counter, a modelled counter (RAPL,
// NVML) and two point samplers (hwmon power, a USB meter).
func shipped() []meterConfig {
	ina := func(name string, period time.Duration, dead float64) meterConfig {
		return meterConfig{name: name, hw: dead < 0.05, rc: shunttest.ReplayConfig{
			Name: name, Kind: drivers.KindConversion, Period: period, DeadFrac: dead,
			Lag: 150 * time.Microsecond, Uncertainty: 120 * time.Microsecond, Jitter: 50 * time.Microsecond,
			GainErr: 0.002, OffsetNW: 15e6, FullScaleNW: 18e9,
		}}
	}
	return []meterConfig{
		ina("ina226-fast", 1240*time.Microsecond, 0.113),
		ina("ina226-precise", 8384*time.Microsecond, 0.0167),
		ina("ina226-kernel", 35200*time.Microsecond, 0.5),
		ina("ina219-12bit", 1064*time.Microsecond, 0.5),
		shuntOnly(ina("ina226-shunt-only", 1100*time.Microsecond, 0)),
		{name: "hwmon-energy", hw: true, rc: shunttest.ReplayConfig{Name: "hwmon-energy", Kind: drivers.KindCounter, Period: 10 * time.Millisecond,
			Lag: 50 * time.Microsecond, Uncertainty: 1100 * time.Microsecond, Jitter: time.Millisecond,
			GainErr: 0.005, OffsetNW: 10e6, FullScaleNW: 18e9}},
		{name: "rapl", rc: shunttest.ReplayConfig{Name: "rapl", Kind: drivers.KindModel, Period: 10 * time.Millisecond,
			Lag: 20 * time.Microsecond, Uncertainty: time.Millisecond, Jitter: time.Millisecond,
			GainErr: 0.05, FullScaleNW: 18e9}},
		{name: "hwmon-power", rc: shunttest.ReplayConfig{Name: "hwmon-power", Kind: drivers.KindPoint, Period: 100 * time.Millisecond,
			Lag: 30 * time.Microsecond, GainErr: 0.002, OffsetNW: 15e6, FullScaleNW: 24e9, Point: true}},
		{name: "um25c", rc: shunttest.ReplayConfig{Name: "um25c", Kind: drivers.KindPoint, Period: 100 * time.Millisecond,
			Lag: 15 * time.Millisecond, GainErr: 0.01, OffsetNW: 10e6, FullScaleNW: 24e9, Point: true}},
	}
}

// shuntOnly makes an INA configuration assume its bus voltage within
// 0.2 % of 12 V, as the shunt-only preset does: never HwShunt.
func shuntOnly(mc meterConfig) meterConfig {
	mc.hw = false
	mc.rc.BusAssumed = &drivers.BusBand{Lo: 11976 * physic.MilliVolt, Hi: 12024 * physic.MilliVolt}
	return mc
}

// engineTrace is an engine-shaped load: idle between serves, a prefill
// burst, decode with a pulse per token, and now and then a 1 kHz square
// wave (the aliasing case for point samplers).
func engineTrace(rng *rand.Rand, origin time.Time, d time.Duration) *shunttest.Piecewise {
	var at []int64
	var p []float64
	t := int64(0)
	add := func(dur time.Duration, w float64) {
		at = append(at, t)
		p = append(p, w*1e9)
		t += dur.Nanoseconds()
	}
	for t < d.Nanoseconds() {
		idle := 2 + 2*rng.Float64()
		add(time.Duration(20+rng.IntN(400))*time.Millisecond, idle)
		add(time.Duration(5+rng.IntN(200))*time.Millisecond, 8+7*rng.Float64())
		tokens := rng.IntN(60)
		hi, lo := 6+4*rng.Float64(), 3+2*rng.Float64()
		tok := time.Duration(5+rng.IntN(40)) * time.Millisecond
		duty := 0.2 + 0.6*rng.Float64()
		for range tokens {
			add(time.Duration(float64(tok)*duty), hi)
			add(time.Duration(float64(tok)*(1-duty)), lo)
		}
		if rng.IntN(4) == 0 {
			for range 50 + rng.IntN(200) {
				add(500*time.Microsecond, 12)
				add(500*time.Microsecond, 1)
			}
		}
	}
	l, err := shunttest.NewPiecewise(origin, at, p)
	if err != nil {
		panic(err)
	}
	return l
}

// recorded runs a replay sensor over the whole trace into a Series.
func recorded(t testing.TB, mc meterConfig, load *shunttest.Piecewise, d time.Duration) (*Series, *shunttest.Replay) {
	t.Helper()
	clock := drivertest.NewClock(load.Origin, true)
	r := shunttest.NewReplay(mc.rc, load, clock)
	s, err := NewSeries(r.Name(), r.Info(), Config{Now: clock.Now, Epoch: load.Origin, Capacity: int(d/mc.rc.Period) + 4096})
	if err != nil {
		t.Fatal(err)
	}
	end := load.Origin.Add(d)
	ctx := context.Background()
	for clock.Now().Before(end) {
		smp, err := r.Next(ctx)
		s.Record(smp, err)
	}
	return s, r
}

// truth is the true energy (µJ) of the interval a report integrated: the
// conversions' true interval for a chained window, the serve interval
// itself otherwise.
func truth(t testing.TB, rep Report, r *shunttest.Replay, load *shunttest.Piecewise) float64 {
	t.Helper()
	if !rep.Coverage.Chained {
		return load.EnergyNJ(rep.Start, rep.End) / 1e3
	}
	convs := r.Conversions()
	i := sort.Search(len(convs), func(i int) bool { return !convs[i].StatedStart.Before(rep.Start) })
	j := sort.Search(len(convs), func(i int) bool { return !convs[i].StatedEnd.Before(rep.End) })
	if i == len(convs) || j == len(convs) || !convs[i].StatedStart.Equal(rep.Start) || !convs[j].StatedEnd.Equal(rep.End) {
		t.Fatalf("chained report [%v, %v] does not start and end on conversions", rep.Start, rep.End)
	}
	return load.EnergyNJ(convs[i].TrueStart, convs[j].TrueEnd) / 1e3
}

type batteryStats struct {
	windows, hw, contained int
	bounds100              []float64 // bound / energy at 100 ms windows
}

// runWindows queries n random windows and checks the two rules every
// figure must keep: HwShunt only over chained conversions, delivered once,
// that truly cover the serve; and the bound contains the truth.
func runWindows(t *testing.T, rng *rand.Rand, s *Series, r *shunttest.Replay, load *shunttest.Piecewise, d time.Duration, n int, st *batteryStats) {
	t.Helper()
	for range n {
		length := time.Duration(rng.Int64N(int64(300 * time.Millisecond)))
		if rng.IntN(3) == 0 {
			length = 100 * time.Millisecond
		}
		t0 := load.Origin.Add(200*time.Millisecond + time.Duration(rng.Int64N(int64(d-time.Second-length))))
		t1 := t0.Add(length)
		rep, err := s.Energy(t0, t1)
		if err != nil {
			if !errorsIsNoMeasurement(err) {
				t.Fatalf("window [%v +%v]: %v", t0.Sub(load.Origin), length, err)
			}
			continue
		}
		st.windows++
		got := float64(rep.Reading.EnergyUJ)
		want := truth(t, rep, r, load)
		if math.Abs(got-want) <= float64(rep.Reading.Metering.ErrorUJ) {
			st.contained++
		} else if rep.Reading.Provenance == wire.HwShunt {
			t.Errorf("HwShunt window [%v +%v] %.0f µJ, truth %.1f µJ, bound %d µJ", t0.Sub(load.Origin), length, got, want, rep.Reading.Metering.ErrorUJ)
		}
		if rep.Reading.Provenance == wire.HwShunt {
			st.hw++
			checkHardwareClaim(t, rep, r, t0, t1)
		}
		if length == 100*time.Millisecond && want > 0 {
			st.bounds100 = append(st.bounds100, float64(rep.Reading.Metering.ErrorUJ)/want)
		}
	}
}

func errorsIsNoMeasurement(err error) bool { return err != nil && errorsIs(err, wire.ErrNoMeasurement) }

// checkHardwareClaim asserts what HwShunt means: full coverage of the serve
// by conversions that were each delivered exactly once, in a chain.
func checkHardwareClaim(t *testing.T, rep Report, r *shunttest.Replay, t0, t1 time.Time) {
	t.Helper()
	m := rep.Reading.Metering
	if m.CoveredPPM != wire.FullPPM || m.MaxGapNs > m.PeriodNs || m.Samples < 1 || !rep.Coverage.Chained {
		t.Fatalf("HwShunt with evidence %+v", m)
	}
	convs := r.Conversions()
	i := sort.Search(len(convs), func(i int) bool { return !convs[i].StatedStart.Before(rep.Start) })
	j := sort.Search(len(convs), func(i int) bool { return !convs[i].StatedEnd.Before(rep.End) })
	if convs[i].TrueStart.After(t0) || convs[j].TrueEnd.Before(t1) {
		t.Fatalf("HwShunt over [%v, %v] does not truly cover the serve [%v, %v]", convs[i].TrueStart, convs[j].TrueEnd, t0, t1)
	}
	for k := i; k <= j; k++ {
		if convs[k].Delivered != 1 {
			t.Fatalf("HwShunt over a conversion delivered %d times", convs[k].Delivered)
		}
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	v = append([]float64(nil), v...)
	sort.Float64s(v)
	return v[len(v)/2]
}

// TestBatteryRandomEngineTraces drives every shipped configuration through
// random engine-shaped traces, clean and with 3 % random faults: 0 HwShunt
// without full, chained, exactly-once coverage, and the bound contains the
// truth in at least 99 % of windows (it is built to hold in all of them).
func TestBatteryRandomEngineTraces(t *testing.T) {
	const d = 12 * time.Second
	for _, mc := range shipped() {
		for _, faulty := range []bool{false, true} {
			name := mc.name
			if faulty {
				name += "/faults"
			}
			t.Run(name, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(7, uint64(len(mc.name))))
				if faulty {
					frng := rand.New(rand.NewPCG(11, 13))
					kinds := []shunttest.Fault{shunttest.FaultDrop, shunttest.FaultDropLying, shunttest.FaultReadError,
						shunttest.FaultDuplicate, shunttest.FaultOverflow, shunttest.FaultStale, shunttest.FaultStall, shunttest.FaultLate}
					plan := map[int]shunttest.Fault{}
					mc.rc.Faults = func(i int) shunttest.Fault {
						if f, ok := plan[i]; ok {
							return f
						}
						f := shunttest.FaultNone
						if frng.IntN(100) < 3 {
							f = kinds[frng.IntN(len(kinds))]
						}
						plan[i] = f
						return f
					}
				}
				var st batteryStats
				for trial := range 2 {
					load := engineTrace(rng, drivertest.Epoch.Add(time.Duration(trial)*time.Hour), d)
					s, r := recorded(t, mc, load, d)
					runWindows(t, rng, s, r, load, d, 500, &st)
				}
				frac := float64(st.contained) / float64(st.windows)
				t.Logf("%s: %d windows, %d HwShunt, bound contains truth in %.2f%%, median bound at 100 ms %.3f%%",
					name, st.windows, st.hw, 100*frac, 100*median(st.bounds100))
				if st.windows < 900 || frac < 0.99 {
					t.Fatalf("%d windows, containment %.4f", st.windows, frac)
				}
				if !faulty && mc.hw && st.hw == 0 {
					t.Fatalf("a clean %s never earned HwShunt", mc.name)
				}
				if (!mc.rc.Kind.Hardware() || mc.rc.BusAssumed != nil) && st.hw > 0 {
					t.Fatalf("a %v meter sealed HwShunt", mc.rc.Kind)
				}
			})
		}
	}
}
