package subprocess

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"meshd/engine"
	"meshd/engine/runner/gguf"
	"meshd/wire"
)

// Embed through the real mesh-gguf started with --embedding: one unit
// vector per text, in order, the same text giving the same vector, and the
// engine's own token count.
func TestEmbedMeshGGUF(t *testing.T) {
	bin := meshGGUF(t)
	dir := t.TempDir()
	model := filepath.Join(dir, "embed.gguf")
	f, err := os.Create(model)
	if err != nil {
		t.Fatal(err)
	}
	if err := gguf.Synth(f, gguf.Shape{Layers: 2, Dim: 64, Heads: 4, KVHeads: 2, FF: 128, Vocab: 320, Ctx: 256, Type: gguf.F32}, 3); err != nil {
		t.Fatal(err)
	}
	f.Close()
	e := startEngine(t, Config{Runner: bin, Model: model, ContextSize: 256, Threads: 1, Embedding: true,
		Fidelity: wire.F0, UJPerToken: 5, HealthTimeout: 30 * time.Second, HealthInterval: 20 * time.Millisecond,
		StopGrace: 5 * time.Second, RestartBackoff: 50 * time.Millisecond, MaxRestartBackoff: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	texts := []string{"passage: the shunt converts current", "passage: a joule is a watt second", "passage: the shunt converts current"}
	vecs, tokens, err := e.Embed(ctx, texts)
	if err != nil {
		t.Fatal(err)
	}
	if len(vecs) != 3 || len(vecs[0]) != 64 {
		t.Fatalf("%d vectors of %d", len(vecs), len(vecs[0]))
	}
	var want int
	for _, s := range texts {
		want += len(tokenize(t, ctx, e.cur.base, s))
	}
	// The engine may add a BOS per text; never fewer tokens than the texts' own.
	if tokens < want || tokens > want+len(texts) {
		t.Fatalf("engine reports %d tokens, the texts tokenize to %d", tokens, want)
	}
	for i, v := range vecs {
		var s float64
		for _, x := range v {
			s += float64(x) * float64(x)
		}
		if math.Abs(s-1) > 1e-4 {
			t.Fatalf("vector %d has squared norm %v", i, s)
		}
	}
	same, differ := 0.0, 0.0
	for k := range vecs[0] {
		same += math.Abs(float64(vecs[0][k] - vecs[2][k]))
		differ += math.Abs(float64(vecs[0][k] - vecs[1][k]))
	}
	if same != 0 || differ == 0 {
		t.Fatalf("same text differs by %v, different texts by %v", same, differ)
	}
	// A backend not started for embeddings refuses.
	plain := &Engine{cfg: Config{Name: "plain"}}
	if _, _, err := plain.Embed(ctx, texts); err == nil || !strings.Contains(err.Error(), "not started as an embedding engine") {
		t.Fatalf("plain engine: %v", err)
	}

	// As a serve (engine.Options.Embed): the same vectors, tokens_in what
	// the engine read, one accepted token out per vector.
	prompt, _ := json.Marshal(texts)
	req := wire.ServeRequest{PromptHash: wire.ContentOf(prompt), PromptTokens: 64, MaxTokens: 3, FidelityFloor: wire.F0, JouleCeilingUJ: 1}
	res, err := e.ServeWith(ctx, req, prompt, engine.Options{Embed: true})
	if err != nil {
		t.Fatal(err)
	}
	var served [][]float32
	if err := json.Unmarshal(res.Output, &served); err != nil || len(served) != 3 {
		t.Fatalf("served %s: %v", res.Output, err)
	}
	for k := range served[1] {
		if served[1][k] != vecs[1][k] {
			t.Fatalf("served vector 1 differs at %d: %v, embedded %v", k, served[1][k], vecs[1][k])
		}
	}
	if o := res.Outcome; o.TokensIn != uint32(tokens) || o.TokensOut != 3 || o.TokensAccepted != 3 {
		t.Fatalf("outcome %+v, want %d in and 3 out", o, tokens)
	}
	// An embedding engine serves nothing else.
	p := []byte("continue")
	if _, err := e.ServeWith(ctx, wire.ServeRequest{PromptHash: wire.ContentOf(p), PromptTokens: 9, MaxTokens: 2, JouleCeilingUJ: 1}, p, engine.Options{}); !errors.Is(err, engine.ErrNoEmbed) {
		t.Fatalf("a completion on the embedding engine: %v, want ErrNoEmbed", err)
	}
}
