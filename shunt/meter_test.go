package shunt

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"meshd/drivers"
	"meshd/wire"
)

// replay runs f through a new meter until every sample is recorded.
func replay(t testing.TB, f *fakeSensor, cfg Config) *Meter {
	t.Helper()
	cfg.Now = f.clock.Now
	if cfg.Capacity == 0 {
		cfg.Capacity = 8192 // the default (600k readings) is covered on its own
	}
	m, err := New(context.Background(), f, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	select {
	case <-f.drained:
	case <-time.After(20 * time.Second):
		t.Fatal("sensor not drained")
	}
	return m
}

// ms is a time on the fake's clock, in milliseconds.
func ms(c *simClock, v float64) time.Time { return c.at(int64(v * 1e6)) }

func TestConstantLoadIsExactAndSnapsToSpans(t *testing.T) {
	c := newSimClock()
	f := newFake(c, time.Millisecond, time.Millisecond, constTrace{5e6}, 1000) // 5 W
	m := replay(t, f, Config{})
	rep, err := m.Energy(ms(c, 100.3), ms(c, 200.6))
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Start.Equal(ms(c, 100)) || !rep.End.Equal(ms(c, 201)) {
		t.Errorf("integrated [%v, %v], want the spans around the edges [100ms, 201ms]",
			rep.Start.Sub(c.base), rep.End.Sub(c.base))
	}
	if got, want := rep.EnergyUJ, 5.0*101*1000; math.Abs(got-want) > 1e-3 {
		t.Errorf("energy %f µJ, want %f", got, want)
	}
	r := rep.Reading
	if r.Provenance != wire.HwShunt || r.Metering.Samples != 101 || r.Metering.WindowNs != 101e6 ||
		r.Metering.MaxGapNs != 1e6 || r.Metering.Meter != "fake@test" {
		t.Errorf("reading %+v", r)
	}
	// Bound: gain 0.2 % of 505 mJ plus 1 mW offset over 101 ms.
	wantB := (0.002*505000 + 101) / 0.998
	if rep.BoundUJ < wantB || rep.BoundUJ > wantB+1 {
		t.Errorf("bound %f µJ, want %f", rep.BoundUJ, wantB)
	}
	if r.Metering.ErrorUJ != uint64(math.Ceil(rep.BoundUJ+math.Abs(float64(r.EnergyUJ)-rep.EnergyUJ))) {
		t.Errorf("ErrorUJ %d does not round the bound %f up", r.Metering.ErrorUJ, rep.BoundUJ)
	}
}

type trialStats struct{ n, fails, notHw int }

// runTrials integrates random windows over f's trace and counts how often
// the error exceeds the reported bound.
func runTrials(t *testing.T, rng *rand.Rand, f *fakeSensor, m *Meter, windows int, st *trialStats) {
	t.Helper()
	total := float64(f.n) * float64(f.period.Nanoseconds()) / 1e6
	for range windows {
		length := math.Exp(rng.Float64() * math.Log(1500)) // 1 ms to 1.5 s, log-uniform
		length = math.Min(length, total-10)
		t0 := 5 + rng.Float64()*(total-10-length)
		rep, err := m.Energy(ms(f.clock, t0), ms(f.clock, t0+length))
		if err != nil {
			t.Fatalf("window [%f, %f] ms: %v", t0, t0+length, err)
		}
		st.n++
		if rep.Reading.Provenance != wire.HwShunt {
			st.notHw++
		}
		truth := f.truthUJ(rep.Start, rep.End)
		if math.Abs(rep.EnergyUJ-truth) > rep.BoundUJ {
			st.fails++
			if st.fails <= 3 {
				t.Logf("outside bound: %T %+v window %.3f ms: got %f µJ, truth %f, bound %f",
					f.tr, f.tr, length, rep.EnergyUJ, truth, rep.BoundUJ)
			}
		}
	}
}

func randomTrace(rng *rand.Rand) trace {
	amp := 1e6 + rng.Float64()*19e6 // 1–20 W
	switch rng.IntN(3) {
	case 0:
		return constTrace{amp}
	case 1:
		freq := math.Exp(math.Log(10) + rng.Float64()*math.Log(100)) // 10–1000 Hz
		if rng.IntN(4) == 0 {
			freq = 1000 // exactly the sampling rate: every reading looks alike
		}
		period := 1e9 / freq
		return squareTrace{lo: amp * rng.Float64() * 0.2, hi: amp, period: period,
			duty: 0.02 + rng.Float64()*0.96, phase: rng.Float64() * period}
	default:
		dur := 3e9
		end := 1e6 + rng.Float64()*19e6
		return rampTrace{p0: amp, slope: (end - amp) / dur}
	}
}

// TestIntegrationWithinBound is the accuracy acceptance test: on constant,
// bursty (10–1000 Hz) and ramping loads sampled at 1 kHz by an averaging
// chip with datasheet-sized gain and offset errors, the error must stay
// within the reported bound in at least 99 % of random windows.
func TestIntegrationWithinBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var st trialStats
	for range 40 {
		c := newSimClock()
		f := newFake(c, time.Millisecond, time.Millisecond, randomTrace(rng), 3000)
		f.gain = (rng.Float64()*2 - 1) * 0.002
		f.offUW = (rng.Float64()*2 - 1) * 999
		m := replay(t, f, Config{Capacity: 4096})
		runTrials(t, rng, f, m, 50, &st)
	}
	t.Logf("%d windows, %d outside the bound, %d not HwShunt", st.n, st.fails, st.notHw)
	if st.notHw != 0 {
		t.Errorf("%d fully covered windows were not HwShunt", st.notHw)
	}
	if float64(st.fails) > 0.01*float64(st.n) {
		t.Errorf("%d of %d windows outside their bound (more than 1 %%)", st.fails, st.n)
	}
}

