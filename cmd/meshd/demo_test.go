package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"meshd/agent"
	"meshd/drivers"
	"meshd/shunt/shunttest"
	"meshd/steward"
	"meshd/wire"
)

func TestDemoRunsEndToEnd(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"demo", "-no-gguf", "-dir", dir}, &out, &errb); err != nil {
		t.Fatalf("demo failed: %v\n%s%s", err, out.String(), errb.String())
	}
	s := out.String()
	for _, want := range []string{"ref-tiny", "ref-mid", "ref-large", "refused: none of 3 backends admissible", "Estimator", "served 5, refused 2", "log verified: 5 receipts"} {
		if !strings.Contains(s, want) {
			t.Errorf("demo output lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "HwShunt") {
		t.Error("demo without hardware claims a hardware measurement")
	}
	// The log the demo left behind verifies independently, and a second
	// run appends to it rather than starting over.
	if err := run(context.Background(), []string{"demo", "-no-gguf", "-dir", dir}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	rep, err := steward.VerifyLog(context.Background(), filepath.Join(dir, "receipts"), steward.VerifyOptions{})
	if err != nil || rep.Records != 10 {
		t.Fatalf("demo log after two runs: %v %+v", err, rep)
	}
}

// steppedSensor stamps its inner sensor's readings on a simulated clock,
// one update period apart, and delivers them only when released: the first
// credit ones freely (so the demo's readiness check passes), the rest by
// advance. On a loaded machine wall-clock stamps leave gaps that would make
// each receipt's provenance a matter of scheduling.
type steppedSensor struct {
	drivers.Sensor
	base   time.Time
	n      atomic.Int64 // readings delivered
	credit int          // touched only by the sampler's goroutine
	step   chan bool    // true releases a reading; false is only a barrier
}

func (s *steppedSensor) now() time.Time {
	return s.base.Add(time.Duration(s.n.Load()) * s.UpdatePeriod())
}

func (s *steppedSensor) Next(ctx context.Context) (drivers.Sample, error) {
	for s.credit == 0 {
		select {
		case release := <-s.step:
			if release {
				s.credit++
			}
		case <-ctx.Done():
			return drivers.Sample{}, ctx.Err()
		}
	}
	s.credit--
	smp, err := s.Sensor.Next(ctx)
	if err != nil {
		return smp, err
	}
	smp.At = s.base.Add(time.Duration(s.n.Add(1)) * s.UpdatePeriod())
	smp.Averaged = s.UpdatePeriod()
	return smp, nil
}

// advance releases n readings and returns once the sampler has recorded
// them all: it asks for the next reading only after recording the last.
func (s *steppedSensor) advance(t *testing.T, n int) {
	t.Helper()
	shunttest.Release(t, s.step, n)
}

// closeHook runs before each window closes, once the engine's work is done.
type closeHook struct {
	agent.Meter
	beforeClose func()
}

func (h closeHook) Open(ctx context.Context) (agent.Window, error) {
	w, err := h.Meter.Open(ctx)
	if err != nil {
		return nil, err
	}
	return hookedWindow{w, h.beforeClose}, nil
}

type hookedWindow struct {
	agent.Window
	beforeClose func()
}

func (w hookedWindow) Close(ctx context.Context) (wire.Reading, error) {
	w.beforeClose()
	return w.Window.Close(ctx)
}

// TestDemoWithHwmonMeter meters the demo with a kernel rail faked at the
// sysfs level, read by the real hwmon driver; the test releases the rail's
// readings on a simulated clock, span of them over each engine call. Every
// receipt must then be a HwShunt measurement by that meter, covering
// exactly those readings, and charge the rail's 18 W.
func TestDemoWithHwmonMeter(t *testing.T) {
	root := t.TempDir()
	rail := filepath.Join(root, "hwmon0")
	if err := os.MkdirAll(rail, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{
		"name": "ina226", "in1_input": "12000", "curr1_input": "1500", "power1_input": "18000000",
		"update_interval": "10", "shunt_resistor": "10000",
	} {
		if err := os.WriteFile(filepath.Join(rail, name), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const span = 5 // readings per engine call
	var stepped *steppedSensor
	hooks := meterHooks{
		sensor: func(s drivers.Sensor) drivers.Sensor {
			stepped = &steppedSensor{Sensor: s, base: time.Now(), credit: 1, step: make(chan bool)}
			return stepped
		},
		now:   func() time.Time { return stepped.now() },
		meter: func(m agent.Meter) agent.Meter { return closeHook{m, func() { stepped.advance(t, span) }} },
	}
	dir := t.TempDir()
	var out, errb bytes.Buffer
	args := []string{"-no-gguf", "-dir", dir, "-meter", "hwmon:hwmon0/ina226:1", "-hwmon-root", root}
	if err := runDemoWith(context.Background(), args, &out, &errb, hooks); err != nil {
		t.Fatalf("demo: %v\n%s%s", err, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "metering every engine call with hwmon:hwmon0/ina226:1") {
		t.Fatalf("demo does not say what meters it:\n%s", out.String())
	}
	period := uint64(10 * time.Millisecond)
	n := 0
	_, err := steward.VerifyLog(context.Background(), filepath.Join(dir, "receipts"), steward.VerifyOptions{Visit: func(o *steward.Opened) error {
		n++
		r := o.Receipt
		if r.EnergyProvenance != "HwShunt" || r.MeasuredUJ == nil {
			return fmt.Errorf("receipt %d: provenance %s, measured %v; want a HwShunt measurement", r.Sequence, r.EnergyProvenance, r.MeasuredUJ)
		}
		if r.MeterName() != "hwmon:hwmon0/ina226:1" || r.ErrorUJ == nil || r.Samples == nil || *r.Samples != span ||
			r.WindowNs == nil || *r.WindowNs != span*period || r.MaxGapNs == nil || *r.MaxGapNs != period {
			return fmt.Errorf("receipt %d: meter %q, error bound %v, samples %v, window %v, max gap %v; want %d readings %d ns apart",
				r.Sequence, r.MeterName(), r.ErrorUJ, r.Samples, r.WindowNs, r.MaxGapNs, span, period)
		}
		e, err := r.Energy()
		if err != nil {
			return err
		}
		want := 18.0 * float64(*r.WindowNs) / 1e3
		if d := float64(e.UJ()) - want; d*d > float64(*r.ErrorUJ+1)*float64(*r.ErrorUJ+1) {
			t.Errorf("receipt %d: %d µJ over %d ns, 18 W gives %.0f (bound %d)", r.Sequence, e.UJ(), *r.WindowNs, want, *r.ErrorUJ)
		}
		return nil
	}})
	if err != nil || n != 5 {
		t.Fatalf("log: %v, %d receipts", err, n)
	}
	if err := run(context.Background(), []string{"demo", "-no-gguf", "-dir", t.TempDir(), "-meter", "hwmon:nope", "-hwmon-root", root}, &out, &errb); err == nil || !strings.Contains(err.Error(), `no hwmon rail "nope"`) {
		t.Fatalf("unknown rail: %v", err)
	}
}
