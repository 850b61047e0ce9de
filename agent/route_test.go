package agent

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"meshd/engine"
	"meshd/steward"
	"meshd/wire"
)

// flaky is a backend that fails every serve and then reports itself
// unhealthy, as a forwarded node that stopped answering does; emitFirst
// makes it stream a piece of output before it fails.
type flaky struct {
	engine.Backend
	down      atomic.Bool
	calls     atomic.Int32
	emitFirst bool
}

func (f *flaky) Serve(ctx context.Context, r wire.ServeRequest, p []byte) (engine.Result, error) {
	return f.ServeWith(ctx, r, p, engine.Options{})
}

func (f *flaky) ServeWith(ctx context.Context, r wire.ServeRequest, p []byte, opts engine.Options) (engine.Result, error) {
	f.calls.Add(1)
	f.down.Store(true)
	if f.emitFirst && opts.Emit != nil {
		if err := opts.Emit([]byte("half an answer")); err != nil {
			return engine.Result{}, err
		}
	}
	return engine.Result{}, errors.New("connection refused")
}

func (f *flaky) Health() error {
	if f.down.Load() {
		return errors.New("failed; passed over for 10s more")
	}
	return nil
}

// receiptRoute opens the sealed envelope as a verifier would and returns
// the candidates it proves.
func receiptRoute(t *testing.T, a *Agent, resp *Response) (*steward.Receipt, []steward.Candidate) {
	t.Helper()
	o, err := steward.OpenEnvelope(resp.Sealed.Envelope, a.steward.Public())
	if err != nil {
		t.Fatalf("the sealed receipt does not verify: %v", err)
	}
	cs, err := o.Receipt.Candidates()
	if err != nil || cs == nil {
		t.Fatalf("x_route_candidates: %v %v", cs, err)
	}
	return o.Receipt, cs
}

func TestReceiptRecordsTheRoute(t *testing.T) {
	sick := &flaky{Backend: refs(t, engine.ReferenceConfig{Name: "sick tiny; F1", Fidelity: wire.F0, UJPerToken: 1})[0]}
	sick.down.Store(true)
	bs := append([]engine.Backend{sick}, refs(t,
		engine.ReferenceConfig{Name: "mid", Fidelity: wire.F2, UJPerToken: 50},    // est 500
		engine.ReferenceConfig{Name: "mid2", Fidelity: wire.F3, UJPerToken: 50},   // est 500, the tie
		engine.ReferenceConfig{Name: "large", Fidelity: wire.F4, UJPerToken: 400}, // est 4000
	)...)
	a, _ := newAgent(t, nil, bs...)
	p := "route me"
	resp, err := a.Serve(context.Background(), promptReq(p, wire.F1, 3999), []byte(p))
	if err != nil {
		t.Fatal(err)
	}
	r, cs := receiptRoute(t, a, resp)
	if r.Backend != "mid" || r.CeilingUJ == nil || *r.CeilingUJ != 3999 {
		t.Fatalf("served %s with x_ceiling_uj %v", r.Backend, r.CeilingUJ)
	}
	// Below the floor, though also unhealthy: the verdict a reader can
	// check from the numbers wins.
	want := []steward.Candidate{
		{Backend: "sick tiny; F1", Fidelity: wire.F0, EstTotalUJ: 10, Verdict: steward.VerdictBelowFloor},
		{Backend: "mid", Fidelity: wire.F2, EstTotalUJ: 500, Verdict: steward.VerdictAdmissible},
		{Backend: "mid2", Fidelity: wire.F3, EstTotalUJ: 500, Verdict: steward.VerdictAdmissible},
		{Backend: "large", Fidelity: wire.F4, EstTotalUJ: 4000, Verdict: steward.VerdictOverCeiling},
	}
	if len(cs) != len(want) {
		t.Fatalf("%d candidates, want %d: %q", len(cs), len(want), *r.RouteCandidates)
	}
	for i := range want {
		if cs[i] != want[i] {
			t.Errorf("candidate %d: %+v, want %+v", i, cs[i], want[i])
		}
		if d := resp.Decision.Candidates[i]; d.Backend != cs[i].Backend || d.EstTotalUJ != cs[i].EstTotalUJ || d.Verdict != cs[i].Verdict {
			t.Errorf("candidate %d sealed as %+v, decided as %+v", i, cs[i], d)
		}
	}

	// Naming a backend weighs only that one, and the receipt says so.
	resp, err = a.ServeWith(context.Background(), promptReq(p, wire.F1, 1e6), []byte(p), Options{Backend: "large"})
	if err != nil {
		t.Fatal(err)
	}
	if _, cs := receiptRoute(t, a, resp); len(cs) != 1 || cs[0].Backend != "large" || cs[0].Verdict != steward.VerdictAdmissible {
		t.Fatalf("named backend's candidates: %+v", cs)
	}
}

