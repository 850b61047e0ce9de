package node

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"meshd/agent"
	"meshd/agent/config"
	"meshd/drivers"
	"meshd/drivers/drivertest"
	"meshd/shunt"
	"meshd/shunt/shunttest"
	"meshd/steward"
	"meshd/wire"
)

// ina3221Sim is channel 1 of a Jetson's INA3221 (VDD_IN: 5 mΩ, 19.072 V)
// on a fake sysfs tree: it converts back to back, 3 × (1.1 + 1.1) ms per
// window, and at each completion its attribute files take the exact mean
// of the load over that window, with a gain and offset error inside the
// datasheet's (0.25 % each, 80 µV), scaled as ina3221.c scales them. The
// other two channels move at the same completions, as a CPU/GPU rail does.
type ina3221Sim struct {
	t        *testing.T
	dir      string
	epoch    time.Time
	tau      int64 // ns
	phase    int64 // ns
	step     int64 // ns, the load's step
	cum      []float64
	written  int64
	siblings *rand.Rand
}

func newINA3221Sim(t *testing.T, dir string, epoch time.Time, watts float64, length time.Duration) *ina3221Sim {
	rng := rand.New(rand.NewPCG(20, 3221))
	c := &ina3221Sim{t: t, dir: dir, epoch: epoch, tau: int64(6600 * time.Microsecond), phase: 1_234_567,
		step: int64(time.Millisecond), written: math.MinInt64, siblings: rand.New(rand.NewPCG(21, 3221))}
	var e float64
	for i := int64(0); i < int64(length)/c.step; i++ {
		e += (watts + 0.5*(2*rng.Float64()-1)) * float64(c.step) // a steady load with a 0.5 W, 1 ms ripple; nJ
		c.cum = append(c.cum, e)
	}
	return c
}

// energy is the load's exact energy from the epoch to t ns, nJ.
func (c *ina3221Sim) energy(t int64) float64 {
	i := t / c.step
	if i >= int64(len(c.cum)) {
		c.t.Fatalf("the simulated load ends at %v", time.Duration(int64(len(c.cum))*c.step))
	}
	prev := 0.0
	if i > 0 {
		prev = c.cum[i-1]
	}
	return prev + (c.cum[i]-prev)*float64(t-i*c.step)/float64(c.step)
}

func (c *ina3221Sim) refresh(now time.Time) {
	t := now.Sub(c.epoch).Nanoseconds()
	k := (t - c.phase) / c.tau
	if t < c.phase+c.tau || k == c.written {
		return
	}
	c.written = k
	end := c.phase + k*c.tau
	w := (c.energy(end) - c.energy(end-c.tau)) / float64(c.tau) // W
	const bus, shuntUOhm, gain, vosUV = 19.072, 5000.0, 0.002, 30.0
	amps := w/bus*(1+gain) + vosUV*1e-6/(shuntUOhm*1e-6)
	reg := math.Round(amps * shuntUOhm * 1e-6 / 40e-6)
	files := map[string]string{
		"in1_input": strconv.Itoa(int(math.Round(bus/8e-3)) * 8), "in4_input": strconv.Itoa(int(reg) * 40),
		"curr1_input": strconv.Itoa(int(math.Round(reg * 40000 / shuntUOhm))),
	}
	for ch := 2; ch <= 3; ch++ {
		files[fmt.Sprintf("in%d_input", ch)] = strconv.Itoa(8 * (2383 + c.siblings.IntN(3)))
		files[fmt.Sprintf("in%d_input", ch+3)] = strconv.Itoa(40 * (20 + c.siblings.IntN(60)))
	}
	for f, v := range files {
		if err := os.WriteFile(filepath.Join(c.dir, f), []byte(v+"\n"), 0o644); err != nil {
			c.t.Error(err)
		}
	}
}

// chipClock is the driver's clock: the simulated clock, with the chip's
// files brought up to date whenever the driver looks at the time (the
// sampler is the only reader, so the files change only between reads).
type chipClock struct {
	*drivertest.Clock
	chip *ina3221Sim
}

func (c chipClock) Now() time.Time {
	now := c.Clock.Now()
	c.chip.refresh(now)
	return now
}

var _ drivers.Clock = chipClock{}

// runClock lets the sampler run until the clock reaches until, one sleep
// at a time: the clock moves only while the sampler sleeps.
func runClock(ctx context.Context, clock *drivertest.Clock, until time.Time) error {
	for {
		if err := clock.WaitSleepers(ctx, 1); err != nil {
			return err
		}
		if !clock.Now().Before(until) {
			return nil
		}
		clock.AdvanceToNext()
	}
}

// steadyServe holds the engine's work for a simulated second: before the
// window closes the clock runs on, then keeps running while Close waits for
// the reading past the window's end. It records the window's ends.
type steadyServe struct {
	agent.Meter
	clock  *drivertest.Clock
	length time.Duration
	t0, t1 *time.Time
	ends   *endSignal
}

// endSignal tells the test when the window has read its end from the
// meters' clock, so that the clock moves on only after it: the window is
// then exactly [t0, t1].
type endSignal struct {
	armed atomic.Bool
	read  chan struct{}
}

// now is the meters' clock.
func (e *endSignal) now(clock *drivertest.Clock) func() time.Time {
	return func() time.Time {
		t := clock.Now()
		if e.armed.CompareAndSwap(true, false) {
			close(e.read)
		}
		return t
	}
}

func (m steadyServe) Open(ctx context.Context) (agent.Window, error) {
	*m.t0 = m.clock.Now()
	w, err := m.Meter.Open(ctx)
	if err != nil {
		return nil, err
	}
	return steadyWindow{w, m}, nil
}

type steadyWindow struct {
	agent.Window
	m steadyServe
}