// TestBridgedIntegrationWithinBound covers sensors whose readings do not
// tile time (instantaneous readings, short conversions): the trapezoid and
// its monotone bound, on loads that do not hide bursts between readings.
func TestBridgedIntegrationWithinBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, avg := range []time.Duration{0, 300 * time.Microsecond} {
		var st trialStats
		for range 20 {
			c := newSimClock()
			var tr trace
			switch rng.IntN(3) {
			case 0:
				tr = constTrace{1e6 + rng.Float64()*19e6}
			case 1:
				tr = rampTrace{p0: 20e6 * rng.Float64(), slope: (rng.Float64()*2 - 1) * 5e6 / 3e9}
			default: // slow enough that readings catch every turn
				tr = sineTrace{mean: 10e6, amp: 9e6 * rng.Float64(), freq: 1 + rng.Float64()*19, phase: rng.Float64() * 2 * math.Pi}
			}
			f := newFake(c, time.Millisecond, avg, tr, 3000)
			f.gain = (rng.Float64()*2 - 1) * 0.002
			f.offUW = (rng.Float64()*2 - 1) * 999
			m := replay(t, f, Config{Capacity: 4096})
			runTrials(t, rng, f, m, 50, &st)
		}
		t.Logf("averaging %v: %d windows, %d outside the bound", avg, st.n, st.fails)
		if st.fails > 0 || st.notHw > 0 {
			t.Errorf("averaging %v: %d windows outside their bound, %d not HwShunt", avg, st.fails, st.notHw)
		}
	}
}

// ina226Accuracy is an INA226 on a 10 mΩ shunt: 0.1 % shunt plus 0.1 % bus
// gain error, 10 µV shunt offset (1 mA) times the bus voltage, and half a
// µW of rounding.
func ina226Accuracy() drivers.Accuracy {
	return drivers.Accuracy{GainErr: 0.002, OffsetUW: func(busUV int64) float64 {
		return 10e-6/10e-3*float64(busUV) + 0.5
	}}
}

func TestINA226BoundWithinHalfPercent(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var worst float64
	for trial := range 10 {
		c := newSimClock()
		// 5–8 W at 12 V with 1 kHz bursts of up to a watt on top.
		base := 5e6 + rng.Float64()*2e6
		tr := squareTrace{lo: base, hi: base + rng.Float64()*1e6, period: 1e6 * (0.5 + rng.Float64()),
			duty: rng.Float64(), phase: rng.Float64() * 1e6}
		f := newFake(c, time.Millisecond, time.Millisecond, tr, 2000)
		f.acc = ina226Accuracy()
		f.gain = (rng.Float64()*2 - 1) * 0.002
		f.offUW = (rng.Float64()*2 - 1) * 12000
		m := replay(t, f, Config{Capacity: 4096})
		for range 20 {
			length := 100 + rng.Float64()*900
			t0 := 2 + rng.Float64()*(1990-length)
			rep, err := m.Energy(ms(c, t0), ms(c, t0+length))
			if err != nil {
				t.Fatal(err)
			}
			truth := f.truthUJ(rep.Start, rep.End)
			rel := rep.BoundUJ / truth
			worst = max(worst, rel)
			if rel > 0.005 {
				t.Errorf("trial %d: %.0f ms window: bound %.4f %% of the energy, want ≤ 0.5 %%", trial, length, 100*rel)
			}
			if math.Abs(rep.EnergyUJ-truth) > rep.BoundUJ {
				t.Errorf("trial %d: error %f µJ beyond bound %f", trial, rep.EnergyUJ-truth, rep.BoundUJ)
			}
		}
	}
	t.Logf("largest bound: %.3f %% of the energy", 100*worst)
}

