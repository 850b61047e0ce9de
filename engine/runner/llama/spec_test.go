package llama

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"meshd/engine/runner/gguf"
	"meshd/engine/runner/kernels"
)

// truncated loads f's first layers blocks as a draft model.
func truncated(t testing.TB, f *gguf.File, layers int) *Model {
	t.Helper()
	var buf bytes.Buffer
	if err := gguf.WriteTruncated(&buf, f, layers); err != nil {
		t.Fatal(err)
	}
	g, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	m, err := Load(g)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// specTarget is a target model with its drafts of controlled agreement:
// itself (accepts everything), truncated copies (fewer blocks, the same
// embeddings and output head) and an unrelated model of the same shape
// and vocabulary.
type specTarget struct {
	name   string
	m      *Model
	drafts []namedModel
}

// specModels covers every weight type the engine computes (the K-quants
// and the Q4_K_M mixture at a width their 256-value blocks divide), and
// qwen2 with biases.
func specModels(t *testing.T) []specTarget {
	var out []specTarget
	add := func(name string, s gguf.Shape, seed uint64, v *variant) {
		var m, other *Model
		var f *gguf.File
		if v == nil {
			m, f = loadSynth(t, s, seed)
			other, _ = loadSynth(t, s, seed+1000)
		} else {
			m, f = loadVariant(t, s, seed, *v)
			other, _ = loadVariant(t, s, seed+1000, *v)
		}
		out = append(out, specTarget{name, m, []namedModel{
			{"self", m},
			{fmt.Sprintf("truncated-%d", s.Layers-1), truncated(t, f, s.Layers-1)},
			{"truncated-1", truncated(t, f, 1)},
			{"unrelated", other},
		}})
	}
	base := small
	base.Layers = 4
	for _, typ := range []gguf.TensorType{gguf.F32, gguf.F16, gguf.BF16, gguf.Q8_0, gguf.Q4_0, gguf.Q4_1, gguf.Q5_0, gguf.Q5_1} {
		s := base
		s.Type = typ
		add("llama-"+typ.String(), s, 81, nil)
	}
	k := gguf.Shape{Layers: 3, Dim: 256, Heads: 4, KVHeads: 2, FF: 512, Vocab: 300, Ctx: 64, SeparateOutput: true}
	for _, typ := range []gguf.TensorType{gguf.Q4_K, gguf.Q5_K, gguf.Q6_K} {
		s := k
		s.Type = typ
		add("llama-"+typ.String(), s, 82, nil)
	}
	s := k
	s.Type, s.Mix, s.FF = gguf.Q4_K, gguf.MixQ4_K_M, 544
	add("llama-q4_k_m", s, 83, nil)
	s = base
	s.Type = gguf.Q8_0
	add("qwen2-biases-q8_0", s, 84, &variant{arch: "qwen2", biases: true})
	return out
}

// TestEvalRowsMatchesEval checks the verifying pass: every row's logits
// are those of a decode step at its position, bit for bit, with chunks
// that split the rows (one ending in a lone row) and without.
func TestEvalRowsMatchesEval(t *testing.T) {
	ctx := context.Background()
	pool := kernels.NewPool(3)
	defer pool.Close()
	for _, mc := range decoderModels(t) {
		m := mc.m
		prompt := testPrompt(9, m.Vocab)
		toks := testPrompt(7, m.Vocab)[2:]
		seq, _ := m.NewState(40, pool)
		if _, err := seq.EvalBatch(ctx, prompt); err != nil {
			t.Fatal(err)
		}
		var want [][]float32
		for _, tok := range toks {
			l, err := seq.Eval(tok)
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, append([]float32(nil), l...))
		}
		for _, chunk := range []int{DefaultPromptChunk, 2, 3} {
			st, _ := m.NewState(40, pool)
			if _, err := st.EvalBatch(ctx, prompt); err != nil {
				t.Fatal(err)
			}
			st.chunk, st.b = chunk, nil
			rows, err := st.evalRows(ctx, toks, make([]float32, len(toks)*m.Vocab))
			if err != nil {
				t.Fatal(err)
			}
			for i := range toks {
				if at := sameBits(rows[i*m.Vocab:(i+1)*m.Vocab], want[i]); at >= 0 {
					t.Fatalf("%s chunk %d: row %d logit %d is %g, a decode step's %g", mc.name, chunk, i, at, rows[i*m.Vocab+at], want[i][at])
				}
			}
			if !reflect.DeepEqual(st.Tokens(), append(append([]int(nil), prompt...), toks...)) {
				t.Fatalf("%s chunk %d: cache holds %v", mc.name, chunk, st.Tokens())
			}
		}
	}
}

