package shunt

import (
	"context"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"meshd/drivers"
	"meshd/drivers/drivertest"
	"meshd/shunt/shunttest"
)

// BenchmarkRecord is the sampler's cost per reading.
func BenchmarkRecord(b *testing.B) {
	load := constLoad(b, 5)
	clock := drivertest.NewClock(load.Origin, true)
	r := shunttest.NewReplay(fast(), load, clock)
	s, err := NewSeries(r.Name(), r.Info(), Config{Now: clock.Now, Epoch: load.Origin, Capacity: 1 << 16})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	smps := make([]drivers.Sample, 1<<16)
	for i := range smps {
		smps[i], _ = r.Next(ctx)
	}
	b.ResetTimer()
	for i := range b.N {
		smp := smps[i%len(smps)]
		off := time.Duration(i/len(smps)) * time.Duration(len(smps)) * fast().Period
		smp.Start, smp.End = smp.Start.Add(off), smp.End.Add(off)
		s.RecordAt(smp, nil, smp.End)
	}
}

// BenchmarkQuery600k integrates a window over 600 000 readings.
func BenchmarkQuery600k(b *testing.B) {
	load := constLoad(b, 5)
	d := 600_000 * fast().Period
	s, _ := recorded(b, meterConfig{rc: fast()}, load, d+time.Second)
	t0, t1 := load.Origin.Add(time.Millisecond), load.Origin.Add(d)
	b.ResetTimer()
	for range b.N {
		if _, err := s.Energy(t0, t1); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSpanOpenClose3 opens and closes a window over a span of three
// meters whose closing readings are already recorded: the cost of a
// window excluding the wait for the closing conversion (target < 50 µs).
func BenchmarkSpanOpenClose3(b *testing.B) {
	load := constLoad(b, 5)
	var members []Member
	for i, name := range []string{"ina226@board", "rapl:package-0", "hwmon:gpu"} {
		rc := fast()
		rc.Name = name
		rc.Period += time.Duration(i) * 100 * time.Microsecond
		s, _ := recorded(b, meterConfig{rc: rc}, load, 3*time.Second)
		members = append(members, s)
	}
	clock := drivertest.NewClock(load.Origin.Add(time.Second), false)
	sp, err := NewSpan(members, SpanConfig{Now: clock.Now})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		clock.Set(clock.Now().Add(time.Duration(rng.IntN(3000)) * time.Microsecond))
		if clock.Now().After(load.Origin.Add(2 * time.Second)) {
			clock = drivertest.NewClock(load.Origin.Add(time.Second), false)
			sp, _ = NewSpan(members, SpanConfig{Now: clock.Now})
		}
		b.StartTimer()
		w, err := sp.Open(ctx)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		clock.Set(clock.Now().Add(time.Duration(1+rng.IntN(20000)) * time.Microsecond))
		b.StartTimer()
		if _, err := w.Close(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClosingWait reports, in conversion periods, how long after a
// window's end the reading that closes it is recorded (median and 95th
// percentile over random window ends) at the INA226 fast setting with a
// poll of a tenth of a period (target: median ≤ 1.5).
func BenchmarkClosingWait(b *testing.B) {
	rc := fast()
	rc.Lag = rc.Period / 20 // half a poll interval of period/10
	load := constLoad(b, 5)
	s, _ := recorded(b, meterConfig{rc: rc}, load, 2*time.Second)
	rng := rand.New(rand.NewPCG(3, 4))
	var waits []float64
	for range b.N {
		for range 1000 {
			t1 := load.Origin.Add(100*time.Millisecond + time.Duration(rng.Int64N(int64(time.Second))))
			tns := s.ns(t1)
			s.mu.RLock()
			r := s.ring
			k := r.firstValid(r.search(func(e *entry) bool { return e.end-e.u >= tns }))
			at := r.at(k).at
			s.mu.RUnlock()
			waits = append(waits, float64(at-tns)/float64(rc.Period))
		}
	}
	sort.Float64s(waits)
	b.ReportMetric(waits[len(waits)/2], "periods/median-wait")
	b.ReportMetric(waits[len(waits)*95/100], "periods/p95-wait")
}

// BenchmarkBound100ms reports the bound of a 100 ms window at 5 W on an
// INA226 converting at about 1 kHz, as a percentage of the energy: in
// shunt-only mode (no dead time) and in shunt-and-bus mode at the fast
// preset (its bus slot charged at full scale).
func BenchmarkBound100ms(b *testing.B) {
	for _, c := range []struct {
		name   string
		period time.Duration
		dead   float64
	}{{"shunt-only-1.1ms", 1100 * time.Microsecond, 0}, {"shunt-bus-1.24ms", 1240 * time.Microsecond, 0.113}} {
		b.Run(c.name, func(b *testing.B) {
			rc := fast()
			rc.Period, rc.DeadFrac = c.period, c.dead
			rc.FullScaleNW = 6e9 * 1.2 // 0.5 A full scale at 12 V
			rc.OffsetNW = 12e6 + 3e6 + 0.8e6
			load := constLoad(b, 5)
			s, _ := recorded(b, meterConfig{rc: rc}, load, time.Second)
			var pct float64
			for range b.N {
				rep, err := s.Energy(load.Origin.Add(300*time.Millisecond), load.Origin.Add(400*time.Millisecond))
				if err != nil {
					b.Fatal(err)
				}
				pct = 100 * float64(rep.Reading.Metering.ErrorUJ) / float64(rep.Reading.EnergyUJ)
			}
			b.ReportMetric(pct, "%bound")
		})
	}
}
