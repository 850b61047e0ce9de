package agent

import (
	"context"
	"math"
	"testing"
	"time"

	"meshd/drivers/ina226"
	"meshd/drivers/inasim"
	"meshd/engine"
	"meshd/shunt"
	"meshd/wire"
)

// TestServeUnderSimulatedINA226 runs the whole chain below the agent for
// real: a register-level INA226 converting on its own clock, the driver
// reading it over i2c, the sampler integrating, and the steward sealing.
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
	go chip.Run(ctx, dev.UpdatePeriod(), nil)
	m, err := shunt.New(ctx, dev, shunt.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	time.Sleep(5 * dev.UpdatePeriod()) // let the ring fill before the first window

	bs := refs(t, engine.ReferenceConfig{Name: "tiny", Fidelity: wire.F1, UJPerToken: 10, Work: 4000})
	a, _ := newAgent(t, FromShunt(m), bs...)
	p := "measure me"
	r := promptReq(p, wire.F0, 1e9)
	r.MaxTokens = 200
	resp, err := a.Serve(ctx, r, []byte(p))
	if err != nil {
		t.Fatal(err)
	}
	rc := resp.Sealed.Receipt
	// Provenance follows coverage: HwShunt iff no gap above two update
	// periods. On a loaded test machine the simulated chip's own clock can
	// stall, and then the receipt must say ModelBased, never HwShunt.
	if rc.Samples == nil || rc.MaxGapNs == nil {
		t.Fatalf("metered receipt lacks coverage fields")
	}
	covered := *rc.MaxGapNs <= uint64(2*dev.UpdatePeriod())
	if covered != (rc.EnergyProvenance == "HwShunt") || covered != (rc.MeasuredUJ != nil) {
		t.Fatalf("provenance %s with max gap %d ns (period %v, %d samples)", rc.EnergyProvenance, *rc.MaxGapNs, dev.UpdatePeriod(), *rc.Samples)
	}
	if !covered {
		t.Logf("scheduler stalls left a %d ns gap: sealed ModelBased as it must", *rc.MaxGapNs)
	}
	if rc.Meter != m.Name() || *rc.Samples == 0 || rc.ErrorUJ == nil {
		t.Fatalf("metering fields missing: meter %q samples %v error %v", rc.Meter, rc.Samples, rc.ErrorUJ)
	}
	// The chip saw a constant 18 W: the measurement must be 18 W over the
	// integrated window, within the bound the meter itself reported.
	e, err := rc.Energy()
	if err != nil {
		t.Fatal(err)
	}
	want := watts * float64(rc.WindowNs) / 1e3
	if diff := math.Abs(float64(e.UJ()) - want); diff > float64(*rc.ErrorUJ)+1 {
		t.Fatalf("charged %d µJ over %d ns; 18 W gives %.0f µJ; off by %.0f, bound %d", e.UJ(), rc.WindowNs, want, diff, *rc.ErrorUJ)
	}
	if want := e.UJ() / uint64(rc.TokensAccepted); *rc.UJPerAcceptedToken != want {
		t.Fatalf("wedge metric %d, want %d", *rc.UJPerAcceptedToken, want)
	}
}
