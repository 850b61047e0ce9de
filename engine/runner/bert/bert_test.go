package bert

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"meshd/engine/runner/gguf"
	"meshd/engine/runner/kernels"
)

// small is a two-layer encoder small enough to check against float64.
var small = gguf.BERTShape{Layers: 2, Dim: 64, Heads: 4, FF: 128, Vocab: 320, Ctx: 40, Type: gguf.F32, Pooling: 1}

func synth(t testing.TB, s gguf.BERTShape, seed uint64) *gguf.File {
	t.Helper()
	var buf bytes.Buffer
	if err := gguf.SynthBERT(&buf, s, seed); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func load(t testing.TB, f *gguf.File, nCtx int) (*Model, *State) {
	t.Helper()
	m, err := Load(f)
	if err != nil {
		t.Fatal(err)
	}
	pool := kernels.NewPool(2)
	t.Cleanup(pool.Close)
	st, err := m.NewState(nCtx, pool)
	if err != nil {
		t.Fatal(err)
	}
	return m, st
}

// ref is the encoder in float64, written from llama.cpp's llm_build_bert
// and reading the weights straight from the file: it shares no code with
// the package but gguf's dequantisation.
type ref struct {
	f          *gguf.File
	D, F, H    int
	eps        float64
	causal     bool // a deliberately wrong variant, to show the test's reach
	noPosition bool // likewise
}

func (r *ref) tensor(t *testing.T, name string) []float64 {
	ti, ok := r.f.Tensor(name)
	if !ok {
		t.Fatalf("tensor %s missing", name)
	}
	v, err := gguf.Decode(ti.Type, r.f.TensorData(ti), int(ti.Elements()))
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// linear is W·x + b for W stored as rows of len(x).
func linear(w, b, x []float64) []float64 {
	n := len(x)
	out := make([]float64, len(w)/n)
	for i := range out {
		s := b[i]
		for j, xv := range x {
			s += w[i*n+j] * xv
		}
		out[i] = s
	}
	return out
}

func (r *ref) norm(x, w, b []float64) []float64 {
	var mean, vr float64
	for _, v := range x {
		mean += v
	}
	mean /= float64(len(x))
	for _, v := range x {
		vr += (v - mean) * (v - mean)
	}
	vr /= float64(len(x))
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = (v-mean)/math.Sqrt(vr+r.eps)*w[i] + b[i]
	}
	return out
}

// hidden is the last layer's states, one row per token.
func (r *ref) hidden(t *testing.T, toks []int, layers int) [][]float64 {
	D, F, H := r.D, r.F, r.H
	hd := D / H
	tok, pos, typ := r.tensor(t, "token_embd.weight"), r.tensor(t, "position_embd.weight"), r.tensor(t, "token_types.weight")
	nw, nb := r.tensor(t, "token_embd_norm.weight"), r.tensor(t, "token_embd_norm.bias")
	T := len(toks)
	x := make([][]float64, T)
	for i, id := range toks {
		e := make([]float64, D)
		for j := range e {
			e[j] = tok[id*D+j] + typ[j]
			if !r.noPosition {
				e[j] += pos[i*D+j]
			}
		}
		x[i] = r.norm(e, nw, nb)
	}
	_ = F
	for l := 0; l < layers; l++ {
		p := fmt.Sprintf("blk.%d.", l)
		w := func(n string) []float64 { return r.tensor(t, p+n) }
		wq, bq, wk, bk, wv, bv := w("attn_q.weight"), w("attn_q.bias"), w("attn_k.weight"), w("attn_k.bias"), w("attn_v.weight"), w("attn_v.bias")
		wo, bo := w("attn_output.weight"), w("attn_output.bias")
		q, k, v := make([][]float64, T), make([][]float64, T), make([][]float64, T)
		for i := range x {
			q[i], k[i], v[i] = linear(wq, bq, x[i]), linear(wk, bk, x[i]), linear(wv, bv, x[i])
		}
		next := make([][]float64, T)
		for i := range x {
			att := make([]float64, D)
			for h := 0; h < H; h++ {
				n := T
				if r.causal {
					n = i + 1
				}
				sc := make([]float64, n)
				mx := math.Inf(-1)
				for j := 0; j < n; j++ {
					for c := 0; c < hd; c++ {
						sc[j] += q[i][h*hd+c] * k[j][h*hd+c]
					}
					sc[j] /= math.Sqrt(float64(hd))
					mx = max(mx, sc[j])
				}
				var sum float64
				for j := range sc {
					sc[j] = math.Exp(sc[j] - mx)
					sum += sc[j]
				}
				for j := range sc {
					for c := 0; c < hd; c++ {
						att[h*hd+c] += sc[j] / sum * v[j][h*hd+c]
					}
				}
			}
			o := linear(wo, bo, att)
			for j := range o {
				o[j] += x[i][j]
			}
			a := r.norm(o, w("attn_output_norm.weight"), w("attn_output_norm.bias"))
			u := linear(w("ffn_up.weight"), w("ffn_up.bias"), a)
			for j, z := range u {
				u[j] = 0.5 * z * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(z+0.044715*z*z*z)))
			}
			d := linear(w("ffn_down.weight"), w("ffn_down.bias"), u)
			for j := range d {
				d[j] += a[j]
			}
			next[i] = r.norm(d, w("layer_output_norm.weight"), w("layer_output_norm.bias"))
		}
		x = next
	}
	return x
}

