package bert

import (
	"context"
	"errors"
	"fmt"
	"math"

	"meshd/engine/runner/kernels"
)

// State is the scratch space of one encoder pass over at most Ctx tokens:
// every activation as a matrix with a row per token. An encoder keeps
// nothing between calls, so a State is only reused memory. It is not safe
// for concurrent use; states over one model may share a pool when used
// one at a time.
type State struct {
	m    *Model
	pool *kernels.Pool
	nCtx int

	x, q, k, v, att, tmp []float32 // nCtx·Dim
	hb                   []float32 // nCtx·FF
	scores               []float32 // Heads·nCtx
	qDim, qFF            []*kernels.QVec
	attn                 attention
}

// attention is one layer's bidirectional attention over the pool, a loop
// over heads: every token attends to all T tokens.
type attention struct {
	s     *State
	T     int
	scale float32
}

func (a *attention) Range(lo, hi int) {
	s, m := a.s, a.s.m
	D, hd := m.Dim, m.HeadDim
	for h := lo; h < hi; h++ {
		scores := s.scores[h*s.nCtx:]
		for t := range a.T {
			o := t*D + h*hd
			kernels.Attend(s.att[o:o+hd], s.q[o:o+hd], s.k, s.v, a.T, D, h*hd, a.scale, scores)
		}
	}
}

// NewState allocates scratch for inputs of up to nCtx tokens, which must
// not exceed the model's trained context (its position embeddings).
func (m *Model) NewState(nCtx int, pool *kernels.Pool) (*State, error) {
	if nCtx < 1 {
		return nil, fmt.Errorf("bert: context size %d out of range", nCtx)
	}
	if nCtx > m.CtxTrain {
		return nil, fmt.Errorf("bert: context size %d exceeds the model's trained context of %d", nCtx, m.CtxTrain)
	}
	D := nCtx * m.Dim
	s := &State{m: m, pool: pool, nCtx: nCtx,
		x: make([]float32, D), q: make([]float32, D), k: make([]float32, D), v: make([]float32, D),
		att: make([]float32, D), tmp: make([]float32, D), hb: make([]float32, nCtx*m.FF),
		scores: make([]float32, m.Heads*nCtx),
	}
	s.attn = attention{s: s, scale: float32(1 / math.Sqrt(float64(m.HeadDim)))}
	if d, f := m.newActivations(); d != nil || f != nil {
		qd, qf := make([]*kernels.QVec, nCtx), make([]*kernels.QVec, nCtx)
		qd[0], qf[0] = d, f
		for t := 1; t < nCtx; t++ {
			qd[t], qf[t] = m.newActivations()
		}
		if d != nil {
			s.qDim = qd
		}
		if f != nil {
			s.qFF = qf
		}
	}
	return s, nil
}

// Ctx is the most tokens one Embed call takes.
func (s *State) Ctx() int { return s.nCtx }

// Embed runs tokens through the encoder and returns their embedding: the
// last layer's hidden states pooled per the model's Pooling and
// L2-normalised, as llama-server returns them. PoolMean averages the
// tokens' states, PoolCLS takes the first token's (the [CLS] the
// tokenizer adds), PoolLast the last token's; each gives Dim values.
// PoolNone gives one L2-normalised row of Dim values per token,
// len(tokens)·Dim in all. ctx is checked between layers.
func (s *State) Embed(ctx context.Context, tokens []int) ([]float32, error) {
	m := s.m
	if len(tokens) == 0 {
		return nil, errors.New("bert: no tokens to embed")
	}
	if len(tokens) > s.nCtx {
		return nil, fmt.Errorf("bert: %d tokens exceed the context of %d", len(tokens), s.nCtx)
	}
	for _, t := range tokens {
		if t < 0 || t >= m.Vocab {
			return nil, fmt.Errorf("bert: token %d outside the %d-token vocabulary", t, m.Vocab)
		}
	}
	if err := s.forward(ctx, tokens); err != nil {
		return nil, err
	}
	T, D := len(tokens), m.Dim
	x := s.x[:T*D]
	var out []float32
	switch m.Pooling {
	case PoolNone:
		out = append([]float32(nil), x...)
	case PoolMean:
		sum := make([]float64, D)
		for i, v := range x {
			sum[i%D] += float64(v)
		}
		out = make([]float32, D)
		for i, v := range sum {
			out[i] = float32(v / float64(T))
		}
	case PoolCLS:
		out = append([]float32(nil), x[:D]...)
	case PoolLast:
		out = append([]float32(nil), x[(T-1)*D:]...)
	default:
		return nil, fmt.Errorf("bert: embeddings with pooling %s are not supported", m.Pooling)
	}
	for r := 0; r < len(out); r += D {
		normalize(out[r : r+D])
	}
	return out, nil
}

// rows runs fn(t) for t in [0, T) over the pool.
func (s *State) rows(T int, fn func(t int)) {
	s.pool.For(T, 1, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			fn(t)
		}
	})
}