func TestNegativeEnergy(t *testing.T) {
	c := newSimClock()
	f := newFake(c, time.Millisecond, time.Millisecond, constTrace{-2e6}, 100)
	m := replay(t, f, Config{})
	if _, err := m.Energy(ms(c, 10), ms(c, 50)); err == nil || errors.Is(err, wire.ErrNoMeasurement) {
		t.Errorf("reverse flow: %v, want an error saying so", err)
	}

	c = newSimClock()
	f = newFake(c, time.Millisecond, time.Millisecond, constTrace{0}, 100)
	f.offUW = -600 // an idle load read slightly negative, within the 1 mW offset
	m = replay(t, f, Config{})
	rep, err := m.Energy(ms(c, 10), ms(c, 50))
	if err != nil {
		t.Fatal(err)
	}
	if rep.EnergyUJ >= 0 || rep.Reading.EnergyUJ != 0 || float64(rep.Reading.Metering.ErrorUJ) < -rep.EnergyUJ {
		t.Errorf("idle load: %f µJ read as %+v", rep.EnergyUJ, rep.Reading)
	}
}

func TestNestedAndOverlappingWindows(t *testing.T) {
	c := newSimClock()
	tr := squareTrace{lo: 1e6, hi: 9e6, period: 3.7e6, duty: 0.3, phase: 0.4e6}
	f := newFake(c, time.Millisecond, time.Millisecond, tr, 1000)
	m := replay(t, f, Config{})
	get := func(a, b float64) Report {
		rep, err := m.Energy(ms(c, a), ms(c, b))
		if err != nil {
			t.Fatalf("[%v, %v]: %v", a, b, err)
		}
		if d := rep.EnergyUJ - f.truthUJ(rep.Start, rep.End); math.Abs(d) > 1e-3 {
			t.Errorf("[%v, %v]: off the truth by %f µJ", a, b, d)
		}
		return rep
	}
	outer := get(100, 900)
	inner := get(300.5, 400.5)
	left, right := get(100, 300), get(300, 900)
	over := get(250, 600)
	if d := left.EnergyUJ + right.EnergyUJ - outer.EnergyUJ; math.Abs(d) > 1e-3 {
		t.Errorf("adjacent windows do not add up to the outer one: off by %f µJ", d)
	}
	if !(inner.EnergyUJ < over.EnergyUJ && over.EnergyUJ < outer.EnergyUJ) {
		t.Errorf("nesting not monotone: inner %f, overlapping %f, outer %f", inner.EnergyUJ, over.EnergyUJ, outer.EnergyUJ)
	}
	if outer.Coverage.Samples != 800 || inner.Coverage.Samples != 101 {
		t.Errorf("samples: outer %d, inner %d", outer.Coverage.Samples, inner.Coverage.Samples)
	}
}

