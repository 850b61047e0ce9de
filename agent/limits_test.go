package agent

import (
	"context"
	"crypto/ed25519"
	"errors"
	"sync/atomic"
	"testing"

	"meshd/engine"
	"meshd/steward/grant"
	"meshd/wire"
)

// capped counts its serves and states a max_tokens cap.
type capped struct {
	countingBackend
	cap uint32
}

func (c *capped) TokenCap() uint32 { return c.cap }

// countingGrants refuses every grant, counting the calls: a serve
// refused for a limit must never reach it.
type countingGrants struct {
	pub   ed25519.PublicKey
	calls atomic.Int32
}

func (g *countingGrants) Authorise(context.Context, []byte, wire.ContentID, uint64) (*grant.Hold, error) {
	g.calls.Add(1)
	return nil, grant.ErrBudgetExhausted
}
func (g *countingGrants) Steward() ed25519.PublicKey { return g.pub }

func TestLimitsRefuseBeforeAnyWork(t *testing.T) {
	bs := refs(t, engine.ReferenceConfig{Name: "cheap", Fidelity: wire.F1, UJPerToken: 1},
		engine.ReferenceConfig{Name: "long", Fidelity: wire.F1, UJPerToken: 2, MaxTokens: 1 << 20})
	cheap := &capped{countingBackend: countingBackend{Backend: bs[0]}, cap: 100}
	long := &capped{countingBackend: countingBackend{Backend: bs[1]}, cap: 1000}
	a, _ := newAgent(t, nil, cheap, long)
	g := &countingGrants{pub: a.steward.Public()}
	if err := a.Reconfigure(Routes{Backends: []engine.Backend{cheap, long}, Grants: g, MaxCeilingUJ: 1_000_000}); err != nil {
		t.Fatal(err)
	}
	p := "bounded work"
	req := func(maxTokens uint32, ceiling uint64) wire.ServeRequest {
		r := promptReq(p, wire.F1, ceiling)
		r.MaxTokens = maxTokens
		return r
	}
	for _, tc := range []struct {
		name     string
		req      wire.ServeRequest
		backend  string
		field    string
		got, cap uint64
	}{
		{"over every backend", req(1001, 10_000), "", "max_tokens", 1001, 1000},
		{"past n_predict's int32", req(1<<31, 10_000), "", "max_tokens", 1 << 31, 1000},
		{"over the named backend", req(101, 10_000), "cheap", "max_tokens", 101, 100},
		{"ceiling over the cap", req(8, 1_000_001), "", "joule_ceiling_uj", 1_000_001, 1_000_000},
		{"ceiling of 2^64-1", req(8, 1<<64-1), "", "joule_ceiling_uj", 1<<64 - 1, 1_000_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := a.ServeWith(context.Background(), tc.req, []byte(p), Options{Grant: []byte("a grant"), Backend: tc.backend})
			var le *LimitError
			if !errors.As(err, &le) || !errors.Is(err, ErrOverLimit) || !errors.Is(err, wire.ErrBadRequest) {
				t.Fatalf("err = %v, want a LimitError", err)
			}
			if le.Field != tc.field || le.Got != tc.got || le.Cap != tc.cap {
				t.Fatalf("refusal %+v, want %s %d over %d", le, tc.field, tc.got, tc.cap)
			}
			if n := g.calls.Load(); n != 0 {
				t.Fatalf("the grant was asked for a hold %d times before the refusal", n)
			}
			if cheap.calls.Load()+long.calls.Load() != 0 {
				t.Fatal("an engine ran for a refused serve")
			}
		})
	}

	// A backend whose cap is below max_tokens is not weighed: the
	// cheaper one is passed over for the one that can serve.
	resp, err := a.Serve(context.Background(), req(500, 10_000), []byte(p))
	if err != nil {
		t.Fatal(err)
	}
	rc := resp.Sealed.Receipt
	if rc.Backend != "long" || rc.TokensOut != 500 || len(resp.Decision.Candidates) != 1 || cheap.calls.Load() != 0 {
		t.Fatalf("served on %s (%d out), weighed %+v", rc.Backend, rc.TokensOut, resp.Decision.Candidates)
	}
	// At the cap exactly, both are weighed and the cheaper serves.
	if resp, err = a.Serve(context.Background(), req(100, 10_000), []byte(p)); err != nil || resp.Sealed.Receipt.Backend != "cheap" {
		t.Fatalf("at the cap: %v", err)
	}
}

// The reference engine's documented default cap, and its own refusal of
// a request that reaches it past the agent.
func TestReferenceTokenCap(t *testing.T) {
	r := refs(t, engine.ReferenceConfig{Name: "r", Fidelity: wire.F1, UJPerToken: 1})[0]
	if c := r.(engine.TokenCapped).TokenCap(); c != engine.DefaultReferenceMaxTokens {
		t.Fatalf("default cap %d", c)
	}
	p := "x"
	q := promptReq(p, wire.F1, 1<<40)
	q.MaxTokens = engine.DefaultReferenceMaxTokens + 1
	if _, err := r.Serve(context.Background(), q, []byte(p)); !errors.Is(err, engine.ErrTooManyTokens) || !errors.Is(err, wire.ErrBadRequest) {
		t.Fatalf("reference over its cap: %v", err)
	}
}