// embed pools and normalises like llama-server.
func (r *ref) embed(t *testing.T, toks []int, layers int, pool Pooling) []float64 {
	h := r.hidden(t, toks, layers)
	var rows [][]float64
	switch pool {
	case PoolNone:
		rows = h
	case PoolMean:
		m := make([]float64, r.D)
		for _, row := range h {
			for j, v := range row {
				m[j] += v / float64(len(h))
			}
		}
		rows = [][]float64{m}
	case PoolCLS:
		rows = h[:1]
	case PoolLast:
		rows = h[len(h)-1:]
	}
	var out []float64
	for _, row := range rows {
		var ss float64
		for _, v := range row {
			ss += v * v
		}
		for _, v := range row {
			out = append(out, v/math.Sqrt(ss))
		}
	}
	return out
}

func maxDiff(a []float32, b []float64) float64 {
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(float64(a[i])-b[i]))
	}
	return d
}

// inputs are token sequences of different lengths, the longest filling
// the context, drawn from the normal tokens.
func inputs(vocab, ctx int) [][]int {
	rng := rand.New(rand.NewPCG(7, 9))
	var out [][]int
	for _, n := range []int{1, 2, 7, 23, ctx} {
		toks := make([]int, n)
		toks[0] = 101 // [CLS], as the tokenizer starts every input
		for i := 1; i < n; i++ {
			toks[i] = 104 + rng.IntN(vocab-104)
		}
		out = append(out, toks)
	}
	return out
}

