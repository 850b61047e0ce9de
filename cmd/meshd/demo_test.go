package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"meshd/agent"
	"meshd/drivers"
	"meshd/drivers/drivertest"
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
	for _, want := range []string{"ref-tiny", "ref-mid", "ref-large", "refused: none of 3 backends admissible", "Estimator", "served 8, refused 2", "log verified: 8 receipts", "chat (streamed)", "daemon stopped cleanly"} {
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
	if err != nil || rep.Records != 16 {
		t.Fatalf("demo log after two runs: %v %+v", err, rep)
	}
}

// steppedSensor delivers its inner sensor's readings only when released:
// the first credit ones freely (so the demo's readiness check passes), the
// rest by advance. The inner sensor runs on a simulated clock, so each
// receipt's figures are the same on any machine under any load.
type steppedSensor struct {
	drivers.Sensor
	credit int       // touched only by the sampler's goroutine
	step   chan bool // true releases a reading; false is only a barrier
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
	return s.Sensor.Next(ctx)
}

// counterClock is a simulated clock in auto mode that, each time a sleep
// ends, sets a kernel energy counter file to what a constant load has drawn
// by then: the driver reads the file right after its pacing sleep, so it
// sees the counter of the instant it reads.
type counterClock struct {
	*drivertest.Clock
	t      *testing.T
	file   string
	origin time.Time
	watts  float64
}

func (c counterClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := c.Clock.Sleep(ctx, d); err != nil {
		return err
	}
	c.set()
	return nil
}

func (c counterClock) set() {
	uj := int64(c.watts * 1e6 * c.Now().Sub(c.origin).Seconds())
	if err := os.WriteFile(c.file, []byte(fmt.Sprintf("%d\n", uj)), 0o644); err != nil {
		c.t.Error(err)
	}
}

// closeHook lets readings through around each window: span of them while
// the engine works, then as many as the window's Close waits for.
type closeHook struct {
	agent.Meter
	during func()
	step   chan bool
}

func (h closeHook) Open(ctx context.Context) (agent.Window, error) {
	w, err := h.Meter.Open(ctx)
	if err != nil {
		return nil, err
	}
	return hookedWindow{w, h}, nil
}

type hookedWindow struct {
	agent.Window
	h closeHook
}

func (w hookedWindow) Close(ctx context.Context) (wire.Reading, error) {
	w.h.during()
	return shunttest.CloseDriving(ctx, w.Window.Close, func(closed <-chan struct{}) error {
		select {
		case w.h.step <- true:
		case <-closed:
		}
		return nil
	})
}

// TestDemoWithHwmonMeter meters the demo with a kernel energy-counter rail
// (an INA228 under the kernel's ina238 driver) faked at the sysfs level
// and read by the real hwmon driver on a simulated clock, on an 18 W load.
// Every receipt must carry that meter's evidence over a gross window of
// chained counter readings that contains the serve, and charge 18 W within
// its bound.
func TestDemoWithHwmonMeter(t *testing.T) {
	root := t.TempDir()
	rail := filepath.Join(root, "hwmon0")
	if err := os.MkdirAll(rail, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{
		"name": "ina228", "in1_input": "12000", "curr1_input": "1500", "power1_input": "18000000",
		"energy1_input": "0", "update_interval": "10",
	} {
		if err := os.WriteFile(filepath.Join(rail, name), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const span = 5 // readings while each engine call runs
	sim := drivertest.NewClock(drivertest.Epoch, true)
	clock := counterClock{Clock: sim, t: t, file: filepath.Join(rail, "energy1_input"), origin: sim.Now(), watts: 18}
	clock.set()
	step := make(chan bool)
	hooks := meterHooks{
		clock:  clock,
		sensor: func(s drivers.Sensor) drivers.Sensor { return &steppedSensor{Sensor: s, credit: 2, step: step} },
		now:    sim.Now,
		after:  func(time.Duration) <-chan time.Time { return nil },
	}
	hooks.meter = func(m agent.Meter) agent.Meter {
		return closeHook{Meter: m, step: step, during: func() { shunttest.Release(t, step, span) }}
	}
	dir := t.TempDir()
	var out, errb bytes.Buffer
	const meter = "hwmon:hwmon0/ina228:1"
	args := []string{"-no-gguf", "-dir", dir, "-meter", meter + "@2000", "-hwmon-root", root}
	if err := runDemoWith(context.Background(), args, &out, &errb, hooks); err != nil {
		t.Fatalf("demo: %v\n%s%s", err, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "metering every engine call with "+meter) {
		t.Fatalf("demo does not say what meters it:\n%s", out.String())
	}
	n := 0
	_, err := steward.VerifyLog(context.Background(), filepath.Join(dir, "receipts"), steward.VerifyOptions{Visit: func(o *steward.Opened) error {
		n++
		r := o.Receipt
		// The INA228 converts bus, shunt and temperature in turn under the
		// kernel's default setup: two thirds of each conversion the current
		// goes unobserved, charged at full scale, so the counter's figure
		// is honest but cannot be within a hardware claim's accuracy.
		if r.EnergyProvenance != "ModelBased" || r.MeasuredUJ != nil {
			return fmt.Errorf("receipt %d: provenance %s, measured %v; want ModelBased", r.Sequence, r.EnergyProvenance, r.MeasuredUJ)
		}
		if r.MeterName() != meter || r.MeterKind == nil || *r.MeterKind != wire.KindCounter || r.Samples == nil || *r.Samples < span ||
			r.ServeNs == nil || *r.WindowNs < *r.ServeNs || *r.CoveredPPM != wire.FullPPM || *r.MaxGapNs > *r.PeriodNs {
			return fmt.Errorf("receipt %d: evidence %s %v samples %v window %v serve %v covered %v gap %v period %v", r.Sequence,
				r.MeterName(), r.MeterKind, r.Samples, r.WindowNs, r.ServeNs, r.CoveredPPM, r.MaxGapNs, r.PeriodNs)
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
	if err != nil || n != 8 {
		t.Fatalf("log: %v, %d receipts", err, n)
	}
	if err := run(context.Background(), []string{"demo", "-no-gguf", "-dir", t.TempDir(), "-meter", "hwmon:nope", "-hwmon-root", root}, &out, &errb); err == nil || !strings.Contains(err.Error(), `no hwmon rail "nope"`) {
		t.Fatalf("unknown rail: %v", err)
	}
}

// Without -dir the demo's temporary directory is removed after a clean run
// (and said so); with -keep it stays and the demo says where.
func TestDemoTempDir(t *testing.T) {
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("keep=%v", keep), func(t *testing.T) {
			tmp := t.TempDir()
			t.Setenv("TMPDIR", tmp)
			args := []string{"demo", "-no-gguf"}
			if keep {
				args = append(args, "-keep")
			}
			var out, errb bytes.Buffer
			if err := run(context.Background(), args, &out, &errb); err != nil {
				t.Fatalf("demo failed: %v\n%s%s", err, out.String(), errb.String())
			}
			left, err := filepath.Glob(filepath.Join(tmp, "meshd-demo-*"))
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case !keep && (len(left) != 0 || !strings.Contains(out.String(), "removed "+tmp)):
				t.Errorf("left %v behind; output:\n%s", left, out.String())
			case keep && (len(left) != 1 || !strings.Contains(errb.String(), "kept "+left[0])):
				t.Errorf("-keep: %v in %s; stderr:\n%s", left, tmp, errb.String())
			}
		})
	}
}
