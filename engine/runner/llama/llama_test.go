package llama

import (
	"bytes"
	"context"
	"math"
	"reflect"
	"testing"

	"meshd/engine/runner/gguf"
	"meshd/engine/runner/kernels"
)

var small = gguf.Shape{Layers: 2, Dim: 64, Heads: 4, KVHeads: 2, FF: 96, Vocab: 300, Ctx: 64, Type: gguf.F32, SeparateOutput: true}

func loadSynth(t testing.TB, s gguf.Shape, seed uint64) (*Model, *gguf.File) {
	t.Helper()
	var buf bytes.Buffer
	if err := gguf.Synth(&buf, s, seed); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	m, err := Load(f)
	if err != nil {
		t.Fatal(err)
	}
	return m, f
}

// refModel is a float64 llama forward pass written from the architecture
// description, recomputing every position from scratch (no cache).
type refModel struct {
	c                   Config
	neox                bool
	invFreq             []float64 // per rotated pair: base^(−2i/n_rot)·scale/factor_i
	bq, bk, bv, bo      [][]float64
	embd, out           [][]float64
	outNorm             []float64
	attnNorm, ffnNorm   [][]float64
	q, k, v, o, g, u, d [][][]float64
}

func decodeMat(t *testing.T, f *gguf.File, name string) [][]float64 {
	ti, ok := f.Tensor(name)
	if !ok {
		t.Fatalf("no %s", name)
	}
	x, err := gguf.Decode(ti.Type, f.TensorData(ti), int(ti.Elements()))
	if err != nil {
		t.Fatal(err)
	}
	cols := int(ti.Dims[0])
	rows := len(x) / cols
	m := make([][]float64, rows)
	for r := range m {
		m[r] = make([]float64, cols)
		for c := range m[r] {
			m[r][c] = float64(x[r*cols+c])
		}
	}
	return m
}

// newRef reads the weights back from the file. neox and scale (the rope
// frequency scale) are the test's expectations, not the loader's reading.
func newRef(t *testing.T, m *Model, f *gguf.File, neox bool, scale float64) *refModel {
	r := &refModel{c: m.Config, neox: neox}
	var factors []float64
	if _, ok := f.Tensor("rope_freqs.weight"); ok {
		factors = decodeMat(t, f, "rope_freqs.weight")[0]
	}
	for i := 0; i < m.NRot/2; i++ {
		fr := math.Pow(m.RopeBase, -2*float64(i)/float64(m.NRot)) * scale
		if factors != nil {
			fr /= factors[i]
		}
		r.invFreq = append(r.invFreq, fr)
	}
	bias := func(name string) []float64 {
		if _, ok := f.Tensor(name); !ok {
			return nil
		}
		return decodeMat(t, f, name)[0]
	}
	r.embd = decodeMat(t, f, "token_embd.weight")
	r.out = r.embd
	if _, ok := f.Tensor("output.weight"); ok {
		r.out = decodeMat(t, f, "output.weight")
	}
	r.outNorm = decodeMat(t, f, "output_norm.weight")[0]
	for l := 0; l < m.Layers; l++ {
		p := "blk." + string(rune('0'+l)) + "."
		r.attnNorm = append(r.attnNorm, decodeMat(t, f, p+"attn_norm.weight")[0])
		r.ffnNorm = append(r.ffnNorm, decodeMat(t, f, p+"ffn_norm.weight")[0])
		r.q = append(r.q, decodeMat(t, f, p+"attn_q.weight"))
		r.k = append(r.k, decodeMat(t, f, p+"attn_k.weight"))
		r.v = append(r.v, decodeMat(t, f, p+"attn_v.weight"))
		r.o = append(r.o, decodeMat(t, f, p+"attn_output.weight"))
		r.g = append(r.g, decodeMat(t, f, p+"ffn_gate.weight"))
		r.u = append(r.u, decodeMat(t, f, p+"ffn_up.weight"))
		r.d = append(r.d, decodeMat(t, f, p+"ffn_down.weight"))
		r.bq = append(r.bq, bias(p+"attn_q.bias"))
		r.bk = append(r.bk, bias(p+"attn_k.bias"))
		r.bv = append(r.bv, bias(p+"attn_v.bias"))
		r.bo = append(r.bo, bias(p+"attn_output.bias"))
	}
	return r
}