// TestEmbedMatchesReference holds Embed to the float64 encoder for every
// pooling, weight type and input length, in one state reused across
// inputs of different lengths; float weights within 2e-6 per component of
// the unit vector, Q8_0 (whose activations are quantised to 8 bits)
// within 1e-2, and a cosine above 0.999. The reference made causal, or
// without position embeddings, is at least twice those bounds away.
func TestEmbedMatchesReference(t *testing.T) {
	for _, typ := range []gguf.TensorType{gguf.F32, gguf.F16, gguf.Q8_0} {
		for _, pool := range []Pooling{PoolNone, PoolMean, PoolCLS, PoolLast} {
			t.Run(fmt.Sprintf("%s/%s", typ, pool), func(t *testing.T) {
				s := small
				s.Type, s.Pooling = typ, uint32(pool)
				f := synth(t, s, 3)
				m, st := load(t, f, s.Ctx)
				if m.Pooling != pool || m.Dim != s.Dim || m.Layers != s.Layers || m.Eps != 1e-12 {
					t.Fatalf("config %+v", m.Config)
				}
				r := &ref{f: f, D: s.Dim, F: s.FF, H: s.Heads, eps: 1e-12}
				// Measured: float weights 1.3e-7, Q8_0 5.3e-3.
				tol := 2e-6
				if typ == gguf.Q8_0 {
					tol = 1e-2
				}
				for _, toks := range inputs(s.Vocab, s.Ctx) {
					got, err := st.Embed(context.Background(), toks)
					if err != nil {
						t.Fatal(err)
					}
					want := r.embed(t, toks, s.Layers, pool)
					if len(got) != len(want) {
						t.Fatalf("%d tokens: %d values, want %d", len(toks), len(got), len(want))
					}
					if d := maxDiff(got, want); d > tol {
						t.Errorf("%d tokens: max difference %g > %g", len(toks), d, tol)
					}
					for r0 := 0; r0 < len(got); r0 += s.Dim {
						var dot, n2 float64
						for j := r0; j < r0+s.Dim; j++ {
							dot += float64(got[j]) * want[j]
							n2 += float64(got[j]) * float64(got[j])
						}
						if math.Abs(n2-1) > 1e-5 || dot < 0.999 {
							t.Errorf("%d tokens, row %d: |v|² %g, cosine to the reference %g", len(toks), r0/s.Dim, n2, dot)
						}
					}
					if len(toks) > 1 {
						for _, wrong := range []*ref{{f: f, D: s.Dim, F: s.FF, H: s.Heads, eps: 1e-12, causal: true},
							{f: f, D: s.Dim, F: s.FF, H: s.Heads, eps: 1e-12, noPosition: true}} {
							if d := maxDiff(got, wrong.embed(t, toks, s.Layers, pool)); d < 2*tol {
								t.Errorf("%d tokens: a wrong reference (%+v) is only %g away", len(toks), *wrong, d)
							}
						}
					}
				}
			})
		}
	}
}

// TestEmbedDeterministic: the same input gives the same vector bit for
// bit, whatever ran on the state before and however many workers run it.
func TestEmbedDeterministic(t *testing.T) {
	s := small
	s.Type = gguf.Q8_0
	f := synth(t, s, 4)
	_, st := load(t, f, s.Ctx)
	m2, _ := load(t, f, s.Ctx)
	pool1 := kernels.NewPool(1)
	defer pool1.Close()
	st1, err := m2.NewState(s.Ctx, pool1)
	if err != nil {
		t.Fatal(err)
	}
	in := inputs(s.Vocab, s.Ctx)
	first := make([][]float32, len(in))
	for i, toks := range in {
		if first[i], err = st.Embed(context.Background(), toks); err != nil {
			t.Fatal(err)
		}
	}
	for i := len(in) - 1; i >= 0; i-- {
		for _, x := range []*State{st, st1} {
			again, err := x.Embed(context.Background(), in[i])
			if err != nil {
				t.Fatal(err)
			}
			for j := range again {
				if again[j] != first[i][j] {
					t.Fatalf("input %d: value %d is %v, was %v", i, j, again[j], first[i][j])
				}
			}
		}
	}
}

func TestEmbedErrors(t *testing.T) {
	f := synth(t, small, 5)
	_, st := load(t, f, 16)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		ctx  context.Context
		toks []int
		want string
	}{
		{context.Background(), nil, "no tokens"},
		{context.Background(), make([]int, 17), "exceed the context of 16"},
		{context.Background(), []int{101, 320}, "outside the 320-token vocabulary"},
		{context.Background(), []int{-1}, "outside"},
		{ctx, []int{101, 200}, "context canceled"},
	} {
		if _, err := st.Embed(tc.ctx, tc.toks); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.toks, err, tc.want)
		}
	}
	m, _ := load(t, f, 16)
	if _, err := m.NewState(small.Ctx+1, nil); err == nil || !strings.Contains(err.Error(), "trained context") {
		t.Errorf("state beyond the position embeddings: %v", err)
	}
}

