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
	"meshd/drivers/ina219"
	"meshd/drivers/ina226"
	"meshd/drivers/inasim"
	"meshd/wire"

	"periph.io/x/conn/v3/physic"
)

// chipConfig is a shipped INA configuration run through its real driver on
// the register-level simulator.
type chipConfig struct {
	name string
	kind inasim.Kind
	open func(bus *inasim.Bus) (drivers.Sensor, error)
	hw   bool // a clean run must earn HwShunt at engine loads
}

const (
	simShuntUOhm = 10_000    // 10 mΩ
	simMaxUA     = 1_500_000 // 1.5 A: 18 W at 12 V
)

func shippedChips() []chipConfig {
	var cs []chipConfig
	for _, p := range ina226.Presets() {
		p := p
		cs = append(cs, chipConfig{name: "ina226-" + p.String(), kind: inasim.INA226,
			hw: p == ina226.PresetPrecise, // shunt-only assumes the bus voltage: ModelBased
			open: func(bus *inasim.Bus) (drivers.Sensor, error) {
				cfg := ina226.Config{ShuntMicroOhms: simShuntUOhm, MaxCurrentUA: simMaxUA, Preset: p, Clock: bus.Clock()}
				if p == ina226.PresetShuntOnly {
					cfg.BusTolerance = 0.002
				}
				return ina226.Open(bus, 0x40, cfg)
			}})
	}
	for _, p := range ina219.Presets() {
		p := p
		cs = append(cs, chipConfig{name: "ina219-" + p.String(), kind: inasim.INA219,
			hw: p == ina219.PresetPrecise,
			open: func(bus *inasim.Bus) (drivers.Sensor, error) {
				cfg := ina219.Config{ShuntMicroOhms: simShuntUOhm, MaxCurrentUA: simMaxUA, Preset: p, Clock: bus.Clock()}
				if p == ina219.PresetShuntOnly {
					cfg.BusTolerance = 0.002
				}
				return ina219.Open(bus, 0x40, cfg)
			}})
	}
	return cs
}