func mv(w [][]float64, x []float64) []float64 {
	out := make([]float64, len(w))
	for i, row := range w {
		for j, v := range row {
			out[i] += v * x[j]
		}
	}
	return out
}

func rms(x, w []float64, eps float64) []float64 {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	s := 1 / math.Sqrt(ss/float64(len(x))+eps)
	out := make([]float64, len(x))
	for i := range x {
		out[i] = x[i] * s * w[i]
	}
	return out
}

// rope rotates each head of x at pos: adjacent pairs (NORM), or
// (x[i], x[i+n_rot/2]) (NEOX), pair i by pos·invFreq[i].
func rope(x []float64, hd, pos int, invFreq []float64, neox bool) {
	half := len(invFreq)
	for h := 0; h < len(x); h += hd {
		for i, f := range invFreq {
			th := float64(pos) * f
			i0, i1 := h+2*i, h+2*i+1
			if neox {
				i0, i1 = h+i, h+i+half
			}
			a, b := x[i0], x[i1]
			x[i0] = a*math.Cos(th) - b*math.Sin(th)
			x[i1] = a*math.Sin(th) + b*math.Cos(th)
		}
	}
}

func addTo(x, b []float64) {
	for i := range b {
		x[i] += b[i]
	}
}

// logits computes the last position's logits for the whole sequence.
func (r *refModel) logits(tokens []int) []float64 {
	h := r.hidden(tokens)
	return mv(r.out, h[len(h)-1])
}

// hidden computes every position's final-normed hidden state.
func (r *refModel) hidden(tokens []int) [][]float64 {
	c := r.c
	n := len(tokens)
	xs := make([][]float64, n)
	for i, t := range tokens {
		xs[i] = append([]float64(nil), r.embd[t]...)
	}
	hd := c.HeadDim
	for l := 0; l < c.Layers; l++ {
		qs, ks, vs := make([][]float64, n), make([][]float64, n), make([][]float64, n)
		for i := range xs {
			h := rms(xs[i], r.attnNorm[l], float64(c.Eps))
			qs[i], ks[i], vs[i] = mv(r.q[l], h), mv(r.k[l], h), mv(r.v[l], h)
			addTo(qs[i], r.bq[l])
			addTo(ks[i], r.bk[l])
			addTo(vs[i], r.bv[l])
			rope(qs[i], hd, i, r.invFreq, r.neox)
			rope(ks[i], hd, i, r.invFreq, r.neox)
		}
		for i := range xs {
			att := make([]float64, c.Dim)
			for h := 0; h < c.Heads; h++ {
				kv := h / (c.Heads / c.KVHeads)
				sc := make([]float64, i+1)
				mx := math.Inf(-1)
				for j := 0; j <= i; j++ {
					for d := 0; d < hd; d++ {
						sc[j] += qs[i][h*hd+d] * ks[j][kv*hd+d]
					}
					sc[j] /= math.Sqrt(float64(hd))
					mx = math.Max(mx, sc[j])
				}
				var sum float64
				for j := range sc {
					sc[j] = math.Exp(sc[j] - mx)
					sum += sc[j]
				}
				for j := range sc {
					for d := 0; d < hd; d++ {
						att[h*hd+d] += sc[j] / sum * vs[j][kv*hd+d]
					}
				}
			}
			o := mv(r.o[l], att)
			addTo(o, r.bo[l])
			for d := range o {
				xs[i][d] += o[d]
			}
			h := rms(xs[i], r.ffnNorm[l], float64(c.Eps))
			g, u := mv(r.g[l], h), mv(r.u[l], h)
			for j := range g {
				g[j] = g[j] / (1 + math.Exp(-g[j])) * u[j]
			}
			dn := mv(r.d[l], g)
			for d := range dn {
				xs[i][d] += dn[d]
			}
		}
	}
	for i := range xs {
		xs[i] = rms(xs[i], r.outNorm, float64(c.Eps))
	}
	return xs
}

