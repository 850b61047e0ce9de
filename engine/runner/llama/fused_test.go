package llama

import (
	"math"
	"testing"

	"meshd/engine/runner/gguf"
	"meshd/engine/runner/kernels"
)

// unfusedEval is Eval written one operation at a time: each product its
// own pool loop, SiLU and every quantisation on their own after it. Eval
// fuses these (gate, up, SiLU and the quantisation for down in one loop;
// the attention output quantised by the attention loop) without changing
// any arithmetic, so the two must agree bit for bit.
func unfusedEval(s *State, tok int) []float32 {
	m := s.m
	pos := len(s.tokens)
	kvDim := m.KVHeads * m.HeadDim
	attn := s.attn
	attn.quant = nil
	if err := m.embd.Row(tok, s.x); err != nil {
		panic(err)
	}
	m.ropeAngles(pos, s.cos, s.sin)
	for li := range m.layers {
		l := &m.layers[li]
		kernels.RMSNorm(s.xb, s.x, l.attnNorm, m.Eps)
		s.quantize(s.qDim, s.xb)
		kc := s.k[li][pos*kvDim : (pos+1)*kvDim]
		vc := s.v[li][pos*kvDim : (pos+1)*kvDim]
		kernels.MatVec(s.pool, l.q, s.q, s.xb, s.qDim)
		kernels.MatVec(s.pool, l.k, kc, s.xb, s.qDim)
		kernels.MatVec(s.pool, l.v, vc, s.xb, s.qDim)
		addBias(s.q, l.bq)
		addBias(kc, l.bk)
		addBias(vc, l.bv)
		m.rope(s.q, s.cos, s.sin)
		m.rope(kc, s.cos, s.sin)
		attn.k, attn.v, attn.n = s.k[li], s.v[li], pos+1
		s.pool.Run(m.Heads, 1, &attn)
		s.quantize(s.qDim, s.att)
		kernels.MatVec(s.pool, l.o, s.xb2, s.att, s.qDim)
		addBias(s.xb2, l.bo)
		kernels.Add(s.x, s.xb2)
		kernels.RMSNorm(s.xb, s.x, l.ffnNorm, m.Eps)
		s.quantize(s.qDim, s.xb)
		kernels.MatVec(s.pool, l.gate, s.hb, s.xb, s.qDim)
		kernels.MatVec(s.pool, l.up, s.hb2, s.xb, s.qDim)
		kernels.SiLUMul(s.hb, s.hb, s.hb2)
		s.quantize(s.qFF, s.hb)
		kernels.MatVec(s.pool, l.down, s.xb2, s.hb, s.qFF)
		kernels.Add(s.x, s.xb2)
	}
	kernels.RMSNorm(s.xb, s.x, m.outNorm, m.Eps)
	s.quantize(s.qDim, s.xb)
	kernels.MatVec(s.pool, m.output, s.logits, s.xb, s.qDim)
	s.tokens = append(s.tokens, tok)
	return s.logits
}

// TestEvalMatchesUnfused decodes with Eval and with unfusedEval side by
// side, for activations quantised in the 32-value form (Q8_0, and qwen2
// with biases), the 256-value form (Q4_K), one in each (Q4_K_M with a
// feed-forward length that is no multiple of 256, so that down is Q5_0
// and Q8_0) and none (F16), on pools of 1 to 3 goroutines: the logits
// must be equal bit for bit at every step.
func TestEvalMatchesUnfused(t *testing.T) {
	shape := gguf.Shape{Layers: 2, Dim: 512, Heads: 8, KVHeads: 2, FF: 1536, Vocab: 1000, Ctx: 64, Type: gguf.Q8_0, SeparateOutput: true}
	type model struct {
		name string
		m    *Model
	}
	var models []model
	for _, typ := range []gguf.TensorType{gguf.Q8_0, gguf.Q4_K, gguf.F16} {
		s := shape
		s.Type = typ
		m, _ := loadSynth(t, s, 21)
		models = append(models, model{typ.String(), m})
	}
	s := shape
	m, _ := loadVariant(t, s, 22, variant{arch: "qwen2", biases: true})
	models = append(models, model{"qwen2-q8_0", m})
	s.Mix, s.FF = gguf.MixQ4_K_M, 1568 // down falls back to Q5_0 and Q8_0
	m, _ = loadSynth(t, s, 23)
	models = append(models, model{"q4_k_m", m})
	for _, mc := range models {
		for _, workers := range []int{1, 2, 3} {
			pool := kernels.NewPool(workers)
			a, _ := mc.m.NewState(40, pool)
			b, _ := mc.m.NewState(40, pool)
			tok := 5
			for step := range 24 {
				got, err := a.Eval(tok)
				if err != nil {
					t.Fatal(err)
				}
				want := unfusedEval(b, tok)
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%s, %d workers, step %d: logit %d is %g, unfused %g", mc.name, workers, step, i, got[i], want[i])
					}
				}
				tok = Argmax(got)
			}
			pool.Close()
		}
	}
}