func TestReadErrorsMakeAModelBasedGap(t *testing.T) {
	c := newSimClock()
	f := newFake(c, time.Millisecond, time.Millisecond, rampTrace{p0: 2e6, slope: 4e6 / 1e9}, 600)
	f.fail = func(i int) bool { return i >= 300 && i < 340 } // samples ending at 301..340 ms
	m := replay(t, f, Config{})

	rep, err := m.Energy(ms(c, 200), ms(c, 500))
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Reading
	if r.Provenance != wire.ModelBased {
		t.Errorf("provenance %v across read errors, want ModelBased", r.Provenance)
	}
	if rep.Coverage.Invalid != 40 || r.Metering.Samples != 260 {
		t.Errorf("coverage %+v, want 40 invalid and 260 samples", rep.Coverage)
	}
	if r.Metering.MaxGapNs != 41e6 {
		t.Errorf("MaxGapNs %d, want 41 ms", r.Metering.MaxGapNs)
	}
	// A ramp is monotone, so the bridged gap stays within the bound.
	truth := f.truthUJ(rep.Start, rep.End)
	if math.Abs(rep.EnergyUJ-truth) > rep.BoundUJ || rep.EnergyUJ < 0.99*truth {
		t.Errorf("energy %f µJ, truth %f, bound %f", rep.EnergyUJ, truth, rep.BoundUJ)
	}

	clean, err := m.Energy(ms(c, 100), ms(c, 290))
	if err != nil || clean.Reading.Provenance != wire.HwShunt {
		t.Errorf("window clear of the errors: %v, %v", clean.Reading.Provenance, err)
	}
	_, err = m.Energy(ms(c, 310), ms(c, 330))
	if !errors.Is(err, wire.ErrNoMeasurement) {
		t.Errorf("window inside the error stretch: %v, want ErrNoMeasurement", err)
	}
	// An edge inside the gap is bracketed by the readings around it but
	// still crosses invalid entries.
	edge, err := m.Energy(ms(c, 320), ms(c, 400))
	if err != nil || edge.Reading.Provenance != wire.ModelBased || edge.Coverage.Invalid == 0 {
		t.Errorf("window starting in the gap: %+v, %v", edge.Coverage, err)
	}
}

func TestOverflowSamplesAreInvalid(t *testing.T) {
	c := newSimClock()
	f := newFake(c, time.Millisecond, time.Millisecond, constTrace{3e6}, 300)
	f.overflow = func(i int) bool { return i == 150 }
	m := replay(t, f, Config{})
	rep, err := m.Energy(ms(c, 100), ms(c, 200))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Coverage.Invalid != 1 || rep.Reading.Provenance != wire.ModelBased {
		t.Errorf("coverage %+v, provenance %v", rep.Coverage, rep.Reading.Provenance)
	}
	if truth := f.truthUJ(rep.Start, rep.End); math.Abs(rep.EnergyUJ-truth) > 1e-3 {
		t.Errorf("energy %f µJ, want %f: the overflow value leaked in", rep.EnergyUJ, truth)
	}
	if st := m.Stats(); st.Invalid != 1 || st.Entries != 300 {
		t.Errorf("stats %+v", st)
	}
}

func TestNoValidSampleIsNoMeasurement(t *testing.T) {
	c := newSimClock()
	f := newFake(c, time.Millisecond, time.Millisecond, constTrace{3e6}, 20)
	f.fail = func(int) bool { return true }
	m := replay(t, f, Config{})
	_, err := m.Energy(ms(c, 0), ms(c, 20))
	if !errors.Is(err, wire.ErrNoMeasurement) {
		t.Errorf("all reads failed: %v, want ErrNoMeasurement", err)
	}
	if st := m.Stats(); !errors.Is(st.LastErr, errBus) || st.Invalid != 20 {
		t.Errorf("stats %+v", st)
	}

	c2 := newSimClock()
	f2 := newFake(c2, time.Millisecond, time.Millisecond, constTrace{3e6}, 0)
	m2 := replay(t, f2, Config{})
	w, err := m2.Open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Close(context.Background()); !errors.Is(err, wire.ErrNoMeasurement) {
		t.Errorf("no readings at all: %v, want ErrNoMeasurement", err)
	}
	if _, err := w.Close(context.Background()); err == nil {
		t.Error("second Close succeeded")
	}
}

func TestRingWrapAround(t *testing.T) {
	c := newSimClock()
	f := newFake(c, time.Millisecond, time.Millisecond, constTrace{4e6}, 5000)
	m := replay(t, f, Config{Capacity: 2000}) // rounds up to 2048 readings
	// Readings 2952..4999 remain: spans from 2952 ms to 5000 ms.
	in, err := m.Energy(ms(c, 3000), ms(c, 4000))
	if err != nil || in.Reading.Provenance != wire.HwShunt {
		t.Fatalf("window inside the ring: %v %v", in.Reading.Provenance, err)
	}
	part, err := m.Energy(ms(c, 2500), ms(c, 3500))
	if err != nil {
		t.Fatal(err)
	}
	if part.Coverage.StartBracketed || part.Reading.Provenance != wire.ModelBased ||
		!part.Start.Equal(ms(c, 2500)) || part.Coverage.MaxGap < 452*time.Millisecond {
		t.Errorf("window older than the ring: start %v, coverage %+v, %v",
			part.Start.Sub(c.base), part.Coverage, part.Reading.Provenance)
	}
	if _, err := m.Energy(ms(c, 1000), ms(c, 2000)); !errors.Is(err, wire.ErrNoMeasurement) {
		t.Errorf("window wholly older than the ring: %v, want ErrNoMeasurement", err)
	}
}

