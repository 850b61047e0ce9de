package shunt

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"meshd/drivers"
	"meshd/drivers/drivertest"
	"meshd/shunt/shunttest"
	"meshd/wire"
)

// spanOf records each config over load for d, then returns a span over
// the records whose clock the test sets by hand.
func spanOf(t *testing.T, cfg SpanConfig, load *shunttest.Piecewise, d time.Duration, rcs ...shunttest.ReplayConfig) (*Span, *drivertest.Clock, []*Series) {
	t.Helper()
	var members []Member
	var series []*Series
	for _, rc := range rcs {
		s, _ := recorded(t, meterConfig{name: rc.Name, rc: rc}, load, d)
		members = append(members, s)
		series = append(series, s)
	}
	clock := drivertest.NewClock(load.Origin, false)
	cfg.Now = clock.Now
	sp, err := NewSpan(members, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return sp, clock, series
}

func ms(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

// TestSharedServesNeverSumAboveTheRail: four overlapping 200 ms serves on
// one 10 W rail are charged, together, exactly what the rail drew over the
// union of their intervals, each ModelBased and marked shared.
func TestSharedServesNeverSumAboveTheRail(t *testing.T) {
	load := constLoad(t, 10)
	sp, clock, series := spanOf(t, SpanConfig{Policy: Shared}, load, time.Second, fast())
	ctx := context.Background()
	base := load.Origin.Add(100 * time.Millisecond)
	var wins []*SpanWindow
	for i := range 4 {
		clock.Set(base.Add(ms(float64(20 * i))))
		w, err := sp.Open(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wins = append(wins, w)
	}
	var sum uint64
	for i, w := range wins {
		clock.Set(base.Add(ms(float64(200 + 20*i))))
		r, err := w.Close(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.Provenance != wire.ModelBased || r.Metering.Shared < 2 {
			t.Fatalf("serve %d: %v shared %d", i, r.Provenance, r.Metering.Shared)
		}
		sum += r.EnergyUJ
	}
	union, err := series[0].ProRata(base, base.Add(ms(260)))
	if err != nil {
		t.Fatal(err)
	}
	truth := load.EnergyNJ(base, base.Add(ms(260))) / 1e3
	if float64(sum) > union.EnergyUJ+4 || math.Abs(float64(sum)-truth) > union.BoundUJ {
		t.Fatalf("four serves sum to %d µJ; the rail drew %.0f µJ (metered %.0f ± %.0f)", sum, truth, union.EnergyUJ, union.BoundUJ)
	}
	if sum > uint64(truth*1.01) {
		t.Fatalf("%.2f× the rail's energy", float64(sum)/truth)
	}
}

// TestExclusiveSpanSerialisesServes: a second Open waits for the first
// window to close, and back-to-back HwShunt windows never share a
// conversion.
func TestExclusiveSpanSerialisesServes(t *testing.T) {
	load := constLoad(t, 10)
	sp, clock, _ := spanOf(t, SpanConfig{}, load, time.Second, fast())
	ctx := context.Background()
	clock.Set(load.Origin.Add(ms(100)))
	w1, err := sp.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	opened := make(chan *SpanWindow)
	go func() {
		w, err := sp.Open(ctx)
		if err != nil {
			t.Error(err)
		}
		opened <- w
	}()
	// Open blocks on the busy span until its context ends; it cannot
	// succeed however long the deadline takes to come.
	short, cancel := context.WithTimeout(ctx, time.Millisecond)
	defer cancel()
	if _, err := sp.Open(short); err == nil || !strings.Contains(err.Error(), "waiting for the span") {
		t.Fatalf("Open on a busy span with an ended context: %v", err)
	}
	select {
	case <-opened:
		t.Fatal("a second window opened while the first was open")
	default:
	}
	clock.Set(load.Origin.Add(ms(105)))
	r1, err := w1.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w2 := <-opened // opens at 105 ms, right after w1's close
	clock.Set(load.Origin.Add(ms(110)))
	r2, err := w2.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r1.Provenance != wire.HwShunt || r2.Provenance != wire.HwShunt {
		t.Fatalf("%v, %v", r1.Provenance, r2.Provenance)
	}
	// Each charged whole conversions around its 5 ms; together no more
	// than the conversions from the first's start to the second's end.
	if r1.Metering.WindowNs < r1.Metering.ServeNs || r1.Metering.ServeNs != uint64(ms(5)) {
		t.Fatalf("gross %d ns for a %d ns serve", r1.Metering.WindowNs, r1.Metering.ServeNs)
	}
}

// TestSpanSumsMembersAndTakesTheWorst: a span of an INA226 and a RAPL
// zone sums energies and bounds, and is ModelBased because RAPL is.
func TestSpanSumsMembersAndTakesTheWorst(t *testing.T) {
	load := constLoad(t, 5)
	rapl := shunttest.ReplayConfig{Name: "rapl:package-0", Kind: drivers.KindModel, Period: 10 * time.Millisecond,
		Uncertainty: time.Millisecond, GainErr: 0.05, FullScaleNW: 100e9}
	sp, clock, series := spanOf(t, SpanConfig{}, load, time.Second, fast(), rapl)
	ctx := context.Background()
	t0, t1 := load.Origin.Add(ms(200)), load.Origin.Add(ms(300))
	clock.Set(t0)
	w, err := sp.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	clock.Set(t1)
	r, err := w.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := series[0].Energy(t0, t1)
	b, _ := series[1].Energy(t0, t1)
	m := r.Metering
	if r.EnergyUJ != a.Reading.EnergyUJ+b.Reading.EnergyUJ || m.ErrorUJ != a.Reading.Metering.ErrorUJ+b.Reading.Metering.ErrorUJ {
		t.Fatalf("span %d ± %d, members %d ± %d and %d ± %d", r.EnergyUJ, m.ErrorUJ,
			a.Reading.EnergyUJ, a.Reading.Metering.ErrorUJ, b.Reading.EnergyUJ, b.Reading.Metering.ErrorUJ)
	}
	if r.Provenance != wire.ModelBased || m.Kind != wire.KindModel || m.Meter != "span(ina226@sim+rapl:package-0)" ||
		m.PeriodNs != uint64(11*time.Millisecond) || m.Samples != a.Reading.Metering.Samples+b.Reading.Metering.Samples {
		t.Fatalf("%v %+v", r.Provenance, m)
	}
}

// TestIdleBaselineFromQuietStretches: the span measures idle power in the
// quiet stretch before a window and seals it beside the gross figure.
func TestIdleBaselineFromQuietStretches(t *testing.T) {
	// 3 W idle until 2 s, 9 W from 2 s to 2.1 s, 3 W after.
	load, err := shunttest.NewPiecewise(drivertest.Epoch, []int64{0, int64(2 * time.Second), int64(2100 * time.Millisecond)}, []float64{3e9, 9e9, 3e9})
	if err != nil {
		t.Fatal(err)
	}
	sp, clock, _ := spanOf(t, SpanConfig{}, load, 3*time.Second, fast())
	if _, ok := sp.IdleUW(); ok {
		t.Fatal("an idle figure before any quiet stretch was measured")
	}
	ctx := context.Background()
	clock.Set(load.Origin.Add(2 * time.Second))
	w, err := sp.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	clock.Set(load.Origin.Add(2100 * time.Millisecond))
	r, err := w.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r.Metering.IdleUW == nil || math.Abs(float64(*r.Metering.IdleUW)-3e6) > 3e6*0.002+15e3 {
		t.Fatalf("idle %v µW, want 3 W", r.Metering.IdleUW)
	}
}

// TestIdleStretchIsSealable: the quiet stretch an idle figure comes from
// is exposed with its own reading and full evidence, x_idle_uw is exactly
// ⌊its energy × 10⁹ ÷ its gross window⌋, a window opened with no new
// quiet stretch subtracts the same stretch, and a new stretch is a new ID.
func TestIdleStretchIsSealable(t *testing.T) {
	// 3 W, then 4 W from 1.7 s (as the second serve closes): the second
	// quiet stretch is the higher.
	load, err := shunttest.NewPiecewise(drivertest.Epoch, []int64{0, int64(1700 * time.Millisecond)}, []float64{3e9, 4e9})
	if err != nil {
		t.Fatal(err)
	}
	sp, clock, _ := spanOf(t, SpanConfig{}, load, 6*time.Second, fast())
	ctx := context.Background()
	serve := func(open, close time.Duration) (wire.Reading, IdleStretch, bool) {
		t.Helper()
		clock.Set(load.Origin.Add(open))
		w, err := sp.Open(ctx)
		if err != nil {
			t.Fatal(err)
		}
		clock.Set(load.Origin.Add(close))
		r, err := w.Close(ctx)
		if err != nil {
			t.Fatal(err)
		}
		st, ok := w.IdleStretch()
		return r, st, ok
	}
	r, st, ok := serve(1500*time.Millisecond, 1600*time.Millisecond)
	if !ok || r.Metering.IdleUW == nil || *r.Metering.IdleUW != st.PowerUW || st.ID != 0 {
		t.Fatalf("first serve: idle %v, stretch %+v (%v)", r.Metering.IdleUW, st, ok)
	}
	m := st.Reading.Metering
	if st.Reading.Provenance != wire.HwShunt || st.Reading.Metering.IdleUW != nil || m.Meter != sp.Name() || m.Shared != 1 ||
		m.CoveredPPM != wire.FullPPM || m.Samples == 0 || m.ServeNs != uint64(st.To.Sub(st.From)) || m.WindowNs < m.ServeNs {
		t.Fatalf("the stretch's reading is not a sealable idle window: %v %+v", st.Reading.Provenance, m)
	}
	if want := st.Reading.EnergyUJ * 1_000_000_000 / m.WindowNs; st.PowerUW != want || math.Abs(float64(want)-3e6) > 3e6*0.003 {
		t.Fatalf("power %d µW, want ⌊%d µJ × 10⁹ ÷ %d ns⌋ = %d ≈ 3 W", st.PowerUW, st.Reading.EnergyUJ, m.WindowNs, want)
	}
	// Straight after: no quiet stretch long enough, the same one is used.
	_, again, ok := serve(1600*time.Millisecond, 1700*time.Millisecond)
	if !ok || again.ID != st.ID || again.PowerUW != st.PowerUW {
		t.Fatalf("no new stretch, yet %+v after %+v", again, st)
	}
	// A second stretch (4 W): of two, the lower median is the 3 W one.
	_, two, ok := serve(5*time.Second, 5100*time.Millisecond)
	if !ok || two.ID != 0 || two.Oldest != 0 {
		t.Fatalf("of two stretches, want the lower (ID 0): %+v", two)
	}
	if got := sp.IdleStats().Measured; got != 2 {
		t.Fatalf("%d stretches measured, want 2", got)
	}
}
