package llama

import (
	"context"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"meshd/engine/runner/gguf"
	"meshd/engine/runner/kernels"
)

// testPrompt is long enough to span several chunks of the small chunk
// sizes the tests set.
func testPrompt(n, vocab int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = 1 + (i*37+11)%(vocab-1)
	}
	return p
}

// TestBatchMatchesSequential checks that a prompt evaluated as a matrix
// (one chunk, several chunks, chunks ending in a lone token) leaves the
// same logits and the same cache as feeding the tokens one at a time,
// for every weight type and both architectures, and that decoding on
// from either state gives the same greedy tokens.
func TestBatchMatchesSequential(t *testing.T) {
	ctx := context.Background()
	pool := kernels.NewPool(3)
	defer pool.Close()
	type model struct {
		name string
		m    *Model
	}
	var models []model
	for _, typ := range []gguf.TensorType{gguf.F32, gguf.F16, gguf.Q8_0, gguf.Q4_0} {
		s := small
		s.Type = typ
		m, _ := loadSynth(t, s, 11)
		models = append(models, model{"llama-" + typ.String(), m})
	}
	for _, typ := range []gguf.TensorType{gguf.F32, gguf.Q8_0} {
		s := small
		s.Type = typ
		m, _ := loadVariant(t, s, 12, variant{arch: "qwen2", biases: true})
		models = append(models, model{"qwen2-" + typ.String(), m})
	}
	s := small
	s.Type = gguf.Q4_0
	m, _ := loadVariant(t, s, 13, variant{ropeFactors: ropeFactors(small), kv: map[string]any{"llama.rope.scaling.factor": float32(2)}})
	models = append(models, model{"llama3-rope-" + s.Type.String(), m})

	prompt := testPrompt(29, small.Vocab)
	for _, mc := range models {
		m := mc.m
		seq, _ := m.NewState(48, pool)
		var want []float32
		for _, tok := range prompt {
			l, err := seq.Eval(tok)
			if err != nil {
				t.Fatal(err)
			}
			want = append(want[:0], l...)
		}
		// Greedy decode on from the sequential state (its prompt rows of
		// the cache stay as they are).
		var greedy []int
		for tok := Argmax(want); len(greedy) < 8; {
			greedy = append(greedy, tok)
			l, _ := seq.Eval(tok)
			tok = Argmax(l)
		}
		for _, chunk := range []int{DefaultPromptChunk, 8, 7} { // 29 = 4·7+1: a last chunk of one
			st, _ := m.NewState(48, pool)
			st.chunk = chunk
			got, err := st.EvalBatch(ctx, prompt)
			if err != nil {
				t.Fatal(err)
			}
			if d := relDiff(got, f64(want)); !(d <= 1e-5) {
				t.Errorf("%s chunk %d: batched logits differ from sequential by %g of max", mc.name, chunk, d)
			}
			if !reflect.DeepEqual(st.Tokens(), prompt) {
				t.Errorf("%s chunk %d: cache holds %d tokens, want the prompt's %d", mc.name, chunk, len(st.Tokens()), len(prompt))
			}
			n := len(prompt) * m.KVHeads * m.HeadDim
			for l := range st.k {
				if d := relDiff(st.k[l][:n], f64(seq.k[l][:n])); !(d <= 1e-5) {
					t.Errorf("%s chunk %d layer %d: cached keys differ by %g", mc.name, chunk, l, d)
				}
				if d := relDiff(st.v[l][:n], f64(seq.v[l][:n])); !(d <= 1e-5) {
					t.Errorf("%s chunk %d layer %d: cached values differ by %g", mc.name, chunk, l, d)
				}
			}
			// Greedy decode on from the batched state.
			var gen []int
			for tok := Argmax(got); len(gen) < 8; {
				gen = append(gen, tok)
				l, _ := st.Eval(tok)
				tok = Argmax(l)
			}
			if !reflect.DeepEqual(gen, greedy) {
				t.Errorf("%s chunk %d: greedy decode after the batch %v, sequential %v", mc.name, chunk, gen, greedy)
			}
		}
	}
}

