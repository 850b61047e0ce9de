package agent

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"meshd/drivers"
	"meshd/drivers/ina226"
	"meshd/drivers/inasim"
	"meshd/engine"
	"meshd/shunt"
	"meshd/shunt/shunttest"
	"meshd/wire"
)

// steppedINA226 converts a simulated INA226 and reads it through the real
// driver one sample at a time, when the test releases one, and stamps each
// sample on a simulated clock that advances one update period per sample.
// Only the timestamps are simulated: on a loaded machine wall-clock stamps
// leave gaps that make the provenance a matter of scheduling.
type steppedINA226 struct {
	*ina226.Dev
	chip *inasim.Chip
	base time.Time
	n    atomic.Int64 // samples delivered
	step chan bool    // true releases a sample; false is only a barrier
}

func (s *steppedINA226) now() time.Time {
	return s.base.Add(time.Duration(s.n.Load()) * s.UpdatePeriod())
}

func (s *steppedINA226) Next(ctx context.Context) (drivers.Sample, error) {
	for {
		select {
		case release := <-s.step:
			if !release {
				continue
			}
			if !s.chip.Convert() {
				return drivers.Sample{}, errors.New("simulated chip is not converting")
			}
			smp, err := s.Dev.Next(ctx)
			if err != nil {
				return smp, err
			}
			smp.At = s.base.Add(time.Duration(s.n.Add(1)) * s.UpdatePeriod())
			return smp, nil
		case <-ctx.Done():
			return drivers.Sample{}, ctx.Err()
		}
	}
}

// advance releases n samples and returns once the sampler has recorded
// them all: it asks for the next sample only after recording the last.
func (s *steppedINA226) advance(t *testing.T, n int) {
	t.Helper()
	shunttest.Release(t, s.step, n)
}

// closeHook runs before each window closes: the engine's work is done and
// the test lets the sensor deliver the readings that span it.
type closeHook struct {
	Meter
	beforeClose func()
}

func (h closeHook) Open(ctx context.Context) (Window, error) {
	w, err := h.Meter.Open(ctx)
	if err != nil {
		return nil, err
	}
	return hookedWindow{w, h.beforeClose}, nil
}

type hookedWindow struct {
	Window
	beforeClose func()
}

func (w hookedWindow) Close(ctx context.Context) (wire.Reading, error) {
	w.beforeClose()
	return w.Window.Close(ctx)
}

// TestServeUnderSimulatedINA226 runs the whole chain below the agent for
// real: a register-level INA226, the driver reading it over i2c, the
// sampler integrating, and the steward sealing.
func TestServeUnderSimulatedINA226(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bus := inasim.NewBus("sim-1")
	chip := bus.Add(inasim.INA226, 0x40)
	// 10 mΩ shunt carrying 1.5 A (15 mV) on a 12 V rail: 18 W.
	const shuntNV, busUV = 15_000_000, 12_000_000
	const watts = 18.0
	chip.SetInputs(shuntNV, busUV)
	dev, err := ina226.Open(bus, 0x40, ina226.Config{
		ShuntMicroOhms: 10_000, MaxCurrentUA: 4_000_000,
		Averages: 4, BusConvTime: 588 * time.Microsecond, ShuntConvTime: 588 * time.Microsecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	s := &steppedINA226{Dev: dev, chip: chip, base: time.Now(), step: make(chan bool)}
	m, err := shunt.New(ctx, s, shunt.Config{Now: s.now})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s.advance(t, 2) // readings before the window opens, so its start is covered

	// The engine's work spans this many update periods of metered time.
	const span = 50
	bs := refs(t, engine.ReferenceConfig{Name: "tiny", Fidelity: wire.F1, UJPerToken: 10, Work: 4000})
	a, _ := newAgent(t, closeHook{FromShunt(m), func() { s.advance(t, span) }}, bs...)
	p := "measure me"
	r := promptReq(p, wire.F0, 1e9)
	r.MaxTokens = 200
	resp, err := a.Serve(ctx, r, []byte(p))
	if err != nil {
		t.Fatal(err)
	}
	rc := resp.Sealed.Receipt
	// Every reading arrived one period after the last and one lies at the
	// window's end: fully covered, so a hardware measurement.
	period := uint64(dev.UpdatePeriod())
	if rc.EnergyProvenance != "HwShunt" || rc.MeasuredUJ == nil {
		t.Fatalf("provenance %s, measured %v: want a HwShunt measurement", rc.EnergyProvenance, rc.MeasuredUJ)
	}
	if rc.MeterName() != m.Name() || rc.Samples == nil || *rc.Samples != span || rc.MaxGapNs == nil || *rc.MaxGapNs != period ||
		rc.WindowNs == nil || *rc.WindowNs != span*period || rc.ErrorUJ == nil {
		t.Fatalf("metering fields: meter %q samples %v max gap %v window %v error %v; want %d samples %d ns apart",
			rc.MeterName(), rc.Samples, rc.MaxGapNs, rc.WindowNs, rc.ErrorUJ, span, period)
	}
	// The chip saw a constant 18 W: the measurement must be 18 W over the
	// integrated window, within the bound the meter itself reported.
	e, err := rc.Energy()
	if err != nil {
		t.Fatal(err)
	}
	want := watts * float64(*rc.WindowNs) / 1e3
	if diff := math.Abs(float64(e.UJ()) - want); diff > float64(*rc.ErrorUJ)+1 {
		t.Fatalf("charged %d µJ over %d ns; 18 W gives %.0f µJ; off by %.0f, bound %d", e.UJ(), *rc.WindowNs, want, diff, *rc.ErrorUJ)
	}
	if want := e.UJ() / uint64(rc.TokensAccepted); *rc.UJPerAcceptedToken != want {
		t.Fatalf("wedge metric %d, want %d", *rc.UJPerAcceptedToken, want)
	}
}