// TestLoadRefuses checks that files this package cannot run correctly are
// refused by name.
func TestLoadRefuses(t *testing.T) {
	base := synth(t, small, 6)
	rewrite := func(edit func(kv []gguf.KV) []gguf.KV, dropTensor string, addTensor string) *gguf.File {
		var w gguf.Writer
		for _, kv := range edit(append([]gguf.KV(nil), base.KV...)) {
			w.AddKV(kv.Key, kv.Value)
		}
		for _, ti := range base.Tensors {
			if ti.Name == dropTensor {
				continue
			}
			data := base.TensorData(ti)
			w.AddTensor(ti.Name, ti.Type, ti.Dims, func() ([]byte, error) { return data, nil })
		}
		if addTensor != "" {
			ti, _ := base.Tensor("blk.0.attn_q.weight")
			data := base.TensorData(ti)
			w.AddTensor(addTensor, ti.Type, ti.Dims, func() ([]byte, error) { return data, nil })
		}
		var buf bytes.Buffer
		if _, err := w.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		f, err := gguf.Parse(buf.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	set := func(key string, v any) func([]gguf.KV) []gguf.KV {
		return func(kv []gguf.KV) []gguf.KV {
			for i := range kv {
				if kv[i].Key == key {
					kv[i].Value = v
					return kv
				}
			}
			return append(kv, gguf.KV{Key: key, Value: v})
		}
	}
	keep := func(kv []gguf.KV) []gguf.KV { return kv }
	for _, tc := range []struct {
		name string
		f    *gguf.File
		want string
	}{
		{"arch", rewrite(set("general.architecture", "nomic-bert"), "", ""), `architecture "nomic-bert" is not supported`},
		{"causal", rewrite(set("bert.attention.causal", true), "", ""), "causal is true"},
		{"rank", rewrite(set("bert.pooling_type", uint32(4)), "", ""), "pooling rank is not supported"},
		{"tokenizer", rewrite(set("tokenizer.ggml.model", "rwkv"), "", ""), `model "rwkv" is not supported`},
		{"bias", rewrite(keep, "blk.1.ffn_up.bias", ""), "blk.1.ffn_up.bias missing"},
		{"fused", rewrite(keep, "", "blk.0.attn_qkv.weight"), "attn_qkv.weight is not part of a BERT block"},
		{"positions", rewrite(set("bert.context_length", uint32(small.Ctx+1)), "", ""), "position_embd.weight has dims"},
	} {
		if _, err := Load(tc.f); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestRealShape loads and runs the shape of e5-small-v2 (12 layers, dim
// 384, vocabulary 30522) from text, as the server does.
func TestRealShape(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a 67 MB model")
	}
	s := gguf.E5SmallV2
	f := synth(t, s, 1)
	m, st := load(t, f, s.Ctx)
	if m.Vocab != 30522 || m.Layers != 12 || m.HeadDim != 32 || m.Pooling != PoolMean {
		t.Fatalf("config %+v", m.Config)
	}
	toks := m.Tok.Encode("query: how much energy does a solar battery store?", true, true)
	if toks[0] != 101 || toks[len(toks)-1] != 102 || len(toks) < 10 {
		t.Fatalf("tokens %v", toks)
	}
	v, err := st.Embed(context.Background(), toks)
	if err != nil {
		t.Fatal(err)
	}
	var n2 float64
	for _, x := range v {
		n2 += float64(x) * float64(x)
	}
	if len(v) != 384 || math.Abs(n2-1) > 1e-5 {
		t.Fatalf("%d values, |v|² = %g", len(v), n2)
	}
}