// TestGenerateBatchedEqualsSequential compares Generate (whose prompt runs
// batched, in chunks, after a reused prefix) with a greedy loop over Eval.
func TestGenerateBatchedEqualsSequential(t *testing.T) {
	for _, typ := range []gguf.TensorType{gguf.F32, gguf.F16, gguf.Q8_0, gguf.Q4_0} {
		s := small
		s.Type = typ
		m, _ := loadSynth(t, s, 21)
		pool := kernels.NewPool(2)
		prompt := testPrompt(23, s.Vocab)
		seq, _ := m.NewState(64, pool)
		var logits []float32
		for _, tok := range prompt {
			logits, _ = seq.Eval(tok)
		}
		var want []int
		for range 16 {
			tok := Argmax(logits)
			want = append(want, tok)
			logits, _ = seq.Eval(tok)
		}
		st, _ := m.NewState(64, pool)
		st.chunk = 5
		// A first request caches a prefix; the second extends it.
		if _, err := st.Generate(context.Background(), Request{Prompt: prompt[:9], NPredict: 1, CachePrompt: true, IgnoreEOS: true}); err != nil {
			t.Fatal(err)
		}
		r, err := st.Generate(context.Background(), Request{Prompt: prompt, NPredict: 16, CachePrompt: true, IgnoreEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		if r.CacheN != 9 || r.PromptN != len(prompt)-9 {
			t.Errorf("%s: cache_n %d prompt_n %d, want 9 %d", typ, r.CacheN, r.PromptN, len(prompt)-9)
		}
		if !reflect.DeepEqual(r.Tokens, want) {
			t.Errorf("%s: batched generation %v, sequential %v", typ, r.Tokens, want)
		}
		pool.Close()
	}
}

func TestEvalBatchRejectsAndCancels(t *testing.T) {
	m, _ := loadSynth(t, small, 5)
	st, _ := m.NewState(16, nil)
	ctx := context.Background()
	if _, err := st.EvalBatch(ctx, testPrompt(17, small.Vocab)); !errors.Is(err, ErrContextExceeded) {
		t.Errorf("17 tokens into a 16-token context: %v", err)
	}
	if _, err := st.EvalBatch(ctx, []int{1, small.Vocab}); err == nil {
		t.Error("out-of-vocabulary token accepted")
	}
	if _, err := st.EvalBatch(ctx, nil); err == nil {
		t.Error("empty batch accepted")
	}
	if len(st.Tokens()) != 0 {
		t.Errorf("rejected batches left %d tokens cached", len(st.Tokens()))
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := st.EvalBatch(cctx, []int{1, 2, 3}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v", err)
	}
	if len(st.Tokens()) != 0 {
		t.Errorf("cancelled batch left %d tokens cached", len(st.Tokens()))
	}
}

// ropeFactors are Llama-3.1-like per-pair factors: 1 for the fast pairs
// rising to 8 for the slow ones.
func ropeFactors(s gguf.Shape) []float32 {
	n := s.Dim / s.Heads / 2
	f := make([]float32, n)
	for i := range f {
		f[i] = float32(1 + 7*float64(i)/float64(n-1))
	}
	return f
}

// TestArchitecturesMatchReference runs qwen2 (NEOX rope, QKV biases),
// llama with output biases, and llama 3.1-style rope frequency factors
// with linear rope scaling against the float64 reference written from
// llama.cpp's description, batched and one token at a time.
func TestArchitecturesMatchReference(t *testing.T) {
	for _, tc := range []struct {
		name  string
		v     variant
		neox  bool
		scale float64
	}{
		{"qwen2", variant{arch: "qwen2", biases: true, kv: map[string]any{"qwen2.rope.freq_base": float32(1e6)}}, true, 1},
		{"llama-biases", variant{biases: true}, false, 1},
		{"llama3-rope-factors", variant{ropeFactors: ropeFactors(small)}, false, 1},
		{"llama-linear-scaling", variant{ropeFactors: ropeFactors(small), kv: map[string]any{"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": float32(4)}}, false, 0.25},
		{"llama-scaling-none", variant{kv: map[string]any{"llama.rope.scaling.type": "none", "llama.rope.scaling.factor": float32(4)}}, false, 1},
	} {
		m, f := loadVariant(t, small, 31, tc.v)
		if m.Arch != orDefault(tc.v.arch) || m.RopeNeox != tc.neox || m.RopeFreqScale != tc.scale {
			t.Errorf("%s: arch %q neox %v scale %g", tc.name, m.Arch, m.RopeNeox, m.RopeFreqScale)
		}
		ref := newRef(t, m, f, tc.neox, tc.scale)
		seq := testPrompt(12, small.Vocab)
		seq[0] = 1
		pool := kernels.NewPool(2)
		a, _ := m.NewState(32, pool)
		b, _ := m.NewState(32, pool)
		for i, tok := range seq {
			got, err := a.Eval(tok)
			if err != nil {
				t.Fatal(err)
			}
			if d := relDiff(got, ref.logits(seq[:i+1])); !(d <= 1e-4) {
				t.Errorf("%s pos %d: logits differ from the reference by %g of max", tc.name, i, d)
			}
		}
		got, _ := b.EvalBatch(context.Background(), seq)
		if d := relDiff(got, ref.logits(seq)); !(d <= 1e-4) {
			t.Errorf("%s batched: logits differ from the reference by %g of max", tc.name, d)
		}
		pool.Close()
	}
}

func orDefault(arch string) string {
	if arch == "" {
		return "llama"
	}
	return arch
}

func TestLoadRefusals(t *testing.T) {
	f := synthFile(t, small, 1)
	for _, tc := range []struct {
		name, want string
		v          variant
	}{
		{"unknown architecture", `"falcon"`, variant{arch: "falcon"}},
		{"qwen2 without biases", "attn_q.bias", variant{arch: "qwen2"}},
		{"yarn", "yarn", variant{kv: map[string]any{"llama.rope.scaling.type": "yarn", "llama.rope.scaling.factor": float32(4)}}},
		{"short rope factors", "rope_freqs", variant{ropeFactors: []float32{1, 2}}},
		{"zero rope factor", "rope_freqs", variant{ropeFactors: make([]float32, small.Dim/small.Heads/2)}},
		{"ffn biases", "ffn_up.bias", variant{extra: map[string][]uint64{"blk.0.ffn_up.bias": {uint64(small.FF)}}}},
	} {
		_, err := Load(rewrite(t, f, tc.v, 1))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", tc.name, err, tc.want)
		}
	}
}

// TestStateSizing checks that a state holds exactly the context asked
// for and that a context beyond the trained one is refused.
func TestStateSizing(t *testing.T) {
	m, _ := loadSynth(t, small, 1)
	if m.TrainedContext() != small.Ctx {
		t.Fatalf("trained context %d, want %d", m.TrainedContext(), small.Ctx)
	}
	st, err := m.NewState(10, nil)
	if err != nil {
		t.Fatal(err)
	}
	kvDim := m.KVHeads * m.HeadDim
	if len(st.k[0]) != 10*kvDim || len(st.v[m.Layers-1]) != 10*kvDim || st.Ctx() != 10 {
		t.Errorf("10-position state has %d key values per layer, want %d", len(st.k[0]), 10*kvDim)
	}
	if _, err := m.NewState(small.Ctx, nil); err != nil {
		t.Errorf("the trained context refused: %v", err)
	}
	if _, err := m.NewState(small.Ctx+1, nil); err == nil || !strings.Contains(err.Error(), "trained context") {
		t.Errorf("context beyond the trained one: %v", err)
	}
	if m.StateBytes(20) <= m.StateBytes(10) || m.StateBytes(10) < int64(2*m.Layers*10*kvDim*4) {
		t.Errorf("StateBytes(10) = %d, (20) = %d", m.StateBytes(10), m.StateBytes(20))
	}
}

// TestEmbedPooling checks each pooling type against the float64
// reference's final-normed hidden states pooled directly.
func TestEmbedPooling(t *testing.T) {
	tokens := testPrompt(11, small.Vocab)
	pool := kernels.NewPool(2)
	defer pool.Close()
	for _, tc := range []struct {
		name string
		kv   map[string]any // nil: no pooling_type key
		want Pooling
	}{
		{"default", nil, PoolMean},
		{"none", map[string]any{"llama.pooling_type": uint32(0)}, PoolNone},
		{"mean", map[string]any{"llama.pooling_type": uint32(1)}, PoolMean},
		{"cls", map[string]any{"llama.pooling_type": uint32(2)}, PoolCLS},
		{"last", map[string]any{"llama.pooling_type": uint32(3)}, PoolLast},
	} {
		m, f := loadVariant(t, small, 41, variant{kv: tc.kv})
		if m.Pooling != tc.want {
			t.Fatalf("%s: pooling %s, want %s", tc.name, m.Pooling, tc.want)
		}
		hid := newRef(t, m, f, false, 1).hidden(tokens)
		var want [][]float64
		switch tc.want {
		case PoolNone:
			want = hid
		case PoolMean:
			mean := make([]float64, m.Dim)
			for _, h := range hid {
				for i, v := range h {
					mean[i] += v / float64(len(hid))
				}
			}
			want = [][]float64{mean}
		case PoolCLS:
			want = [][]float64{hid[0]}
		case PoolLast:
			want = [][]float64{hid[len(hid)-1]}
		}
		st, _ := m.NewState(32, pool)
		st.chunk = 4
		st.EvalBatch(context.Background(), []int{1, 2, 3}) // Embed must start afresh
		got, err := st.Embed(context.Background(), tokens)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want)*m.Dim {
			t.Fatalf("%s: %d values, want %d", tc.name, len(got), len(want)*m.Dim)
		}
		for r, w := range want {
			var n float64
			for _, v := range w {
				n += v * v
			}
			n = math.Sqrt(n)
			for i := range w {
				w[i] /= n
			}
			row := got[r*m.Dim : (r+1)*m.Dim]
			var norm float64
			for _, v := range row {
				norm += float64(v) * float64(v)
			}
			if math.Abs(norm-1) > 1e-5 {
				t.Errorf("%s row %d: |e|² = %g", tc.name, r, norm)
			}
			if d := relDiff(row, w); !(d <= 1e-4) {
				t.Errorf("%s row %d: embedding differs from the reference by %g of max", tc.name, r, d)
			}
		}
	}
	m, _ := loadVariant(t, small, 41, variant{kv: map[string]any{"llama.pooling_type": uint32(4)}})
	st, _ := m.NewState(32, nil)
	if _, err := st.Embed(context.Background(), tokens); err == nil {
		t.Error("rank pooling accepted")
	}
}