// TestCachedForwardMatchesReference checks the KV-cache forward pass
// against a from-scratch float64 recomputation at every position.
func TestCachedForwardMatchesReference(t *testing.T) {
	for _, tc := range []struct {
		typ gguf.TensorType
		tol float64 // max |Δlogit| relative to max |logit|
	}{{gguf.F32, 1e-4}, {gguf.F16, 1e-4}, {gguf.Q8_0, 0.03}, {gguf.Q4_0, 0.03}} {
		s := small
		s.Type = tc.typ
		m, f := loadSynth(t, s, 42)
		ref := newRef(t, m, f, false, 1)
		pool := kernels.NewPool(3)
		st, err := m.NewState(32, pool)
		if err != nil {
			t.Fatal(err)
		}
		seq := []int{1, 300 - 1, 17, 200, 5, 42, 42, 260}
		for i, tok := range seq {
			got, err := st.Eval(tok)
			if err != nil {
				t.Fatal(err)
			}
			want := ref.logits(seq[:i+1])
			var maxAbs, maxDiff float64
			for j := range want {
				maxAbs = math.Max(maxAbs, math.Abs(want[j]))
				maxDiff = math.Max(maxDiff, math.Abs(float64(got[j])-want[j]))
			}
			if maxDiff > tc.tol*maxAbs {
				t.Errorf("%s pos %d: max |Δlogit| %g, max |logit| %g", tc.typ, i, maxDiff, maxAbs)
			}
			if math.IsNaN(maxDiff) {
				t.Fatalf("%s: NaN logits", tc.typ)
			}
		}
		pool.Close()
	}
}

func TestCacheEqualsRecompute(t *testing.T) {
	s := small
	s.Type = gguf.Q8_0
	m, _ := loadSynth(t, s, 7)
	pool := kernels.NewPool(2)
	defer pool.Close()
	a, _ := m.NewState(32, pool)
	seq := []int{1, 40, 41, 42, 43, 44}
	var cached []float32
	for _, tok := range seq {
		l, err := a.Eval(tok)
		if err != nil {
			t.Fatal(err)
		}
		cached = append(cached[:0], l...)
	}
	// Rewind part of the cache and redo: must be bit-identical.
	a.Truncate(3)
	for _, tok := range seq[3:] {
		a.Eval(tok)
	}
	b, _ := m.NewState(32, kernels.NewPool(1))
	var fresh []float32
	for _, tok := range seq {
		l, _ := b.Eval(tok)
		fresh = l
	}
	if !reflect.DeepEqual(cached, fresh) || !reflect.DeepEqual(a.logits, fresh) {
		t.Error("logits differ between cached, rewound and fresh evaluation")
	}
}