// forward leaves the last layer's hidden states of toks in s.x. Every
// projection is one kernels.MatMul over all the tokens, reading each
// weight tile once for the whole input.
func (s *State) forward(ctx context.Context, toks []int) error {
	m := s.m
	T, D, F := len(toks), m.Dim, m.FF
	x, q, k, v, att, tmp, hb := s.x[:T*D], s.q[:T*D], s.k[:T*D], s.v[:T*D], s.att[:T*D], s.tmp[:T*D], s.hb[:T*F]
	var qD, qF []*kernels.QVec
	if s.qDim != nil {
		qD = s.qDim[:T]
	}
	if s.qFF != nil {
		qF = s.qFF[:T]
	}
	// quantize fills a's quantised rows for the matrices that read it.
	quantize := func(qs []*kernels.QVec, a []float32, n int) {
		if qs == nil {
			return
		}
		s.rows(T, func(t int) { qs[t].Quantize(a[t*n : (t+1)*n]) })
	}

	// Token, position and token-type-0 embeddings, summed and normed.
	errs := make([]error, T)
	s.rows(T, func(t int) {
		row := x[t*D : (t+1)*D]
		if err := m.embd.Row(toks[t], row); err != nil {
			errs[t] = fmt.Errorf("bert: embedding of token %d: %w", toks[t], err)
			return
		}
		kernels.Add(row, m.pos[t*D:(t+1)*D])
		if m.type0 != nil {
			kernels.Add(row, m.type0)
		}
		layerNorm(row, row, m.embNormW, m.embNormB, m.Eps)
	})
	if err := errors.Join(errs...); err != nil {
		return err
	}

	for li := range m.layers {
		if err := ctx.Err(); err != nil {
			return err
		}
		l := &m.layers[li]
		quantize(qD, x, D)
		kernels.MatMul(s.pool, l.q, q, x, T, qD)
		kernels.MatMul(s.pool, l.k, k, x, T, qD)
		kernels.MatMul(s.pool, l.v, v, x, T, qD)
		s.rows(T, func(t int) {
			addBias(q[t*D:(t+1)*D], l.bq)
			addBias(k[t*D:(t+1)*D], l.bk)
			addBias(v[t*D:(t+1)*D], l.bv)
		})
		s.attn.T = T
		s.pool.Run(m.Heads, 1, &s.attn)
		quantize(qD, att, D)
		kernels.MatMul(s.pool, l.o, tmp, att, T, qD)
		// Post-norm: x = LN(x + attention), the input of the FFN.
		s.rows(T, func(t int) {
			r, xr := tmp[t*D:(t+1)*D], x[t*D:(t+1)*D]
			addBias(r, l.bo)
			kernels.Add(r, xr)
			layerNorm(xr, r, l.attnNormW, l.attnNormB, m.Eps)
		})

		quantize(qD, x, D)
		kernels.MatMul(s.pool, l.up, hb, x, T, qD)
		s.rows(T, func(t int) {
			h := hb[t*F : (t+1)*F]
			addBias(h, l.bup)
			for i, a := range h {
				h[i] = gelu(a)
			}
			if qF != nil {
				qF[t].Quantize(h)
			}
		})
		kernels.MatMul(s.pool, l.down, tmp, hb, T, qF)
		// x = LN(x + FFN): the block's output.
		s.rows(T, func(t int) {
			r, xr := tmp[t*D:(t+1)*D], x[t*D:(t+1)*D]
			addBias(r, l.bdown)
			kernels.Add(r, xr)
			layerNorm(xr, r, l.outNormW, l.outNormB, m.Eps)
		})
	}
	return nil
}

// layerNorm writes (x − mean) / sqrt(var + eps) ⊙ w + b to out (which may
// be x), the statistics accumulated in float64 as ggml_norm does.
func layerNorm(out, x, w, b []float32, eps float32) {
	n := float64(len(x))
	var sum float64
	for _, v := range x {
		sum += float64(v)
	}
	mean := sum / n
	var ss float64
	for _, v := range x {
		d := float64(v) - mean
		ss += d * d
	}
	scale := 1 / math.Sqrt(ss/n+float64(eps))
	w, b, out = w[:len(x)], b[:len(x)], out[:len(x)]
	for i, v := range x {
		out[i] = float32((float64(v)-mean)*scale)*w[i] + b[i]
	}
}

// gelu is ggml_gelu's tanh approximation of GELU, the activation
// llama.cpp's BERT graph uses (LLM_FFN_GELU); the exact erf form of the
// original BERT differs from it by less than 1e-3.
func gelu(x float32) float32 {
	const sqrt2OverPi = 0.79788456080286535587989211986876
	f := float64(x)
	return float32(0.5 * f * (1 + math.Tanh(sqrt2OverPi*f*(1+0.044715*f*f))))
}

func addBias(x, b []float32) {
	if b != nil {
		kernels.Add(x, b)
	}
}

// normalize scales x to unit Euclidean length (a zero vector stays zero).
func normalize(x []float32) {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	if ss == 0 {
		return
	}
	inv := 1 / math.Sqrt(ss)
	for i, v := range x {
		x[i] = float32(float64(v) * inv)
	}
}