// The estimate a candidate lists is the one the router used: learned from
// receipts once there are three.
func TestCandidatesCarryTheLearnedEstimate(t *testing.T) {
	bs := refs(t, engine.ReferenceConfig{Name: "tiny", Fidelity: wire.F1, UJPerToken: 10, Work: 2})
	// 9 tokens per serve at 900 µJ: 100 µJ/token measured; the request
	// weighs 4 + 6 tokens.
	a, _ := newAgent(t, fakeMeter{reading: wire.Reading{EnergyUJ: 900, Provenance: wire.HwShunt, Metering: evidence(wire.HwShunt)}}, bs...)
	p := "one two three"
	for i, want := range []uint64{100, 100, 100, 1000} {
		resp, err := a.Serve(context.Background(), promptReq(p, wire.F0, 1e6), []byte(p))
		if err != nil {
			t.Fatal(err)
		}
		if _, cs := receiptRoute(t, a, resp); cs[0].EstTotalUJ != want {
			t.Fatalf("serve %d lists est %d µJ, want %d", i, cs[0].EstTotalUJ, want)
		}
	}
}

func TestFallbackIsOnTheReceipt(t *testing.T) {
	ref := func(name string, per uint64) engine.Backend {
		return refs(t, engine.ReferenceConfig{Name: name, Fidelity: wire.F2, UJPerToken: per})[0]
	}
	p := "fall back"
	t.Run("failed node, next cheapest serves", func(t *testing.T) {
		cheap := &flaky{Backend: ref("cheap", 10)}
		a, _ := newAgent(t, nil, ref("dear", 50), cheap, ref("dearer", 60))
		resp, err := a.Serve(context.Background(), promptReq(p, wire.F1, 1e6), []byte(p))
		if err != nil {
			t.Fatal(err)
		}
		r, cs := receiptRoute(t, a, resp)
		if r.Backend != "dear" || cs[1].Verdict != steward.VerdictFailed || cs[0].Verdict != steward.VerdictAdmissible || cs[2].Verdict != steward.VerdictAdmissible {
			t.Fatalf("served %s, candidates %q", r.Backend, *r.RouteCandidates)
		}
		if !strings.Contains(r.Route, "dear: cheapest of 2 admissible (of 3 weighed) after 1 failed") ||
			!strings.HasPrefix(resp.Decision.Candidates[1].Reason, "failed: connection refused") {
			t.Fatalf("route %q, reason %q", r.Route, resp.Decision.Candidates[1].Reason)
		}
		// The next serve does not try it: it is passed over as unhealthy.
		resp, err = a.Serve(context.Background(), promptReq(p, wire.F1, 1e6), []byte(p))
		if err != nil {
			t.Fatal(err)
		}
		if _, cs := receiptRoute(t, a, resp); cs[1].Verdict != steward.VerdictUnhealthy || cheap.calls.Load() != 1 {
			t.Fatalf("second serve: candidates %+v, %d calls to the failed node", cs, cheap.calls.Load())
		}
	})
	t.Run("every admissible backend fails", func(t *testing.T) {
		a, path := newAgent(t, nil, &flaky{Backend: ref("one", 10)}, &flaky{Backend: ref("two", 20)})
		_, err := a.Serve(context.Background(), promptReq(p, wire.F1, 1e6), []byte(p))
		var se *ServeError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), "on two: connection refused") || se.Decision.Failed != 1 {
			t.Fatalf("serve: %v", err)
		}
		if rep, err := steward.VerifyLog(context.Background(), path, steward.VerifyOptions{}); err != nil || rep.Records != 0 {
			t.Fatalf("a failed serve sealed: %v %+v", err, rep)
		}
	})
	t.Run("a failure that leaves the backend healthy is the serve's", func(t *testing.T) {
		crash := &countingBackend{Backend: ref("cheap", 10), fail: errors.New("prompt too long")}
		dear := &countingBackend{Backend: ref("dear", 50)}
		a, _ := newAgent(t, nil, crash, dear)
		if _, err := a.Serve(context.Background(), promptReq(p, wire.F1, 1e6), []byte(p)); err == nil || dear.calls.Load() != 0 {
			t.Fatalf("serve: %v, %d calls to the next backend", err, dear.calls.Load())
		}
	})
	t.Run("no fallback once the caller has output", func(t *testing.T) {
		dear := &countingBackend{Backend: ref("dear", 50)}
		a, _ := newAgent(t, nil, &flaky{Backend: ref("cheap", 10), emitFirst: true}, dear)
		var got []string
		_, err := a.ServeWith(context.Background(), promptReq(p, wire.F1, 1e6), []byte(p), Options{Engine: engine.Options{Emit: func(b []byte) error {
			got = append(got, string(b))
			return nil
		}}})
		if err == nil || dear.calls.Load() != 0 || len(got) != 1 {
			t.Fatalf("serve: %v, %d calls to the next backend, output %q", err, dear.calls.Load(), got)
		}
	})
}
