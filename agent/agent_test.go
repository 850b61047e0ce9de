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
		return fakeMeter{reading: wire.Reading{EnergyUJ: e, Provenance: p, Metering: wire.Metering{Meter: "ina226@test", WindowNs: 1e6, ErrorUJ: 3, Samples: 9}}}
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
