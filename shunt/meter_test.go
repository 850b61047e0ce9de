package shunt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"meshd/drivers"
	"meshd/drivers/drivertest"
	"meshd/wire"

	"periph.io/x/conn/v3/physic"
)

// gated is a sensor whose every reading the test hands over: the sampler
// records exactly what the test sends, when it sends it.
type gated struct {
	info   drivers.Info
	feed   chan result2
	closed int
	mu     sync.Mutex
}

type result2 struct {
	smp drivers.Sample
	err error
}

func newGated(period time.Duration) *gated {
	return &gated{feed: make(chan result2), info: drivers.Info{
		Kind: drivers.KindConversion, Period: period, MaxPeriod: period * 11 / 10,
		Accuracy: drivers.Accuracy{GainErr: 0.001,
			FullScale: func(physic.ElectricPotential) physic.Power { return 20 * physic.Watt },
			MaxPower:  20 * physic.Watt},
	}}
}

func (g *gated) Name() string       { return "gated@test" }
func (g *gated) Info() drivers.Info { return g.info }
func (g *gated) Close() error {
	g.mu.Lock()
	g.closed++
	g.mu.Unlock()
	return nil
}
func (g *gated) Next(ctx context.Context) (drivers.Sample, error) {
	select {
	case <-ctx.Done():
		return drivers.Sample{}, ctx.Err()
	case r := <-g.feed:
		return r.smp, r.err
	}
}

// conv sends conversion i (of the gated period, from origin) at 5 W.
func (g *gated) conv(origin time.Time, i int, contiguous bool) {
	p := g.info.Period
	g.feed <- result2{smp: drivers.Sample{
		Start: origin.Add(time.Duration(i) * p), End: origin.Add(time.Duration(i+1) * p),
		Uncertainty: 10 * time.Microsecond, Contiguous: contiguous, Power: 5 * physic.Watt, Bus: 12 * physic.Volt,
	}}
}

func never(time.Duration) <-chan time.Time { return nil }

func newGatedMeter(t *testing.T, g *gated, clock *drivertest.Clock, log *slog.Logger) *Meter {
	t.Helper()
	m, err := New(context.Background(), g, MeterConfig{Config: Config{Now: clock.Now, Epoch: clock.Now()}, Logger: log, After: never})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// TestCloseWaitsForTheClosingConversion: Close returns only once the
// conversion that surely ends past the window is recorded, and the window
// is then HwShunt over whole conversions.
func TestCloseWaitsForTheClosingConversion(t *testing.T) {
	clock := drivertest.NewClock(drivertest.Epoch, false)
	g := newGated(10 * time.Millisecond)
	m := newGatedMeter(t, g, clock, nil)
	origin := clock.Now()
	for i := range 5 {
		g.conv(origin, i, i > 0)
	}
	clock.Set(origin.Add(52 * time.Millisecond))
	w, err := m.Open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	clock.Set(origin.Add(73 * time.Millisecond))
	done := make(chan wire.Reading)
	go func() {
		r, err := w.Close(context.Background())
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	g.conv(origin, 5, true) // ends at 60 ms
	g.conv(origin, 6, true) // ends at 70 ms: still before the window's end
	select {
	case <-done:
		t.Fatal("Close returned before a reading ended past the window")
	default:
	}
	g.conv(origin, 7, true) // ends at 80 ms
	r := <-done
	if r.Provenance != wire.HwShunt || r.Metering.WindowNs != uint64(30*time.Millisecond) || r.EnergyUJ != 150000 {
		t.Fatalf("%v %d µJ over %d ns", r.Provenance, r.EnergyUJ, r.Metering.WindowNs)
	}
	if _, err := w.Close(context.Background()); err == nil {
		t.Fatal("a window closed twice")
	}
}

// TestStallIsLoggedAndCounted: a sensor reporting ErrStalled is logged once
// as stalled, counted, and logged again when it recovers.
func TestStallIsLoggedAndCounted(t *testing.T) {
	var buf syncBuffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	clock := drivertest.NewClock(drivertest.Epoch, false)
	g := newGated(10 * time.Millisecond)
	m := newGatedMeter(t, g, clock, log)
	origin := clock.Now()
	g.conv(origin, 0, false)
	stall := fmt.Errorf("gated@test: no ready flag for 33ms: %w", drivers.ErrStalled)
	g.feed <- result2{err: stall}
	g.feed <- result2{err: stall}
	g.conv(origin, 5, false)
	g.conv(origin, 6, true) // the sampler has recorded the recovery once this is taken
	if st := m.Stats(); st.Stalls != 2 || !errors.Is(st.LastErr, drivers.ErrStalled) {
		t.Fatalf("stats %+v", st)
	}
	out := buf.String()
	if strings.Count(out, "meter stalled") != 1 || strings.Count(out, "meter recovered") != 1 {
		t.Fatalf("log:\n%s", out)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestReadyAndClose: Ready waits for the first valid reading and fails,
// naming the last error, when the sampler stops first; Close is
// idempotent and closes the sensor once.
func TestReadyAndClose(t *testing.T) {
	clock := drivertest.NewClock(drivertest.Epoch, false)
	g := newGated(10 * time.Millisecond)
	m := newGatedMeter(t, g, clock, nil)
	nack := result2{err: errors.New("read register 0x06: i2c: no acknowledge")}
	g.feed <- nack
	// The sampler asks for the next reading only after recording the
	// last: once this second one is taken, the first is recorded.
	g.feed <- nack
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := m.Ready(ctx); err == nil || !strings.Contains(err.Error(), "no acknowledge") {
		t.Fatalf("Ready = %v", err)
	}
	g.conv(clock.Now(), 0, false)
	if err := m.Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
	m.Close()
	m.Close()
	if g.closed != 1 || m.Running() {
		t.Fatalf("closed %d times, running %v", g.closed, m.Running())
	}
	if _, err := m.Open(context.Background()); err == nil {
		t.Fatal("opened a window on a stopped meter")
	}
}

func TestNewRejectsBadSensors(t *testing.T) {
	good := newGated(time.Millisecond).info
	cases := map[string]func(*drivers.Info){
		"period":     func(i *drivers.Info) { i.Period = 0 },
		"longest":    func(i *drivers.Info) { i.MaxPeriod = i.Period / 2 },
		"kind":       func(i *drivers.Info) { i.Kind = 0 },
		"gain":       func(i *drivers.Info) { i.Accuracy.GainErr = 1 },
		"full scale": func(i *drivers.Info) { i.Accuracy.FullScale = nil },
	}
	for name, mut := range cases {
		info := good
		mut(&info)
		if _, err := NewSeries("x", info, Config{}); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
