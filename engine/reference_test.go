package engine

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"meshd/wire"
)

func refReq(prompt string, max uint32) wire.ServeRequest {
	return wire.ServeRequest{PromptHash: wire.ContentOf([]byte(prompt)), PromptTokens: 1, MaxTokens: max, FidelityFloor: wire.F0, JouleCeilingUJ: 1}
}

func TestReferenceDeterministic(t *testing.T) {
	r, err := NewReference(ReferenceConfig{Name: "r", Fidelity: wire.F1, UJPerToken: 5, Work: 3})
	if err != nil {
		t.Fatal(err)
	}
	a, err := r.Serve(context.Background(), refReq("x", 12), []byte("three little words"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := r.Serve(context.Background(), refReq("x", 12), []byte("three little words"))
	c, _ := r.Serve(context.Background(), refReq("x", 12), []byte("another prompt"))
	if !bytes.Equal(a.Output, b.Output) || bytes.Equal(a.Output, c.Output) {
		t.Fatalf("output must be a function of the prompt: %q %q %q", a.Output, b.Output, c.Output)
	}
	want := wire.ServeOutcome{TokensIn: 3, TokensOut: 12, TokensAccepted: 12}
	if a.Outcome != want || len(bytes.Fields(a.Output)) != 12 {
		t.Fatalf("outcome %+v output %q", a.Outcome, a.Output)
	}
	// The work knob changes the tokens (more hashing per token), so a
	// heavier backend is not the light one under another name.
	h, _ := NewReference(ReferenceConfig{Name: "h", Fidelity: wire.F1, UJPerToken: 5, Work: 4})
	d, _ := h.Serve(context.Background(), refReq("x", 12), []byte("three little words"))
	if bytes.Equal(a.Output, d.Output) {
		t.Fatal("work factor has no effect on the computation")
	}
}

func TestReferenceRefusesAndCancels(t *testing.T) {
	for _, c := range []ReferenceConfig{
		{Fidelity: wire.F1, UJPerToken: 1, Work: 1},
		{Name: "x", Fidelity: 9, UJPerToken: 1, Work: 1},
		{Name: "x", Fidelity: wire.F1, Work: 1},
		{Name: "x", Fidelity: wire.F1, UJPerToken: 1},
	} {
		if _, err := NewReference(c); err == nil {
			t.Errorf("config %+v accepted", c)
		}
	}
	r, _ := NewReference(ReferenceConfig{Name: "r", Fidelity: wire.F1, UJPerToken: 5, Work: 1})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.Serve(ctx, refReq("x", 4), []byte("p")); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled serve: %v", err)
	}
}