func (w steadyWindow) Close(ctx context.Context) (wire.Reading, error) {
	if err := runClock(ctx, w.m.clock, w.m.t0.Add(w.m.length)); err != nil {
		return wire.Reading{}, err
	}
	*w.m.t1 = w.m.clock.Now()
	// The sampler sleeps until the clock moves, so the first read of the
	// meters' clock from here on is the window's end.
	w.m.ends.read = make(chan struct{})
	w.m.ends.armed.Store(true)
	return shunttest.CloseDriving(ctx, w.Window.Close, func(closed <-chan struct{}) error {
		select {
		case <-w.m.ends.read:
		case <-closed:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := w.m.clock.WaitSleepers(ctx, 1); err != nil {
			return err
		}
		w.m.clock.AdvanceToNext()
		return nil
	})
}

// TestHwmonAveragedServe is the whole path for a point meter that averages:
// an INA3221 rail on a fake sysfs tree, configured as a [[meter]] with
// hwmon_root, opened by the node with the real hwmon driver, sampled by the
// sampler under the averaged-reading model, and a steady 1 s, 12 W serve
// sealed. The receipt must be ModelBased from a point meter, carry
// x_stat_uj beside a bound within 10 % of the figure, and the bound must
// contain the load's exact energy.
func TestHwmonAveragedServe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // reports a hang only
	defer cancel()
	root := filepath.Join(t.TempDir(), "hwmon")
	if err := os.CopyFS(root, os.DirFS("../../drivers/hwmon/testdata/hwmon")); err != nil {
		t.Fatal(err)
	}
	clock := drivertest.NewClock(drivertest.Epoch, false)
	chip := newINA3221Sim(t, filepath.Join(root, "hwmon1"), drivertest.Epoch, 12, 5*time.Second)
	cfg := parse(t, t.TempDir(), fmt.Sprintf(`
[[meter]]
name = "vdd"
driver = "hwmon"
rail = "VDD_IN"
hwmon_root = %q

[[backend]]
name = "ref"
kind = "reference"
fidelity = 1
uj_per_token = 10
meters = ["vdd"]
`, root))
	var t0, t1 time.Time
	ends := &endSignal{}
	opts := Options{
		OpenSensor: func(ctx context.Context, m config.Meter) (drivers.Sensor, error) {
			return OpenSensor(ctx, m, chipClock{clock, chip})
		},
		MeterConfig: shunt.MeterConfig{Config: shunt.Config{Now: ends.now(clock)}, After: func(time.Duration) <-chan time.Time { return nil }},
		Clock:       clock.Now,
		WrapMeter: func(m agent.Meter) agent.Meter {
			return steadyServe{Meter: m, clock: clock, length: time.Second, t0: &t0, t1: &t1, ends: ends}
		},
	}
	// The node waits for the meter's first readings while it opens: run
	// the clock meanwhile, 200 ms of readings before the serve.
	started := make(chan error, 1)
	go func() { started <- runClock(ctx, clock, drivertest.Epoch.Add(200*time.Millisecond)) }()
	n, err := Open(ctx, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close(context.Background())
	if err := <-started; err != nil {
		t.Fatal(err)
	}

	p := []byte("a steady second on VDD_IN")
	req := wire.ServeRequest{PromptHash: wire.ContentOf(p), PromptTokens: 6, MaxTokens: 8, FidelityFloor: 1, JouleCeilingUJ: 1e12}
	resp, err := n.Agent.Serve(ctx, req, p)
	if err != nil {
		t.Fatal(err)
	}
	// What a verifier sees: the envelope opened under the steward's key.
	op, err := steward.OpenEnvelope(resp.Sealed.Envelope, n.Key.Public())
	if err != nil {
		t.Fatal(err)
	}
	r := op.Receipt
	if r.EnergyProvenance != wire.ModelBased.String() || r.MeterKind == nil || *r.MeterKind != wire.KindPoint {
		t.Fatalf("provenance %s, kind %v: want ModelBased from a point meter", r.EnergyProvenance, r.MeterKind)
	}
	if r.StatUJ == nil || r.ErrorUJ == nil || r.ServeNs == nil {
		t.Fatalf("x_stat_uj %v, x_error_uj %v, x_serve_ns %v: want all sealed", r.StatUJ, r.ErrorUJ, r.ServeNs)
	}
	if serve := time.Duration(*r.ServeNs); serve != t1.Sub(t0) || serve < time.Second {
		t.Fatalf("x_serve_ns %v, want the window's %v", serve, t1.Sub(t0))
	}
	figure, bound, stat := float64(r.EstimatedUJ), float64(*r.ErrorUJ), float64(*r.StatUJ)
	truth := (chip.energy(t1.Sub(drivertest.Epoch).Nanoseconds()) - chip.energy(t0.Sub(drivertest.Epoch).Nanoseconds())) / 1e3
	t.Logf("steady 1 s serve on %s: figure %.0f µJ, truth %.0f µJ, x_error_uj %.0f (%.2f%%), x_stat_uj %.0f (%.3f%%), %d samples",
		*r.Meter, figure, truth, bound, 100*bound/figure, stat, 100*stat/figure, *r.Samples)
	if math.Abs(figure-truth) > bound {
		t.Errorf("figure %.0f µJ is %.0f µJ from the truth %.0f µJ, beyond x_error_uj %.0f", figure, figure-truth, truth, bound)
	}
	if bound > 0.10*figure {
		t.Errorf("x_error_uj %.0f µJ is %.2f%% of the figure, want ≤ 10%%", bound, 100*bound/figure)
	}
	if stat <= 0 || stat >= bound {
		t.Errorf("x_stat_uj %.0f µJ: want a positive statistic of a rippling load, apart from and below the bound %.0f µJ", stat, bound)
	}
}
