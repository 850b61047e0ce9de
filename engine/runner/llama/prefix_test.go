package llama

import (
	"context"
	"reflect"
	"testing"

	"meshd/engine/runner/gguf"
	"meshd/engine/runner/kernels"
)

// prefixModels are the synthesised models the prompt cache is checked on:
// every weight type and mixture on a GQA model whose rows split into
// K-quant blocks, and two other layouts (multi-head attention with tied
// embeddings; Qwen2's NEOX rope with attention biases).
func prefixModels(t *testing.T) []struct {
	name string
	m    *Model
} {
	var out []struct {
		name string
		m    *Model
	}
	add := func(name string, m *Model) {
		out = append(out, struct {
			name string
			m    *Model
		}{name, m})
	}
	for i, q := range []string{"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k", "q4_k_m", "q5_k_m"} {
		typ, mix, err := gguf.ParseQuant(q)
		if err != nil {
			t.Fatal(err)
		}
		s := gguf.Shape{Layers: 2, Dim: 256, Heads: 4, KVHeads: 2, FF: 512, Vocab: 300, Ctx: 128, Type: typ, Mix: mix, SeparateOutput: true}
		m, _ := loadSynth(t, s, uint64(40+i))
		add("gqa/"+q, m)
	}
	mha := gguf.Shape{Layers: 3, Dim: 64, Heads: 4, KVHeads: 4, FF: 160, Vocab: 300, Ctx: 128, Type: gguf.Q8_0}
	m, _ := loadSynth(t, mha, 61)
	add("mha-tied/q8_0", m)
	qwen := small
	qwen.Type = gguf.F16
	qwen.Ctx = 128
	m, _ = loadVariant(t, qwen, 62, variant{arch: "qwen2", biases: true})
	add("qwen2-biases/f16", m)
	return out
}

// TestPromptCacheEqualsUncached: a request that reuses a cached prefix
// (after a request sharing 17 tokens with it, or repeating it whole, or
// extending it) generates the greedy tokens of a fresh, uncached run on
// every model and type, and its first logits match the fresh run's.
//
// The two runs are not the same arithmetic: the cached one evaluates only
// the suffix, so its tokens fall into other prompt chunks (and a repeat
// evaluates its one last token by the decode step, Eval), while the fresh
// one runs the whole prompt in chunks of 8. Every row of a chunk goes
// through the arithmetic Eval applies to one token, and on the kernels of
// this tree the logits come out bit-identical (the test logs how many
// were); a kernel that sums a tile of rows in another order than one row
// may differ by rounding, so the logits are held, as batched against
// sequential evaluation is elsewhere, within 1e-5 of their largest
// magnitude. The greedy tokens must be identical.
func TestPromptCacheEqualsUncached(t *testing.T) {
	ctx := context.Background()
	pool := kernels.NewPool(2)
	defer pool.Close()
	var worst float64
	var bitEqual, compared int
	for _, tc := range prefixModels(t) {
		m := tc.m
		prompt := testPrompt(41, m.Vocab)
		other := append(append([]int{}, prompt[:17]...), testPrompt(7, m.Vocab)...)
		longer := append(append([]int{}, prompt...), testPrompt(9, m.Vocab)...)
		for _, c := range []struct {
			name   string
			before []int // the request that fills the cache
			req    []int
			cacheN int
		}{
			{"shared prefix", other, prompt, 17},
			{"repeat", prompt, prompt, len(prompt) - 1},
			{"extension", prompt, longer, len(prompt)},
		} {
			if n := shared(c.before, c.req); n != min(c.cacheN+1, len(c.req)) && n != c.cacheN {
				t.Fatalf("%s, %s: the prompts share %d tokens", tc.name, c.name, n)
			}
			fresh, err := m.NewState(128, pool)
			if err != nil {
				t.Fatal(err)
			}
			fresh.chunk = 8 // chunk boundaries the cached run does not share
			want, err := fresh.Generate(ctx, Request{Prompt: c.req, NPredict: 10, IgnoreEOS: true})
			if err != nil {
				t.Fatal(err)
			}
			cached, _ := m.NewState(128, pool)
			cached.chunk = 8
			if _, err := cached.Generate(ctx, Request{Prompt: c.before, NPredict: 4, CachePrompt: true, IgnoreEOS: true}); err != nil {
				t.Fatal(err)
			}
			got, err := cached.Generate(ctx, Request{Prompt: c.req, NPredict: 10, CachePrompt: true, IgnoreEOS: true})
			if err != nil {
				t.Fatal(err)
			}
			if got.CacheN != c.cacheN || got.PromptN != len(c.req)-c.cacheN {
				t.Errorf("%s, %s: cache_n %d prompt_n %d, want %d %d", tc.name, c.name, got.CacheN, got.PromptN, c.cacheN, len(c.req)-c.cacheN)
			}
			if !reflect.DeepEqual(got.Tokens, want.Tokens) {
				t.Errorf("%s, %s: cached run %v, uncached %v", tc.name, c.name, got.Tokens, want.Tokens)
			}

			// The first logits, both ways: the suffix after the cached
			// prefix, and the whole prompt from an empty cache.
			cached.Truncate(c.cacheN)
			lc, err := cached.EvalBatch(ctx, c.req[c.cacheN:])
			if err != nil {
				t.Fatal(err)
			}
			lc = append([]float32(nil), lc...)
			fresh.Truncate(0)
			lf, err := fresh.EvalBatch(ctx, c.req)
			if err != nil {
				t.Fatal(err)
			}
			d := relDiff(lc, f64(lf))
			worst = max(worst, d)
			compared++
			if d == 0 {
				bitEqual++
			}
			if !(d <= 1e-5) {
				t.Errorf("%s, %s: logits differ by %.3g of their largest magnitude", tc.name, c.name, d)
			}
		}
	}
	t.Logf("first logits: %d of %d comparisons bit-identical; largest difference %.3g of the largest magnitude", bitEqual, compared, worst)
}

func shared(a, b []int) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
