package agent

import (
	"context"
	"errors"
	"testing"

	"meshd/engine"
	"meshd/wire"
)

// TestEmbeddingServesRouteApart: an embedding serve weighs only the
// embedding backends and any other serve only the rest, however cheap
// the other kind is; a serve with no backend of its kind is a bad
// request before any work; Chosen names the backend before the engine
// runs, and Stopped comes back from the engine.
func TestEmbeddingServesRouteApart(t *testing.T) {
	bs := refs(t,
		engine.ReferenceConfig{Name: "embed", Fidelity: wire.F1, UJPerToken: 1, Work: 1, Embedding: true},
		engine.ReferenceConfig{Name: "gen", Fidelity: wire.F1, UJPerToken: 50, Work: 1})
	a, _ := newAgent(t, nil, bs...)
	ctx := context.Background()

	texts := []byte(`["a watt","a joule"]`)
	req := wire.ServeRequest{PromptHash: wire.ContentOf(texts), PromptTokens: 4, MaxTokens: 2, FidelityFloor: wire.F0, JouleCeilingUJ: 1_000_000}
	var chosen []string
	resp, err := a.ServeWith(ctx, req, texts, Options{Engine: engine.Options{Embed: true}, Chosen: func(b string) { chosen = append(chosen, b) }})
	if err != nil {
		t.Fatal(err)
	}
	if rc := resp.Sealed.Receipt; rc.Backend != "embed" || rc.TokensOut != 2 || len(resp.Decision.Candidates) != 1 {
		t.Fatalf("embedding serve on %s, tokens_out %d, %d candidates", rc.Backend, rc.TokensOut, len(resp.Decision.Candidates))
	}
	if len(chosen) != 1 || chosen[0] != "embed" {
		t.Fatalf("Chosen told %v", chosen)
	}

	p := []byte("continue this")
	preq := promptReq("continue this", wire.F0, 1_000_000)
	resp, err = a.ServeWith(ctx, preq, p, Options{Engine: engine.Options{Stop: []string{"zzz"}}})
	if err != nil || resp.Sealed.Receipt.Backend != "gen" || resp.Stopped {
		t.Fatalf("a completion: %v, err %v", resp, err)
	}
	first := string(resp.Output[:3])
	resp, err = a.ServeWith(ctx, preq, p, Options{Engine: engine.Options{Stop: []string{first}}})
	if err != nil || !resp.Stopped || len(resp.Output) != 0 || resp.Sealed.Receipt.TokensOut != 0 {
		t.Fatalf("stopped at once: %+v, err %v", resp, err)
	}

	// Pinned to the other kind: refused before any work.
	for _, tc := range []struct {
		opts   Options
		prompt []byte
		req    wire.ServeRequest
	}{
		{Options{Backend: "gen", Engine: engine.Options{Embed: true}}, texts, req},
		{Options{Backend: "embed"}, p, preq},
	} {
		if _, err := a.ServeWith(ctx, tc.req, tc.prompt, tc.opts); !errors.Is(err, engine.ErrNoEmbed) || !errors.Is(err, wire.ErrBadRequest) {
			t.Fatalf("%+v: err %v, want ErrNoEmbed as a bad request", tc.opts, err)
		}
	}
}