// engineSteps is an engine-shaped load at a regulated 12 V: idle, a
// prefill burst, decode pulses per token, and now and then a 1 kHz square
// wave.
func engineSteps(rng *rand.Rand, d time.Duration) []inasim.Step {
	var steps []inasim.Step
	total := time.Duration(0)
	add := func(dur time.Duration, w float64) {
		steps = append(steps, inasim.Step{For: dur, Current: physic.ElectricCurrent(w / 12 * float64(physic.Ampere)), Bus: 12 * physic.Volt})
		total += dur
	}
	for total < d {
		add(time.Duration(20+rng.IntN(400))*time.Millisecond, 2+2*rng.Float64())
		add(time.Duration(5+rng.IntN(200))*time.Millisecond, 8+7*rng.Float64())
		hi, lo := 6+4*rng.Float64(), 3+2*rng.Float64()
		tok := time.Duration(5+rng.IntN(40)) * time.Millisecond
		duty := 0.2 + 0.6*rng.Float64()
		for range rng.IntN(60) {
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
	return steps
}

// chipFault is a register-level fault applied when the simulated clock
// passes at.
type chipFault struct {
	at    time.Duration
	apply func(*inasim.Chip)
}

type chipRun struct {
	s     *Series
	chip  *inasim.Chip
	trace *inasim.Trace
	start time.Time
}

// runChip reads a simulated chip through its real driver for d of
// simulated time, recording every outcome.
func runChip(t testing.TB, cc chipConfig, steps []inasim.Step, d time.Duration, faults []chipFault) chipRun {
	t.Helper()
	return runChipWith(t, cc, steps, d, faults, physic.ElectricResistance(simShuntUOhm)*physic.MicroOhm)
}

// runChipShunt is runChip on a board with another shunt resistor.
func runChipShunt(t testing.TB, cc chipConfig, steps []inasim.Step, d time.Duration, r physic.ElectricResistance) chipRun {
	t.Helper()
	return runChipWith(t, cc, steps, d, nil, r)
}

func runChipWith(t testing.TB, cc chipConfig, steps []inasim.Step, d time.Duration, faults []chipFault, shunt physic.ElectricResistance) chipRun {
	t.Helper()
	clock := drivertest.NewClock(drivertest.Epoch, true)
	bus := inasim.NewBus("sim-1", clock)
	chip := bus.Add(cc.kind, 0x40)
	chip.SetShunt(shunt)
	clock0 := clock.Now()
	trace := inasim.NewTrace(clock0, steps...)
	chip.SetLoad(trace)
	dev, err := cc.open(bus)
	if err != nil {
		t.Fatalf("%s: %v", cc.name, err)
	}
	defer dev.Close()
	s, err := NewSeries(dev.Name(), dev.Info(), Config{Now: clock.Now, Epoch: clock0, Capacity: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	end := clock0.Add(d)
	for clock.Now().Before(end) {
		for len(faults) > 0 && !clock.Now().Before(clock0.Add(faults[0].at)) {
			faults[0].apply(chip)
			faults = faults[1:]
		}
		smp, err := dev.Next(ctx)
		s.Record(smp, err)
	}
	return chipRun{s: s, chip: chip, trace: trace, start: clock0}
}

// trueSpan maps a chained report's stated gross window onto the chip's
// true conversions: the one whose true start is nearest the stated start,
// the one whose true end is nearest the stated end.
func (r chipRun) trueSpan(rep Report) (inasim.Conversion, inasim.Conversion, []inasim.Conversion) {
	convs := r.chip.Conversions()
	near := func(f func(inasim.Conversion) time.Time, t time.Time) int {
		i := sort.Search(len(convs), func(i int) bool { return !f(convs[i]).Before(t) })
		best := min(i, len(convs)-1)
		if i > 0 && (i == len(convs) || t.Sub(f(convs[i-1])) < f(convs[i]).Sub(t)) {
			best = i - 1
		}
		return best
	}
	a := near(func(c inasim.Conversion) time.Time { return c.Start }, rep.Start)
	b := near(func(c inasim.Conversion) time.Time { return c.End }, rep.End)
	return convs[a], convs[b], convs[a : b+1]
}

func (r chipRun) truthUJ(rep Report) float64 {
	if !rep.Coverage.Chained {
		return r.trace.EnergyJoules(rep.Start, rep.End) * 1e6
	}
	a, b, _ := r.trueSpan(rep)
	return r.trace.EnergyJoules(a.Start, b.End) * 1e6
}

// TestRegisterBattery runs every shipped INA configuration's real driver
// on the register-level simulator over random engine-shaped loads, clean
// and with random register faults (NACK bursts, brown-outs, a stopped
// clock, a power-down), and asserts on ≥ 1 000 windows each: HwShunt only
// where the chip's true conversions, each read, cover the serve; the bound
// contains the true energy in ≥ 99 % of windows.
func TestRegisterBattery(t *testing.T) {
	const d = 8 * time.Second
	for _, cc := range shippedChips() {
		for _, faulty := range []bool{false, true} {
			name := cc.name
			if faulty {
				name += "/faults"
			}
			t.Run(name, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(21, uint64(len(name))))
				var windows, hw, contained int
				var bounds []float64
				for range 2 {
					var faults []chipFault
					if faulty {
						for at := 300 * time.Millisecond; at < d; at += time.Duration(100+rng.IntN(600)) * time.Millisecond {
							switch rng.IntN(4) {
							case 0:
								n := 1 + rng.IntN(40)
								faults = append(faults, chipFault{at, func(c *inasim.Chip) { c.FailNext(n) }})
							case 1:
								faults = append(faults, chipFault{at, func(c *inasim.Chip) { c.PowerCycle() }})
							case 2:
								faults = append(faults, chipFault{at, func(c *inasim.Chip) { c.Stall() }},
									chipFault{at + 40*time.Millisecond, func(c *inasim.Chip) { c.Resume() }})
							case 3:
								faults = append(faults, chipFault{at, func(c *inasim.Chip) { c.SetClockFactor(1.3) }},
									chipFault{at + 50*time.Millisecond, func(c *inasim.Chip) { c.SetClockFactor(1) }})
							}
						}
					}
					run := runChip(t, cc, engineSteps(rng, d+time.Second), d, faults)
					for range 500 {
						length := time.Duration(rng.Int64N(int64(300 * time.Millisecond)))
						if rng.IntN(3) == 0 {
							length = 100 * time.Millisecond
						}
						t0 := run.start.Add(200*time.Millisecond + time.Duration(rng.Int64N(int64(d-time.Second-length))))
						t1 := t0.Add(length)
						rep, err := run.s.Energy(t0, t1)
						if err != nil {
							continue // nothing valid touched it: Estimator, which claims nothing
						}
						windows++
						want := run.truthUJ(rep)
						got := float64(rep.Reading.EnergyUJ)
						if math.Abs(got-want) <= float64(rep.Reading.Metering.ErrorUJ) {
							contained++
						} else if rep.Reading.Provenance == wire.HwShunt {
							t.Errorf("HwShunt %.0f µJ, truth %.1f, bound %d", got, want, rep.Reading.Metering.ErrorUJ)
						}
						if rep.Reading.Provenance == wire.HwShunt {
							hw++
							a, b, span := run.trueSpan(rep)
							if a.Start.After(t0) || b.End.Before(t1) {
								t.Fatalf("HwShunt over true [%v, %v] does not cover the serve [%v, %v]", a.Start, b.End, t0, t1)
							}
							for i, c := range span {
								if !c.FlagSeen || (i > 0 && c.Seq != span[i-1].Seq+1) {
									t.Fatalf("HwShunt over conversion %d, flag seen %v", c.Seq, c.FlagSeen)
								}
							}
						}
						if length == 100*time.Millisecond && want > 0 {
							bounds = append(bounds, float64(rep.Reading.Metering.ErrorUJ)/want)
						}
					}
				}
				frac := float64(contained) / float64(windows)
				t.Logf("%s: %d windows, %d HwShunt, bound contains truth in %.2f%%, median bound at 100 ms %.3f%%",
					name, windows, hw, 100*frac, 100*median(bounds))
				if windows < 900 || frac < 0.99 {
					t.Fatalf("%d windows, containment %.4f", windows, frac)
				}
				if !faulty && cc.hw && hw == 0 {
					t.Fatalf("a clean %s never earned HwShunt", cc.name)
				}
			})
		}
	}
}