func TestGenerateDeterministicAndPromptCache(t *testing.T) {
	s := small
	s.Type = gguf.Q8_0
	m, _ := loadSynth(t, s, 3)
	pool := kernels.NewPool(2)
	defer pool.Close()
	ctx := context.Background()
	prompt := m.Tok.Encode("the quick brown fox", true, false)
	run := func(st *State, p []int, cache bool, samp Sampling) Result {
		t.Helper()
		r, err := st.Generate(ctx, Request{Prompt: p, NPredict: 12, CachePrompt: cache, IgnoreEOS: true, Sampling: samp})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	st1, _ := m.NewState(64, pool)
	st2, _ := m.NewState(64, pool)
	r1 := run(st1, prompt, true, Sampling{})
	r2 := run(st2, prompt, true, Sampling{})
	if !reflect.DeepEqual(r1.Tokens, r2.Tokens) || len(r1.Tokens) != 12 || r1.Stop != StopLimit {
		t.Fatalf("greedy runs differ or wrong length: %v / %v (%s)", r1.Tokens, r2.Tokens, r1.Stop)
	}
	if r1.PromptN != len(prompt) || r1.CacheN != 0 {
		t.Errorf("fresh run: prompt_n %d cache_n %d, want %d 0", r1.PromptN, r1.CacheN, len(prompt))
	}
	// Same prompt again with the cache: only the last token is re-evaluated.
	r3 := run(st1, prompt, true, Sampling{})
	if r3.CacheN != len(prompt)-1 || r3.PromptN != 1 || !reflect.DeepEqual(r3.Tokens, r1.Tokens) {
		t.Errorf("repeat: cache_n %d prompt_n %d tokens %v, want %d 1 %v", r3.CacheN, r3.PromptN, r3.Tokens, len(prompt)-1, r1.Tokens)
	}
	// Extended prompt: reuses the common prefix, same tokens as fresh.
	longer := append(append([]int(nil), prompt...), m.Tok.Encode(" jumps over", false, false)...)
	r4 := run(st1, longer, true, Sampling{})
	fresh, _ := m.NewState(64, pool)
	r5 := run(fresh, longer, false, Sampling{})
	if r4.CacheN != len(prompt) || r4.PromptN != len(longer)-len(prompt) {
		t.Errorf("extended: cache_n %d prompt_n %d, want %d %d", r4.CacheN, r4.PromptN, len(prompt), len(longer)-len(prompt))
	}
	if !reflect.DeepEqual(r4.Tokens, r5.Tokens) {
		t.Errorf("cached %v vs fresh %v", r4.Tokens, r5.Tokens)
	}
	// Seeded sampling repeats for a seed and (almost surely) varies across seeds.
	a := run(st1, prompt, false, Sampling{Temperature: 1.5, Seed: 9})
	b := run(st2, prompt, false, Sampling{Temperature: 1.5, Seed: 9})
	if !reflect.DeepEqual(a.Tokens, b.Tokens) {
		t.Errorf("same seed gave %v and %v", a.Tokens, b.Tokens)
	}
	differ := false
	for seed := uint64(10); seed < 15 && !differ; seed++ {
		c := run(st2, prompt, false, Sampling{Temperature: 1.5, Seed: seed})
		differ = !reflect.DeepEqual(a.Tokens, c.Tokens)
	}
	if !differ {
		t.Error("temperature sampling ignores the seed")
	}
}

func TestGenerateRejects(t *testing.T) {
	m, _ := loadSynth(t, small, 1)
	st, _ := m.NewState(8, nil)
	ctx := context.Background()
	if _, err := st.Generate(ctx, Request{Prompt: make([]int, 8)}); err == nil {
		t.Error("prompt filling the context accepted")
	}
	if _, err := st.Generate(ctx, Request{Prompt: []int{1, 9999}}); err == nil {
		t.Error("out-of-vocabulary token accepted")
	}
	if _, err := st.Generate(ctx, Request{}); err == nil {
		t.Error("empty prompt accepted")
	}
	r, err := st.Generate(ctx, Request{Prompt: []int{1, 5}, NPredict: -1, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Tokens) != 8-2+1 || r.Stop != StopLimit {
		t.Errorf("unbounded generation in an 8-token context gave %d tokens (%s)", len(r.Tokens), r.Stop)
	}
}

func TestLoadRejectsBrokenModels(t *testing.T) {
	var buf bytes.Buffer
	gguf.Synth(&buf, small, 1)
	f, _ := gguf.Parse(buf.Bytes())
	for key, mutate := range map[string]func(w *gguf.Writer){
		"wrong architecture": func(w *gguf.Writer) { w.AddKV("general.architecture", "falcon") },
		"missing tensor":     nil,
	} {
		var w gguf.Writer
		for _, kv := range f.KV {
			if key == "wrong architecture" && kv.Key == "general.architecture" {
				continue
			}
			w.AddKV(kv.Key, kv.Value)
		}
		if mutate != nil {
			mutate(&w)
		}
		for _, ti := range f.Tensors {
			if key == "missing tensor" && ti.Name == "blk.1.ffn_up.weight" {
				continue
			}
			data := f.TensorData(ti)
			w.AddTensor(ti.Name, ti.Type, ti.Dims, func() ([]byte, error) { return data, nil })
		}
		var out bytes.Buffer
		if _, err := w.WriteTo(&out); err != nil {
			t.Fatal(err)
		}
		g, err := gguf.Parse(out.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Load(g); err == nil {
			t.Errorf("%s: loaded", key)
		} else {
			t.Logf("%s: %v", key, err)
		}
	}
}