// TestSpeculativeMatchesGreedy decodes with every draft of every target
// model and checks the tokens, the stop type and the target's cache are
// plain greedy decoding's, the counters are consistent, a draft that is
// the target accepts every proposal and an unrelated one few. Requests
// run back to back on one slot, the second reusing the first's prefix,
// so the draft's cache follows the target's across requests.
func TestSpeculativeMatchesGreedy(t *testing.T) {
	ctx := context.Background()
	pool := kernels.NewPool(2)
	defer pool.Close()
	const nCtx = 48
	type req struct {
		name string
		r    Request
	}
	prompt := func(m *Model, n int) []int { return testPrompt(n, m.Vocab) }
	params := []SpecParams{
		{Max: 4, PMin: 0},               // adaptive from 4
		{Max: 3, Min: 2, Fixed: true},   // short drafts dropped
		{Max: 16, PMin: 0, Fixed: true}, // longer than some budgets
	}
	var rates []string
	for _, tc := range specModels(t) {
		m := tc.m
		reqs := []req{
			{"n24", Request{Prompt: prompt(m, 11), NPredict: 24, CachePrompt: true, IgnoreEOS: true}},
			{"cached-n9", Request{Prompt: prompt(m, 15), NPredict: 9, CachePrompt: true, IgnoreEOS: true}},
			{"n1", Request{Prompt: prompt(m, 6), NPredict: 1, IgnoreEOS: true}},
			{"n2", Request{Prompt: prompt(m, 6), NPredict: 2, IgnoreEOS: true}},
			// Until the context is full.
			{"ctx", Request{Prompt: prompt(m, 30), NPredict: -1, IgnoreEOS: true}},
			// A stop after the 5th token, mid-pass.
			{"stop5", Request{Prompt: prompt(m, 8), NPredict: 20, IgnoreEOS: true,
				StopAt: func(g []int) bool { return len(g) == 5 }}},
		}
		plain, _ := m.NewState(nCtx, pool)
		var want []Result
		var wantCache [][]int
		for _, rq := range reqs {
			r, err := plain.Generate(ctx, rq.r)
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, r)
			wantCache = append(wantCache, append([]int(nil), plain.Tokens()...))
		}
		for _, dm := range tc.drafts {
			for pi, p := range params {
				target, _ := m.NewState(nCtx, pool)
				target.chunk = 3 // verifying passes split into chunks
				ds, _ := dm.m.NewState(nCtx, pool)
				d, err := NewDrafter(m, ds, p)
				if err != nil {
					t.Fatal(err)
				}
				var proposed, accepted int
				for i, rq := range reqs {
					r := rq.r
					r.Draft = d
					got, err := target.Generate(ctx, r)
					where := fmt.Sprintf("%s draft %s params %d request %s", tc.name, dm.name, pi, rq.name)
					if err != nil {
						t.Fatalf("%s: %v", where, err)
					}
					if !reflect.DeepEqual(got.Tokens, want[i].Tokens) || got.Stop != want[i].Stop {
						t.Fatalf("%s: speculative %v (%s), greedy %v (%s)", where, got.Tokens, got.Stop, want[i].Tokens, want[i].Stop)
					}
					if !reflect.DeepEqual(target.Tokens(), wantCache[i]) {
						t.Fatalf("%s: target caches %d tokens, greedy %d", where, len(target.Tokens()), len(wantCache[i]))
					}
					if got.CacheN != want[i].CacheN || got.PromptN != want[i].PromptN {
						t.Fatalf("%s: cache_n %d prompt_n %d, greedy %d %d", where, got.CacheN, got.PromptN, want[i].CacheN, want[i].PromptN)
					}
					if got.DraftAccepted > got.DraftN || got.DraftAccepted >= len(got.Tokens) && len(got.Tokens) > 0 {
						t.Fatalf("%s: %d of %d proposals accepted, %d tokens delivered", where, got.DraftAccepted, got.DraftN, len(got.Tokens))
					}
					if rq.name == "n1" && got.DraftN != 0 {
						t.Fatalf("%s: %d tokens drafted for a one-token completion", where, got.DraftN)
					}
					if rq.r.StopAt != nil {
						// Proposals past the stop are never delivered, so
						// never accepted.
						continue
					}
					proposed += got.DraftN
					accepted += got.DraftAccepted
				}
				if proposed == 0 {
					t.Fatalf("%s draft %s params %d: nothing drafted", tc.name, dm.name, pi)
				}
				switch dm.name {
				case "self":
					if accepted != proposed {
						t.Fatalf("%s: the target as its own draft accepted %d of %d", tc.name, accepted, proposed)
					}
				case "unrelated":
					if 4*accepted > proposed {
						t.Fatalf("%s: an unrelated draft accepted %d of %d", tc.name, accepted, proposed)
					}
				}
				if pi == 0 {
					rates = append(rates, fmt.Sprintf("%s/%s %d/%d", tc.name, dm.name, accepted, proposed))
				}
			}
		}
	}
	t.Logf("accepted/proposed: %s", strings.Join(rates, ", "))
}