func TestOpenCloseOnSimulatedClock(t *testing.T) {
	c := newSimClock()
	f := newFake(c, 20*time.Millisecond, 20*time.Millisecond, constTrace{2e6}, 100)
	g := &gatedSensor{fakeSensor: f, at: 10, gate: make(chan struct{}), reached: make(chan struct{})}
	m, err := New(context.Background(), g, Config{Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	<-g.reached // 10 readings recorded, clock at 200 ms
	w, err := m.Open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	close(g.gate)
	<-f.drained // clock at 2000 ms
	rep, err := w.CloseReport(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Reading.Provenance != wire.HwShunt || !rep.Coverage.EndBracketed ||
		rep.Start.Sub(c.base) != 200*time.Millisecond || rep.End.Sub(c.base) != 2000*time.Millisecond {
		t.Errorf("report %+v", rep)
	}
	if rep.Reading.EnergyUJ != 3_600_000 || rep.Reading.Metering.Samples != 90 {
		t.Errorf("reading %+v, want 3.6 J from 90 readings", rep.Reading)
	}
}

// gatedSensor holds its fake before sample at until gate is closed.
type gatedSensor struct {
	*fakeSensor
	at      int
	gate    chan struct{}
	reached chan struct{}
}

func (g *gatedSensor) Next(ctx context.Context) (drivers.Sample, error) {
	if g.i == g.at {
		close(g.reached)
		select {
		case <-g.gate:
		case <-ctx.Done():
			return drivers.Sample{}, ctx.Err()
		}
	}
	return g.fakeSensor.Next(ctx)
}

// liveSensor produces constant readings on the wall clock until stop is
// closed; then it hangs, and says so on hung.
type liveSensor struct {
	period time.Duration
	stop   chan struct{}
	hung   chan struct{}
	once   sync.Once
	closes int
}

func newLive(period time.Duration) *liveSensor {
	return &liveSensor{period: period, stop: make(chan struct{}), hung: make(chan struct{})}
}

func (l *liveSensor) Name() string                { return "live@test" }
func (l *liveSensor) UpdatePeriod() time.Duration { return l.period }
func (l *liveSensor) Accuracy() drivers.Accuracy  { return drivers.Accuracy{GainErr: 0.001} }
func (l *liveSensor) Close() error                { l.closes++; return nil }
func (l *liveSensor) Next(ctx context.Context) (drivers.Sample, error) {
	t := time.NewTimer(l.period)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return drivers.Sample{}, ctx.Err()
	case <-l.stop:
	case <-t.C:
		select {
		case <-l.stop:
		default:
			return drivers.Sample{At: time.Now(), Averaged: l.period, PowerUW: 1e6}, nil
		}
	}
	l.once.Do(func() { close(l.hung) })
	<-ctx.Done()
	return drivers.Sample{}, ctx.Err()
}

// closeResult is what a window's CloseReport returned in another goroutine.
type closeResult struct {
	rep Report
	err error
}

func closeAsync(ctx context.Context, w *Window) <-chan closeResult {
	ch := make(chan closeResult, 1)
	go func() {
		rep, err := w.CloseReport(ctx)
		ch <- closeResult{rep, err}
	}()
	return ch
}

// awaitClose returns what an asynchronous Close returned; the timeout only
// turns a Close that never gives up into a failure rather than a hang.
func awaitClose(t *testing.T, res <-chan closeResult) closeResult {
	t.Helper()
	select {
	case r := <-res:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("Close still waiting after the reading it needed or past its limit")
		return closeResult{}
	}
}

// stepMeter is a meter over a stepped fake on a simulated clock, with two
// readings recorded. Its wall-clock limit on Close is two periods.
func stepMeter(t *testing.T, period time.Duration) (*simClock, *stepSensor, *Meter) {
	t.Helper()
	c := newSimClock()
	s := newStep(newFake(c, period, period, constTrace{1e6}, 1000)) // 1 W
	m, err := New(context.Background(), s, Config{Now: c.Now, Capacity: 1024})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	s.advance(t, 2)
	return c, s, m
}

// TestCloseWaitsAtMostTwoPeriods: Close waits for the reading that brackets
// the window's end, but no longer than two update periods on the meter's
// clock, or on the wall clock when the sensor hangs. Time is simulated and
// each reading is released by the test, so nothing depends on scheduling.
func TestCloseWaitsAtMostTwoPeriods(t *testing.T) {
	const hour = time.Hour // long enough that the wall-clock limit never cuts in

	t.Run("the bracketing reading arrives", func(t *testing.T) {
		c, s, m := stepMeter(t, hour)
		w, err := m.Open(context.Background()) // at 2 h
		if err != nil {
			t.Fatal(err)
		}
		s.advance(t, 3)
		c.set(int64(5*hour + hour/2)) // between readings: the end is not yet covered
		res := closeAsync(context.Background(), w)
		waitForWaiter(t, m)
		select {
		case r := <-res:
			t.Fatalf("Close returned before the reading past its end: %+v, %v", r.rep.Coverage, r.err)
		default:
		}
		s.advance(t, 1) // the reading ending at 6 h
		r := awaitClose(t, res)
		if r.err != nil {
			t.Fatal(r.err)
		}
		if !r.rep.Coverage.EndBracketed || r.rep.Reading.Provenance != wire.HwShunt ||
			r.rep.Start.Sub(c.base) != 2*hour || r.rep.End.Sub(c.base) != 6*hour ||
			r.rep.Coverage.Samples != 4 || r.rep.Reading.EnergyUJ != 4*3600*1e6 {
			t.Errorf("report %+v", r.rep)
		}
	})

	t.Run("the meter's clock passes two periods", func(t *testing.T) {
		c, s, m := stepMeter(t, hour)
		s.overflow = func(i int) bool { return i >= 4 } // then time moves on, nothing valid arrives
		w, err := m.Open(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		s.advance(t, 2)               // valid readings up to 4 h
		c.set(int64(4*hour + hour/2)) // the window ends at 4.5 h: the limit is 6.5 h
		res := closeAsync(context.Background(), w)
		waitForWaiter(t, m)
		s.advance(t, 2) // invalid readings ending at 5 h and 6 h: within the limit
		waitForWaiter(t, m)
		select {
		case r := <-res:
			t.Fatalf("Close gave up within two periods: %+v, %v", r.rep.Coverage, r.err)
		default:
		}
		s.advance(t, 1) // 7 h: past the limit
		r := awaitClose(t, res)
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.rep.Coverage.EndBracketed || r.rep.Reading.Provenance != wire.ModelBased {
			t.Errorf("unbracketed end: coverage %+v, %v", r.rep.Coverage, r.rep.Reading.Provenance)
		}
	})

	t.Run("the sensor hangs", func(t *testing.T) {
		const period = 20 * time.Millisecond
		c, s, m := stepMeter(t, period)
		w, err := m.Open(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		s.advance(t, 2)
		c.set(int64(4*period + period/2)) // no reading will ever cover this
		begin := time.Now()
		rep, err := w.CloseReport(context.Background())
		waited := time.Since(begin)
		if err != nil {
			t.Fatal(err)
		}
		// Timers never fire early, so the lower bound is exact; the upper
		// one only tells a wait of two periods from waiting forever.
		if waited < 2*period || waited > 10*time.Second {
			t.Errorf("Close waited %v for a hung sensor, want two periods (%v)", waited, 2*period)
		}
		if rep.Coverage.EndBracketed || rep.Reading.Provenance != wire.ModelBased {
			t.Errorf("hung sensor: coverage %+v, %v", rep.Coverage, rep.Reading.Provenance)
		}
	})

	t.Run("a cancelled context", func(t *testing.T) {
		c, _, m := stepMeter(t, hour)
		w, err := m.Open(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		c.set(int64(2*hour + hour/2))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := w.Close(ctx); !errors.Is(err, context.Canceled) {
			t.Errorf("Close with a cancelled context: %v", err)
		}
	})
}

func TestSamplerStopsOnCancelAndClose(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	l := newLive(time.Millisecond)
	m, err := New(ctx, l, Config{})
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	if err := m.Ready(rctx); err != nil { // sampling for real before the cancel
		t.Fatal(err)
	}
	cancel()
	select {
	case <-m.done:
	case <-time.After(10 * time.Second):
		t.Fatal("sampling goroutine still running after cancel")
	}
	if m.Stats().Running {
		t.Error("Stats says running after cancel")
	}
	if _, err := m.Open(context.Background()); err == nil {
		t.Error("Open on a stopped meter succeeded")
	}
	if err := m.Close(); err != nil || m.Close() != nil || l.closes != 1 {
		t.Errorf("Close: %v, sensor closed %d times", err, l.closes)
	}

	// A failing sensor is retried after an update period; an hour here, so
	// Close can only return promptly by interrupting that back-off.
	c := newSimClock()
	f := newFake(c, time.Hour, time.Hour, constTrace{1}, 10)
	f.fail = func(int) bool { return true }
	m2, err := New(context.Background(), f, Config{Now: c.Now, Capacity: 1024})
	if err != nil {
		t.Fatal(err)
	}
	waitRecorded(t, m2, 1) // the first read error: now in its back-off
	closed := make(chan error, 1)
	go func() { closed <- m2.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not interrupt the sampler's back-off")
	}
	select {
	case <-m2.done:
	default:
		t.Error("Close returned with the goroutine still running")
	}
	if f.closed.Load() != 1 || m2.Stats().Entries != 1 {
		t.Errorf("sensor closed %d times after %d reads", f.closed.Load(), m2.Stats().Entries)
	}
}

type badSensor struct {
	liveSensor
	acc drivers.Accuracy
}

func (b *badSensor) Accuracy() drivers.Accuracy { return b.acc }

func TestNewRejectsBadConfiguration(t *testing.T) {
	ok := drivers.Accuracy{GainErr: 0.001}
	for _, tc := range []struct {
		name   string
		period time.Duration
		acc    drivers.Accuracy
		cfg    Config
	}{
		{"zero period", 0, ok, Config{}},
		{"negative gain", time.Millisecond, drivers.Accuracy{GainErr: -0.1}, Config{}},
		{"NaN gain", time.Millisecond, drivers.Accuracy{GainErr: math.NaN()}, Config{}},
		{"gain of one", time.Millisecond, drivers.Accuracy{GainErr: 1}, Config{}},
		{"negative capacity", time.Millisecond, ok, Config{Capacity: -1}},
		{"huge capacity", time.Millisecond, ok, Config{Capacity: 1 << 30}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &badSensor{liveSensor: liveSensor{period: tc.period}, acc: tc.acc}
			if m, err := New(context.Background(), s, tc.cfg); err == nil {
				m.Close()
				t.Error("accepted")
			}
		})
	}
	m, err := New(context.Background(), newLive(time.Millisecond), Config{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(m.ring.buf); n < 600_000 || n > 600_000+blockSize {
		t.Errorf("default ring holds %d readings, want ten minutes at 1 kHz", n)
	}
	m.Close()
	if _, err := New(context.Background(), nil, Config{}); err == nil {
		t.Error("nil sensor accepted")
	}
}

// agentWindow and agentMeter mirror agent.Window and agent.Meter; the agent
// adapts a *Meter with a one-line Open that returns the *Window.
type agentWindow interface {
	Close(ctx context.Context) (wire.Reading, error)
}

var _ agentWindow = (*Window)(nil)
var _ interface{ Name() string } = (*Meter)(nil)

func TestReady(t *testing.T) {
	c := newSimClock()
	// Fails its first three reads, then delivers.
	f := newFake(c, time.Millisecond, time.Millisecond, constTrace{1}, 10)
	f.fail = func(i int) bool { return i < 3 }
	m, err := New(context.Background(), f, Config{Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.Ready(ctx); err != nil {
		t.Fatalf("Ready on a sensor that recovers: %v", err)
	}
	if s := m.Stats(); s.Entries-s.Invalid == 0 {
		t.Fatal("Ready returned before any valid reading")
	}

	// A sensor that never delivers: Ready fails, naming the read error.
	dead := newFake(c, time.Millisecond, time.Millisecond, constTrace{1}, 10)
	dead.fail = func(int) bool { return true }
	m2, err := New(context.Background(), dead, Config{Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	waitRecorded(t, m2, 1) // a read error to name
	ctx2, cancel2 := context.WithTimeout(context.Background(), 0)
	defer cancel2()
	if err := m2.Ready(ctx2); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), errBus.Error()) {
		t.Fatalf("Ready on a dead sensor: %v", err)
	}
}
