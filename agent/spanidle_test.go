package agent

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"meshd/drivers"
	"meshd/drivers/drivertest"
	"meshd/engine"
	"meshd/shunt"
	"meshd/shunt/shunttest"
	"meshd/steward"
	"meshd/wire"
)

// replayedSpan records a replayed INA226 (the driver-level fake: its
// conversions, timing uncertainty and gain error) over load for d and
// returns a span over the recording, on a clock the test sets.
func replayedSpan(t testing.TB, load *shunttest.Piecewise, d time.Duration, cfg shunt.SpanConfig) (*shunt.Span, *drivertest.Clock) {
	t.Helper()
	rc := shunttest.ReplayConfig{Name: "ina226@sim", Kind: drivers.KindConversion, Period: 1100 * time.Microsecond,
		Lag: 150 * time.Microsecond, Uncertainty: 120 * time.Microsecond, Jitter: 50 * time.Microsecond,
		GainErr: 0.002, OffsetNW: 15e6, FullScaleNW: 18e9}
	rec := drivertest.NewClock(load.Origin, true)
	r := shunttest.NewReplay(rc, load, rec)
	s, err := shunt.NewSeries(r.Name(), r.Info(), shunt.Config{Now: rec.Now, Epoch: load.Origin, Capacity: int(d/rc.Period) + 4096})
	if err != nil {
		t.Fatal(err)
	}
	for end := load.Origin.Add(d); rec.Now().Before(end); {
		smp, err := r.Next(context.Background())
		s.Record(smp, err)
	}
	clock := drivertest.NewClock(load.Origin, false)
	cfg.Now = clock.Now
	sp, err := shunt.NewSpan([]shunt.Member{s}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return sp, clock
}

// clockedMeter opens its span's windows at the test clock's instant and
// moves the clock by step before each closes: the serve's metered time.
type clockedMeter struct {
	Meter
	clock *drivertest.Clock
	step  time.Duration
}

func (m clockedMeter) Open(ctx context.Context) (Window, error) {
	w, err := m.Meter.Open(ctx)
	if err != nil {
		return nil, err
	}
	return clockedWindow{w.(*shunt.SpanWindow), m}, nil
}

// clockedWindow is the span's window; it still tells which quiet stretch
// its reading subtracts.
type clockedWindow struct {
	*shunt.SpanWindow
	m clockedMeter
}

func (w clockedWindow) Close(ctx context.Context) (wire.Reading, error) {
	w.m.clock.Advance(w.m.step)
	return w.SpanWindow.Close(ctx)
}

// The serve subtracting a new quiet stretch seals it as an idle record of
// source span just before its own receipt and names it; the next serve
// with no new stretch names the same record; a new stretch is a new
// record. Every link checks out against the chain, and the log verifies.
func TestServeSealsItsIdleStretch(t *testing.T) {
	// 3 W quiet for 2 s, 10 W serves to 2.19 s, 2 W quiet to 4.2 s, 10 W
	// serves after.
	load, err := shunttest.NewPiecewise(drivertest.Epoch, []int64{0, int64(2 * time.Second), int64(2190 * time.Millisecond), int64(4200 * time.Millisecond)},
		[]float64{3e9, 10e9, 2e9, 10e9})
	if err != nil {
		t.Fatal(err)
	}
	sp, clock := replayedSpan(t, load, 5*time.Second, shunt.SpanConfig{})
	bs := refs(t, engine.ReferenceConfig{Name: "tiny", Fidelity: wire.F1, UJPerToken: 10})
	a, path := newAgent(t, clockedMeter{FromSpan(sp), clock, 90 * time.Millisecond}, bs...)
	ctx := context.Background()
	var rs []*steward.Receipt
	serve := func(at time.Duration, p string) *Response {
		t.Helper()
		clock.Set(load.Origin.Add(at))
		resp, err := a.Serve(ctx, promptReq(p, wire.F0, 1e9), []byte(p))
		if err != nil {
			t.Fatal(err)
		}
		if resp.IdleRecord != nil {
			rs = append(rs, resp.IdleRecord.Sealed.Receipt)
		}
		rs = append(rs, resp.Sealed.Receipt)
		return resp
	}
	first := serve(2*time.Second, "a")
	second := serve(2100*time.Millisecond, "b")
	third := serve(4200*time.Millisecond, "c")
	fourth := serve(4300*time.Millisecond, "d")

	// 0 idle (3 W), 1 a, 2 b, 3 idle (2 W: the lower of two), 4 c, 5 d.
	for i, c := range []struct {
		resp   *Response
		seq    uint64
		record uint64
		sealed bool
		watts  float64
	}{{first, 1, 0, true, 3}, {second, 2, 0, false, 3}, {third, 4, 3, true, 2}, {fourth, 5, 3, false, 2}} {
		r := c.resp.Sealed.Receipt
		if r.Sequence != c.seq || r.IdleRecord == nil || *r.IdleRecord != c.record || r.IdleUW == nil {
			t.Fatalf("serve %d: sequence %d, x_idle_record %v, x_idle_uw %v; want %d naming %d", i, r.Sequence, r.IdleRecord, r.IdleUW, c.seq, c.record)
		}
		if (c.resp.IdleRecord != nil) != c.sealed {
			t.Fatalf("serve %d sealed an idle record: %v, want %v", i, c.resp.IdleRecord != nil, c.sealed)
		}
		if got := float64(*r.IdleUW) / 1e6; got < c.watts*0.99 || got > c.watts*1.01 {
			t.Fatalf("serve %d subtracts %.3f W, the quiet stretch drew %.0f W", i, got, c.watts)
		}
		if !c.sealed {
			continue
		}
		rec := c.resp.IdleRecord
		ir := rec.Sealed.Receipt
		if p, err := steward.IdlePowerUW(ir); err != nil || p != *r.IdleUW || ir.Sequence != c.record || ir.MeterName() != r.MeterName() {
			t.Fatalf("serve %d: record %d power %d (%v), meter %s; the serve states %d on %s", i, ir.Sequence, p, err, ir.MeterName(), *r.IdleUW, r.MeterName())
		}
		if err := steward.CheckRecordDocument(ir, rec.Document); err != nil {
			t.Fatal(err)
		}
		doc, err := steward.DecodeIdleDoc(rec.Document)
		if err != nil || doc.Source != steward.IdleSourceSpan || doc.Backend != "tiny" || doc.Run != nil || ir.Run != nil ||
			doc.DurationMs < 1900 || doc.DurationMs > 2010 || ir.EnergyProvenance != "HwShunt" || ir.IdleUW != nil {
			t.Fatalf("span idle record: %+v (%v), %s, x_run %v", doc, err, ir.EnergyProvenance, ir.Run)
		}
	}
	bySeq := map[uint64]*steward.Receipt{}
	for _, r := range rs {
		bySeq[r.Sequence] = r
	}
	if len(bySeq) != 6 {
		t.Fatalf("%d receipts in the chain, want 6", len(bySeq))
	}
	if err := steward.CheckIdleLinks(bySeq); err != nil {
		t.Fatal(err)
	}
	if _, err := steward.VerifyLog(ctx, path, steward.VerifyOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A reading whose stretch the agent cannot see (a window that hides it)
// subtracts no idle power: x_idle_uw is sealed only beside its record.
func TestIdleWithoutItsStretchIsLeftOff(t *testing.T) {
	load, err := shunttest.NewPiecewise(drivertest.Epoch, []int64{0, int64(2 * time.Second)}, []float64{3e9, 10e9})
	if err != nil {
		t.Fatal(err)
	}
	sp, clock := replayedSpan(t, load, 3*time.Second, shunt.SpanConfig{})
	bs := refs(t, engine.ReferenceConfig{Name: "tiny", Fidelity: wire.F1, UJPerToken: 10})
	a, _ := newAgent(t, hidingMeter{clockedMeter{FromSpan(sp), clock, 90 * time.Millisecond}}, bs...)
	clock.Set(load.Origin.Add(2 * time.Second))
	resp, err := a.Serve(context.Background(), promptReq("a", wire.F0, 1e9), []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.Sealed.Receipt; r.IdleUW != nil || r.IdleRecord != nil || r.Sequence != 0 || resp.IdleRecord != nil {
		t.Fatalf("sequence %d, x_idle_uw %v, x_idle_record %v", r.Sequence, r.IdleUW, r.IdleRecord)
	}
	if _, ok := sp.IdleUW(); !ok {
		t.Fatal("the span measured no quiet stretch: the test proves nothing")
	}
}

// hidingMeter's windows are only Windows.
type hidingMeter struct{ m clockedMeter }

func (h hidingMeter) Name() string { return h.m.Name() }
func (h hidingMeter) Open(ctx context.Context) (Window, error) {
	w, err := h.m.Open(ctx)
	if err != nil {
		return nil, err
	}
	return struct{ Window }{w}, nil
}

// BenchmarkServeIdleRecord: a serve whose quiet stretch is new seals an
// idle record before its receipt; the next serve on the same stretch
// names that record and seals only itself. Interleaved, on a log that
// syncs like production's, it reports each serve's time and their ratio
// (median of the repetitions, same run): the extra cost of a stretch's
// record, paid once per quiet stretch.
func BenchmarkServeIdleRecord(b *testing.B) {
	const reps = 15
	gap := 1200 * time.Millisecond // each new serve follows a quiet stretch over a second
	d := time.Duration(reps+1) * gap
	load, err := shunttest.NewPiecewise(drivertest.Epoch, []int64{0}, []float64{3e9})
	if err != nil {
		b.Fatal(err)
	}
	k, err := steward.NewKeyFromSeed(make([]byte, 32))
	if err != nil {
		b.Fatal(err)
	}
	var newNs, reuseNs []float64
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		// The latest stretch alone is the idle figure, so every new
		// stretch is subtracted and sealed.
		sp, clock := replayedSpan(b, load, d, shunt.SpanConfig{IdleSamples: 1})
		l, _, err := steward.OpenLog(ctx, filepath.Join(b.TempDir(), "r"), steward.LogOptions{})
		if err != nil {
			b.Fatal(err)
		}
		be, err := engine.NewReference(engine.ReferenceConfig{Name: "tiny", Fidelity: wire.F1, UJPerToken: 10, Work: 1})
		if err != nil {
			b.Fatal(err)
		}
		a, err := New(Config{Backends: []engine.Backend{be}, Meter: clockedMeter{FromSpan(sp), clock, 50 * time.Millisecond}, Steward: steward.New(k, l, steward.Options{})})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		for i := range reps {
			for j, at := range []time.Duration{time.Duration(i+1) * gap, time.Duration(i+1)*gap + 100*time.Millisecond} {
				clock.Set(load.Origin.Add(at))
				p := fmt.Sprint("p", i, j)
				t0 := time.Now()
				resp, err := a.Serve(ctx, promptReq(p, wire.F0, 1e9), []byte(p))
				el := float64(time.Since(t0).Nanoseconds())
				if err != nil {
					b.Fatal(err)
				}
				if (resp.IdleRecord != nil) != (j == 0) || resp.Sealed.Receipt.IdleRecord == nil {
					b.Fatalf("serve %d/%d: sealed a record %v, names %v", i, j, resp.IdleRecord != nil, resp.Sealed.Receipt.IdleRecord)
				}
				if j == 0 {
					newNs = append(newNs, el)
				} else {
					reuseNs = append(reuseNs, el)
				}
			}
		}
		b.StopTimer()
		l.Close()
		b.StartTimer()
	}
	med := func(x []float64) float64 { sort.Float64s(x); return x[len(x)/2] }
	nw, ru := med(newNs), med(reuseNs)
	b.ReportMetric(nw/1e3, "µs/serve-new-record")
	b.ReportMetric(ru/1e3, "µs/serve-reusing")
	b.ReportMetric(nw/ru, "new/reuse")
}