// TestSpeculativeSamplingIsPlain checks a sampled request ignores the
// draft: the tokens are those of the same seed without it, and nothing is
// drafted.
func TestSpeculativeSamplingIsPlain(t *testing.T) {
	ctx := context.Background()
	pool := kernels.NewPool(2)
	defer pool.Close()
	m, f := loadSynth(t, small, 91)
	r := Request{Prompt: testPrompt(7, m.Vocab), NPredict: 12, IgnoreEOS: true,
		Sampling: Sampling{Temperature: 0.9, TopK: 40, TopP: 0.95, Seed: 5}}
	plain, _ := m.NewState(40, pool)
	want, err := plain.Generate(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	ds, _ := truncated(t, f, 1).NewState(40, pool)
	d, err := NewDrafter(m, ds, SpecParams{Max: 4})
	if err != nil {
		t.Fatal(err)
	}
	st, _ := m.NewState(40, pool)
	r.Draft = d
	got, err := st.Generate(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Tokens, want.Tokens) || got.DraftN != 0 {
		t.Fatalf("sampled with a draft: %v (%d drafted), without %v", got.Tokens, got.DraftN, want.Tokens)
	}
}

// TestDraftRefusals checks a draft of another vocabulary, or settings out
// of range, are refused by name.
func TestDraftRefusals(t *testing.T) {
	pool := kernels.NewPool(1)
	defer pool.Close()
	m, _ := loadSynth(t, small, 95)
	s := small
	s.Vocab = small.Vocab + 10
	bigger, _ := loadSynth(t, s, 95)
	renamed, _ := loadVariant(t, small, 96, variant{kv: map[string]any{"tokenizer.ggml.eos_token_id": uint32(1)}})
	ok, _ := m.NewState(16, pool)
	cases := []struct {
		name  string
		draft *Model
		p     SpecParams
		want  string
	}{
		{"vocab size", bigger, SpecParams{Max: 4}, "310 tokens, the target's 300"},
		{"eos", renamed, SpecParams{Max: 4}, "BOS/EOS"},
		{"max 0", m, SpecParams{Max: 0}, "draft max 0"},
		{"min above max", m, SpecParams{Max: 2, Min: 3}, "draft min 3"},
		{"p-min", m, SpecParams{Max: 2, PMin: 1.5}, "draft p-min 1.5"},
	}
	for _, c := range cases {
		st := ok
		if c.draft != m {
			st, _ = c.draft.NewState(16, pool)
		}
		_, err := NewDrafter(m, st, c.p)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
}
