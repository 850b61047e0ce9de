package agent

import (
	"context"
	"math"
	"testing"
	"time"

	"meshd/drivers/drivertest"
	"meshd/drivers/ina226"
	"meshd/drivers/inasim"
	"meshd/engine"
	"meshd/shunt"
	"meshd/shunt/shunttest"
	"meshd/wire"

	"periph.io/x/conn/v3/physic"
)

// runTo lets a sampler reading a simulated chip run until the simulated
// clock reaches until, one sleep at a time: the clock moves only while the
// sampler sleeps, so what it reads is the same on any machine.
func runTo(t *testing.T, clock *drivertest.Clock, until time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // reports a hang only
	defer cancel()
	for {
		if err := clock.WaitSleepers(ctx, 1); err != nil {
			t.Fatalf("the sampler stopped sleeping: %v", err)
		}
		if !clock.Now().Before(until) {
			return
		}
		clock.AdvanceToNext()
	}
}

// closeHook runs before each window closes (the engine's work is done),
// then keeps the simulated clock running while Close waits for the
// conversion that ends past the window.
type closeHook struct {
	Meter
	beforeClose func()
	clock       *drivertest.Clock
}

func (h closeHook) Open(ctx context.Context) (Window, error) {
	w, err := h.Meter.Open(ctx)
	if err != nil {
		return nil, err
	}
	return hookedWindow{w, h}, nil
}

type hookedWindow struct {
	Window
	h closeHook
}

func (w hookedWindow) Close(ctx context.Context) (wire.Reading, error) {
	w.h.beforeClose()
	return shunttest.CloseDriving(ctx, w.Window.Close, func(<-chan struct{}) error {
		if err := w.h.clock.WaitSleepers(ctx, 1); err != nil {
			return err
		}
		w.h.clock.AdvanceToNext()
		return nil
	})
}

// TestServeUnderSimulatedINA226 runs the whole chain below the agent for
// real: a register-level INA226, the driver reading it over i2c, the
// sampler integrating, and the steward sealing.
func TestServeUnderSimulatedINA226(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clock := drivertest.NewClock(drivertest.Epoch, false)
	bus := inasim.NewBus("sim-1", clock)
	chip := bus.Add(inasim.INA226, 0x40)
	// 10 mΩ shunt carrying 1.5 A on a 12 V rail: 18 W.
	const watts = 18.0
	chip.SetShunt(10 * physic.MilliOhm)
	chip.SetLoad(inasim.Constant(1500*physic.MilliAmpere, 12*physic.Volt))
	dev, err := ina226.Open(bus, 0x40, ina226.Config{ShuntMicroOhms: 10_000, MaxCurrentUA: 2_000_000, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	m, err := shunt.New(ctx, dev, shunt.MeterConfig{Config: shunt.Config{Now: clock.Now}, After: func(time.Duration) <-chan time.Time { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	runTo(t, clock, clock.Now().Add(50*time.Millisecond)) // readings before the window opens
	meter, err := FromShunt(m)
	if err != nil {
		t.Fatal(err)
	}
	// The engine's work spans 100 ms of metered time.
	bs := refs(t, engine.ReferenceConfig{Name: "tiny", Fidelity: wire.F1, UJPerToken: 10, Work: 4000})
	a, _ := newAgent(t, closeHook{meter, func() { runTo(t, clock, clock.Now().Add(100*time.Millisecond)) }, clock}, bs...)
	p := "measure me"
	r := promptReq(p, wire.F0, 1e9)
	r.MaxTokens = 200
	resp, err := a.Serve(ctx, r, []byte(p))
	if err != nil {
		t.Fatal(err)
	}
	rc := resp.Sealed.Receipt
	// Conversions chained across the window: a hardware measurement over
	// whole conversions containing the serve.
	period := uint64(dev.Info().MaxPeriod)
	if rc.EnergyProvenance != "HwShunt" || rc.MeasuredUJ == nil {
		t.Fatalf("provenance %s, measured %v: want a HwShunt measurement", rc.EnergyProvenance, rc.MeasuredUJ)
	}
	if rc.MeterName() != m.Name() || *rc.MeterKind != wire.KindADC || *rc.Samples < 12 || *rc.MaxGapNs > period ||
		*rc.ServeNs < uint64(100*time.Millisecond) || *rc.WindowNs < *rc.ServeNs || *rc.WindowNs > *rc.ServeNs+3*period ||
		*rc.CoveredPPM != wire.FullPPM || *rc.PeriodNs != period {
		t.Fatalf("evidence: meter %q kind %s samples %d max gap %d window %d serve %d covered %d period %d",
			rc.MeterName(), *rc.MeterKind, *rc.Samples, *rc.MaxGapNs, *rc.WindowNs, *rc.ServeNs, *rc.CoveredPPM, *rc.PeriodNs)
	}
	// The chip saw a constant 18 W: the measurement must be 18 W over the
	// gross window, within the bound the meter itself reported.
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
