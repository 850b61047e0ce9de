//go:build unix

package subprocess

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"meshd/engine/runner/gguf"
	"meshd/wire"
)

// TestEndToEndQuantTypes runs the built-in runner through the adapter on
// a synthetic model of every quantised type and llama.cpp mixture the
// runner gained beyond Q8_0 and Q4_0: each must load, serve tokens, and
// serve the same tokens again under greedy decoding. One mixture has
// rows that are not whole 256-value super-blocks, so it holds
// llama.cpp's fallback types (Q5_0, Q8_0) instead of K-quants.
func TestEndToEndQuantTypes(t *testing.T) {
	bin := meshGGUF(t)
	noLeaks(t)
	dir := t.TempDir()
	base := gguf.Shape{Layers: 2, Dim: 256, Heads: 4, KVHeads: 2, FF: 512, Vocab: 320, Ctx: 256}
	for _, tc := range []struct {
		name      string
		quant     string
		dim, ff   int
		wantTypes []gguf.TensorType // the file must hold these
	}{
		{"q4_1", "q4_1", 0, 0, []gguf.TensorType{gguf.Q4_1}},
		{"q5_0", "q5_0", 0, 0, []gguf.TensorType{gguf.Q5_0}},
		{"q5_1", "q5_1", 0, 0, []gguf.TensorType{gguf.Q5_1}},
		{"q4_k", "q4_k", 0, 0, []gguf.TensorType{gguf.Q4_K}},
		{"q5_k", "q5_k", 0, 0, []gguf.TensorType{gguf.Q5_K}},
		{"q6_k", "q6_k", 0, 0, []gguf.TensorType{gguf.Q6_K}},
		{"q4_k_m", "q4_k_m", 0, 0, []gguf.TensorType{gguf.Q4_K, gguf.Q6_K}},
		{"q5_k_m", "q5_k_m", 0, 0, []gguf.TensorType{gguf.Q5_K, gguf.Q6_K}},
		{"q4_k_m-fallback", "q4_k_m", 192, 384, []gguf.TensorType{gguf.Q5_0, gguf.Q8_0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			typ, mix, err := gguf.ParseQuant(tc.quant)
			if err != nil {
				t.Fatal(err)
			}
			shape := base
			shape.Type, shape.Mix = typ, mix
			if tc.dim != 0 {
				shape.Dim, shape.FF = tc.dim, tc.ff
			}
			model := filepath.Join(dir, tc.name+".gguf")
			f, err := os.Create(model)
			if err != nil {
				t.Fatal(err)
			}
			if err := gguf.Synth(f, shape, 11); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			holds := map[gguf.TensorType]bool{}
			gf, err := gguf.Open(model)
			if err != nil {
				t.Fatal(err)
			}
			for _, ti := range gf.Tensors {
				holds[ti.Type] = true
			}
			gf.Close()
			for _, want := range tc.wantTypes {
				if !holds[want] {
					t.Fatalf("model holds %v, want %s among them", holds, want)
				}
			}

			cfg := Config{
				Runner: bin, Model: model, ContextSize: 256, Threads: 1,
				Fidelity: wire.F0, UJPerToken: 50,
				HealthTimeout: 30 * time.Second, HealthInterval: 20 * time.Millisecond,
				StopGrace: 5 * time.Second, RestartBackoff: 50 * time.Millisecond, MaxRestartBackoff: time.Second,
			}
			e := startEngine(t, cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			const n = 8
			req, p := request("the quick brown fox", n)
			first, err := e.Serve(ctx, req, p)
			if err != nil {
				t.Fatal(err)
			}
			if first.Outcome.TokensOut == 0 || first.Outcome.TokensIn == 0 || len(first.Output) == 0 {
				t.Fatalf("serve = %+v %q: no tokens", first.Outcome, first.Output)
			}
			second, err := e.Serve(ctx, req, p)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(second.Output, first.Output) || second.Outcome.TokensOut != first.Outcome.TokensOut {
				t.Fatalf("greedy decoding differs: %q then %q", first.Output, second.Output)
			}
			t.Logf("%s: %+v %q", tc.name, first.Outcome, first.Output)
		})
	}
}
