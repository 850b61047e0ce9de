package agent

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"meshd/engine"
	"meshd/steward"
	"meshd/wire"
)

type countingBackend struct {
	engine.Backend
	calls atomic.Int32
	fail  error
}

func (c *countingBackend) Serve(ctx context.Context, r wire.ServeRequest, p []byte) (engine.Result, error) {
	c.calls.Add(1)
	if c.fail != nil {
		return engine.Result{}, c.fail
	}
	return c.Backend.Serve(ctx, r, p)
}

// fakeMeter returns a fixed reading, standing in for shunt/ (which has its
// own register-level tests); here only the agent's mapping is under test.
type fakeMeter struct {
	reading wire.Reading
	err     error
}

func (m fakeMeter) Name() string                                { return m.reading.Metering.Meter }
func (m fakeMeter) Open(context.Context) (Window, error)        { return m, nil }
func (m fakeMeter) Close(context.Context) (wire.Reading, error) { return m.reading, m.err }

func newAgent(t *testing.T, meter Meter, bs ...engine.Backend) (*Agent, string) {
	t.Helper()
	k, err := steward.NewKeyFromSeed(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "r.log")
	l, _, err := steward.OpenLog(context.Background(), path, steward.LogOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	a, err := New(Config{Backends: bs, Meter: meter, Steward: steward.New(k, l, steward.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	return a, path
}

func promptReq(prompt string, floor wire.Fidelity, ceiling uint64) wire.ServeRequest {
	return wire.ServeRequest{PromptHash: wire.ContentOf([]byte(prompt)), PromptTokens: 4, MaxTokens: 6, FidelityFloor: floor, JouleCeilingUJ: ceiling}
}

func TestServeEstimator(t *testing.T) {
	bs := refs(t, engine.ReferenceConfig{Name: "tiny", Fidelity: wire.F1, UJPerToken: 10, Work: 2})
	a, _ := newAgent(t, nil, bs...)
	p := "one two three"
	resp, err := a.Serve(context.Background(), promptReq(p, wire.F1, 1000), []byte(p))
	if err != nil {
		t.Fatal(err)
	}
	r := resp.Sealed.Receipt
	// 3 words in, 6 out, 10 µJ/token: estimate 90 µJ, 15 µJ per accepted token.
	if r.TokensIn != 3 || r.TokensOut != 6 || r.EstimatedUJ != 90 || *r.UJPerAcceptedToken != 15 {
		t.Fatalf("receipt counters: %+v", r)
	}
	if r.EnergyProvenance != "Estimator" || r.MeasuredUJ != nil || r.MeterName() != EstimatorMeter {
		t.Fatalf("no meter must mean an honest Estimator receipt: %+v", r)
	}
	if strings.Contains(string(resp.Sealed.Envelope), p) {
		t.Fatal("the prompt leaked into the receipt")
	}
}

func TestServeMeterProvenance(t *testing.T) {
	meter := func(p wire.Provenance, e uint64) Meter {
		return fakeMeter{reading: wire.Reading{EnergyUJ: e, Provenance: p, Metering: evidence(p)}}
	}
	cases := []struct {
		name     string
		m        Meter
		prov     string
		measured bool
		charged  uint64
	}{
		{"covered window", meter(wire.HwShunt, 600), "HwShunt", true, 600},
		{"gappy window", meter(wire.ModelBased, 700), "ModelBased", false, 700},
		{"no samples", fakeMeter{err: wire.ErrNoMeasurement}, "Estimator", false, 90},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bs := refs(t, engine.ReferenceConfig{Name: "tiny", Fidelity: wire.F1, UJPerToken: 10, Work: 2})
			a, _ := newAgent(t, c.m, bs...)
			p := "one two three"
			resp, err := a.Serve(context.Background(), promptReq(p, wire.F0, 1000), []byte(p))
			if err != nil {
				t.Fatal(err)
			}
			r := resp.Sealed.Receipt
			e, _ := r.Energy()
			if r.EnergyProvenance != c.prov || (r.MeasuredUJ != nil) != c.measured || e.UJ() != c.charged {
				t.Fatalf("provenance %s measured %v charged %d; want %s %v %d", r.EnergyProvenance, r.MeasuredUJ, e.UJ(), c.prov, c.measured, c.charged)
			}
		})
	}
}

// evidence is what an honest INA226 window of provenance p carries.
func evidence(p wire.Provenance) wire.Metering {
	m := wire.Metering{Meter: "ina226@test", Kind: wire.KindADC, WindowNs: 2e6, ServeNs: 1e6, ErrorUJ: 3, Samples: 9,
		MaxGapNs: 1e6, CoveredPPM: wire.FullPPM, PeriodNs: 1.1e6, AccuracyPPM: 20000, Shared: 1}
	if p == wire.ModelBased {
		m.CoveredPPM = 800000
		m.ErrorUJ = 300
	}
	return m
}

// TestLyingMeterIsHeldToLess: a meter that claims HwShunt on evidence that
// does not support it (a point sampler, half the window uncovered, a bound
// beyond its accuracy, no meter at all) gets the receipt its evidence
// allows — ModelBased, or Estimator when even that is refused — never the
// claim, and never a failed serve.
func TestLyingMeterIsHeldToLess(t *testing.T) {
	cases := []struct {
		name string
		mut  func(*wire.Metering)
		want string
	}{
		// Named as no family meshd knows: an INA226 is never a point
		// meter (evidence rule 10).
		{"point sampler", func(m *wire.Metering) { m.Meter, m.Kind = "point@test", wire.KindPoint }, "ModelBased"},
		{"half covered", func(m *wire.Metering) { m.CoveredPPM = 500000 }, "ModelBased"},
		{"huge bound", func(m *wire.Metering) { m.ErrorUJ = 1e9 }, "ModelBased"},
		{"ten second gap", func(m *wire.Metering) { m.MaxGapNs = 10e9 }, "ModelBased"},
		{"shared", func(m *wire.Metering) { m.Shared = 4 }, "ModelBased"},
		{"estimator meter", func(m *wire.Metering) { m.Meter, m.Kind = "estimator", wire.KindEstimator }, "Estimator"},
		{"no samples", func(m *wire.Metering) { m.Samples = 0 }, "Estimator"},
		{"zero window", func(m *wire.Metering) { m.WindowNs, m.ServeNs = 0, 0 }, "Estimator"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := evidence(wire.HwShunt)
			c.mut(&m)
			bs := refs(t, engine.ReferenceConfig{Name: "tiny", Fidelity: wire.F1, UJPerToken: 10, Work: 2})
			a, path := newAgent(t, fakeMeter{reading: wire.Reading{EnergyUJ: 600, Provenance: wire.HwShunt, Metering: m}}, bs...)
			p := "one two three"
			resp, err := a.Serve(context.Background(), promptReq(p, wire.F0, 1000), []byte(p))
			if err != nil {
				t.Fatal(err)
			}
			if r := resp.Sealed.Receipt; r.EnergyProvenance != c.want || r.MeasuredUJ != nil {
				t.Fatalf("sealed %s (measured %v), want %s", r.EnergyProvenance, r.MeasuredUJ, c.want)
			}
			if _, err := steward.VerifyLog(context.Background(), path, steward.VerifyOptions{}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// unhealthy is a meter whose sensor has stalled.
type unhealthy struct{ fakeMeter }

func (unhealthy) Health() error { return errors.New("shunt ina226@test: no valid reading for 40ms") }

func TestRequireMeterRefusesWhileUnhealthy(t *testing.T) {
	bs := refs(t, engine.ReferenceConfig{Name: "tiny", Fidelity: wire.F1, UJPerToken: 10, Work: 2})
	k, _ := steward.NewKeyFromSeed(make([]byte, 32))
	st := steward.New(k, nil, steward.Options{})
	if _, err := New(Config{Backends: bs, Steward: st, RequireMeter: true}); err == nil {
		t.Fatal("RequireMeter without a meter accepted")
	}
	a, err := New(Config{Backends: bs, Steward: st, RequireMeter: true, Meter: unhealthy{}})
	if err != nil {
		t.Fatal(err)
	}
	p := "x"
	if _, err := a.Serve(context.Background(), promptReq(p, wire.F0, 1000), []byte(p)); !errors.Is(err, ErrUnmetered) || !strings.Contains(err.Error(), "40ms") {
		t.Fatalf("serve on an unhealthy meter: %v", err)
	}
	if bs[0].(*engine.Reference) == nil {
		t.Fatal("unreachable")
	}
}

// slotted records the order of slot, window and serve events.
type slotted struct {
	engine.Backend
	log *[]string
}

func (s slotted) Acquire(ctx context.Context) (context.Context, func(), error) {
	*s.log = append(*s.log, "acquire")
	return ctx, func() { *s.log = append(*s.log, "release") }, nil
}

func (s slotted) Serve(ctx context.Context, r wire.ServeRequest, p []byte) (engine.Result, error) {
	*s.log = append(*s.log, "serve")
	return s.Backend.Serve(ctx, r, p)
}

type loggingMeter struct {
	fakeMeter
	log *[]string
}

func (m loggingMeter) Open(ctx context.Context) (Window, error) {
	*m.log = append(*m.log, "open")
	return m, nil
}

func (m loggingMeter) Close(ctx context.Context) (wire.Reading, error) {
	*m.log = append(*m.log, "close")
	return m.reading, m.err
}

// TestSlotAcquiredBeforeTheWindow: queueing for the engine is never inside
// the metered window.
func TestSlotAcquiredBeforeTheWindow(t *testing.T) {
	var log []string
	b := slotted{refs(t, engine.ReferenceConfig{Name: "tiny", Fidelity: wire.F1, UJPerToken: 10, Work: 2})[0], &log}
	m := loggingMeter{fakeMeter{reading: wire.Reading{EnergyUJ: 600, Provenance: wire.HwShunt, Metering: evidence(wire.HwShunt)}}, &log}
	a, _ := newAgent(t, m, b)
	p := "x"
	if _, err := a.Serve(context.Background(), promptReq(p, wire.F0, 1000), []byte(p)); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(log, ","); got != "acquire,open,serve,close,release" {
		t.Fatalf("order %s", got)
	}
}

// TestRouterLearnsFromMeasuredReceipts: after three measured receipts the
// router weighs a backend at the median measured µJ/token and says so.
func TestRouterLearnsFromMeasuredReceipts(t *testing.T) {
	bs := refs(t, engine.ReferenceConfig{Name: "tiny", Fidelity: wire.F1, UJPerToken: 10, Work: 2})
	// 9 tokens per serve (3 in, 6 out) at 900 µJ: 100 µJ/token measured.
	a, _ := newAgent(t, fakeMeter{reading: wire.Reading{EnergyUJ: 900, Provenance: wire.HwShunt, Metering: evidence(wire.HwShunt)}}, bs...)
	p := "one two three"
	for i := range 4 {
		resp, err := a.Serve(context.Background(), promptReq(p, wire.F0, 1e6), []byte(p))
		if err != nil {
			t.Fatal(err)
		}
		route := resp.Sealed.Receipt.Route
		want := "configured 10 µJ/token"
		if i == 3 {
			want = "learned 100 µJ/token (median of 3 measured receipts)"
		}
		if !strings.Contains(route, want) {
			t.Fatalf("serve %d route %q, want %q", i, route, want)
		}
	}
}

func TestServeFailuresSealNothing(t *testing.T) {
	crash := &countingBackend{Backend: refs(t, engine.ReferenceConfig{Name: "x", Fidelity: wire.F2, UJPerToken: 1})[0], fail: errors.New("engine exited: signal: killed")}
	a, path := newAgent(t, nil, crash)
	p := "hello"
	_, err := a.Serve(context.Background(), promptReq(p, wire.F1, 1000), []byte(p))
	var se *ServeError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("engine crash: %v", err)
	}
	// Refused before any engine work.
	_, err = a.Serve(context.Background(), promptReq(p, wire.F4, 1000), []byte(p))
	if !errors.Is(err, ErrNoRoute) || crash.calls.Load() != 1 {
		t.Fatalf("no-route: %v, engine calls %d", err, crash.calls.Load())
	}
	// A prompt that does not match its hash.
	if _, err := a.Serve(context.Background(), promptReq(p, wire.F1, 1000), []byte("other")); !errors.Is(err, wire.ErrBadRequest) {
		t.Fatalf("mismatched prompt: %v", err)
	}
	rep, err := steward.VerifyLog(context.Background(), path, steward.VerifyOptions{})
	if err != nil || rep.Records != 0 {
		t.Fatalf("failed serves sealed receipts: %v %+v", err, rep)
	}
}

func TestServeCancelled(t *testing.T) {
	bs := refs(t, engine.ReferenceConfig{Name: "slow", Fidelity: wire.F1, UJPerToken: 1, Work: 1 << 16})
	a, _ := newAgent(t, nil, bs...)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	p := "x"
	r := promptReq(p, wire.F0, 1e9)
	r.MaxTokens = 1000
	if _, err := a.Serve(ctx, r, []byte(p)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cancelled serve: %v", err)
	}
}

func TestDuplicateBackendNames(t *testing.T) {
	bs := refs(t, engine.ReferenceConfig{Name: "a", Fidelity: wire.F1, UJPerToken: 1}, engine.ReferenceConfig{Name: "a", Fidelity: wire.F2, UJPerToken: 1})
	k, _ := steward.NewKeyFromSeed(make([]byte, 32))
	if _, err := New(Config{Backends: bs, Steward: steward.New(k, nil, steward.Options{})}); err == nil {
		t.Fatal("duplicate backend names accepted")
	}
}
