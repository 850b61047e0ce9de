package llama

import (
	"context"
	"errors"
	"fmt"

	"meshd/engine/runner/kernels"
)

// batch is the scratch space of one prompt chunk: every activation as a
// matrix of n rows, one per token.
type batch struct {
	n                  int
	x, xb, xb2, q, att []float32 // n·Dim
	hb, hb2            []float32 // n·FF
	qDim, qFF          []*kernels.QVec
	cos, sin           []float32 // n·NRot/2
	attn               batchAttention
}

// batchAttention is one layer's causal attention for T new positions
// pos0… over the pool, a loop over heads; row t sees positions ≤ pos0+t.
type batchAttention struct {
	s       *State
	k, v    []float32
	pos0, T int
}

func (a *batchAttention) Range(lo, hi int) {
	s, b, m := a.s, a.s.b, a.s.m
	hd, kvDim := m.HeadDim, m.KVHeads*m.HeadDim
	for h := lo; h < hi; h++ {
		scores := s.scores[h*s.nCtx:]
		off := (h / s.attn.group) * hd
		for t := range a.T {
			o := t*m.Dim + h*hd
			kernels.Attend(b.att[o:o+hd], b.q[o:o+hd], a.k, a.v, a.pos0+t+1, kvDim, off, s.attn.scale, scores)
		}
	}
}

func (s *State) batchScratch() *batch {
	if s.b != nil {
		return s.b
	}
	m := s.m
	n := max(1, min(s.chunk, s.nCtx))
	b := &batch{n: n,
		x: make([]float32, n*m.Dim), xb: make([]float32, n*m.Dim), xb2: make([]float32, n*m.Dim),
		q: make([]float32, n*m.Dim), att: make([]float32, n*m.Dim),
		hb: make([]float32, n*m.FF), hb2: make([]float32, n*m.FF),
		cos: make([]float32, n*m.NRot/2), sin: make([]float32, n*m.NRot/2),
	}
	if s.qDim != nil || s.qFF != nil {
		b.qDim, b.qFF = make([]*kernels.QVec, n), make([]*kernels.QVec, n)
		for i := range n {
			b.qDim[i], b.qFF[i] = m.newActivations()
		}
		if s.qDim == nil {
			b.qDim = nil
		}
		if s.qFF == nil {
			b.qFF = nil
		}
	}
	b.attn.s = s
	s.b = b
	return b
}

// EvalBatch runs tokens at the next positions, a chunk of prompt tokens
// at a time through the layers as a matrix (every projection one
// kernels.MatMul over the chunk), and returns the last token's logits,
// valid until the next evaluation. It computes what len(tokens) calls of
// Eval would, up to float rounding. ctx is checked between layers; on an
// error the cache keeps the chunks already completed.
func (s *State) EvalBatch(ctx context.Context, tokens []int) ([]float32, error) {
	if err := s.checkBatch(tokens); err != nil {
		return nil, err
	}
	if len(tokens) == 1 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return s.Eval(tokens[0])
	}
	if err := s.run(ctx, tokens, true, nil); err != nil {
		return nil, err
	}
	return s.logits, nil
}

func (s *State) checkBatch(tokens []int) error {
	if len(tokens) == 0 {
		return errors.New("llama: no tokens to evaluate")
	}
	if len(s.tokens)+len(tokens) > s.nCtx {
		return fmt.Errorf("llama: %d tokens after %d cached, context %d: %w", len(tokens), len(s.tokens), s.nCtx, ErrContextExceeded)
	}
	for _, t := range tokens {
		if t < 0 || t >= s.m.Vocab {
			return fmt.Errorf("llama: token %d outside the %d-token vocabulary", t, s.m.Vocab)
		}
	}
	return nil
}

// run evaluates tokens chunk by chunk. With logits set the last token's
// logits end in s.logits; hidden, if not nil, is handed each chunk's
// final-normed hidden states (rows of Dim, the first being token t0).
func (s *State) run(ctx context.Context, tokens []int, logits bool, hidden func(t0 int, rows []float32)) error {
	b := s.batchScratch()
	for c0 := 0; c0 < len(tokens); c0 += b.n {
		chunk := tokens[c0:min(c0+b.n, len(tokens))]
		last := c0+len(chunk) == len(tokens)
		if err := s.forward(ctx, chunk, logits && last, hidden != nil); err != nil {
			return err
		}
		if hidden != nil {
			hidden(c0, b.xb[:len(chunk)*s.m.Dim])
		}
		s.tokens = append(s.tokens, chunk...)
	}
	return nil
}

// rows runs fn(t) for t in [0, T) over the pool.
func (s *State) rows(T int, fn func(t int)) {
	s.pool.For(T, 1, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			fn(t)
		}
	})
}

// forward runs one chunk at positions len(s.tokens)… through the layers,
// filling its cache rows. It leaves the final-normed hidden states in
// b.xb when hidden is set and the last row's logits in s.logits when
// logits is set.
func (s *State) forward(ctx context.Context, toks []int, logits, hidden bool) error {
	m, b := s.m, s.b
	T, D, F := len(toks), m.Dim, m.FF
	pos0 := len(s.tokens)
	kvDim := m.KVHeads * m.HeadDim
	half := m.NRot / 2
	for t, tok := range toks {
		if err := m.embd.Row(tok, b.x[t*D:(t+1)*D]); err != nil {
			return fmt.Errorf("llama: embedding of token %d: %w", tok, err)
		}
		m.ropeAngles(pos0+t, b.cos[t*half:(t+1)*half], b.sin[t*half:(t+1)*half])
	}
	x, xb, xb2, q, att := b.x[:T*D], b.xb[:T*D], b.xb2[:T*D], b.q[:T*D], b.att[:T*D]
	hb, hb2 := b.hb[:T*F], b.hb2[:T*F]
	var qD, qF []*kernels.QVec
	if b.qDim != nil {
		qD = b.qDim[:T]
	}
	if b.qFF != nil {
		qF = b.qFF[:T]
	}
	// normQ sets xb = rms(x)·w per row and quantises it.
	normQ := func(w []float32) {
		s.rows(T, func(t int) {
			kernels.RMSNorm(xb[t*D:(t+1)*D], x[t*D:(t+1)*D], w, m.Eps)
			if qD != nil {
				qD[t].Quantize(xb[t*D : (t+1)*D])
			}
		})
	}
	for li := range m.layers {
		if err := ctx.Err(); err != nil {
			return err
		}
		l := &m.layers[li]
		kc := s.k[li][pos0*kvDim : (pos0+T)*kvDim]
		vc := s.v[li][pos0*kvDim : (pos0+T)*kvDim]
		normQ(l.attnNorm)
		kernels.MatMul(s.pool, l.q, q, xb, T, qD)
		kernels.MatMul(s.pool, l.k, kc, xb, T, qD)
		kernels.MatMul(s.pool, l.v, vc, xb, T, qD)
		s.rows(T, func(t int) {
			qt, kt, vt := q[t*D:(t+1)*D], kc[t*kvDim:(t+1)*kvDim], vc[t*kvDim:(t+1)*kvDim]
			addBias(qt, l.bq)
			addBias(kt, l.bk)
			addBias(vt, l.bv)
			cs, sn := b.cos[t*half:(t+1)*half], b.sin[t*half:(t+1)*half]
			m.rope(qt, cs, sn)
			m.rope(kt, cs, sn)
		})
		b.attn.k, b.attn.v, b.attn.pos0, b.attn.T = s.k[li], s.v[li], pos0, T
		s.pool.Run(m.Heads, 1, &b.attn)
		if qD != nil {
			s.rows(T, func(t int) { qD[t].Quantize(att[t*D : (t+1)*D]) })
		}
		kernels.MatMul(s.pool, l.o, xb2, att, T, qD)
		s.rows(T, func(t int) {
			addBias(xb2[t*D:(t+1)*D], l.bo)
			kernels.Add(x[t*D:(t+1)*D], xb2[t*D:(t+1)*D])
		})

		normQ(l.ffnNorm)
		kernels.MatMul(s.pool, l.gate, hb, xb, T, qD)
		kernels.MatMul(s.pool, l.up, hb2, xb, T, qD)
		s.rows(T, func(t int) {
			h := hb[t*F : (t+1)*F]
			kernels.SiLUMul(h, h, hb2[t*F:(t+1)*F])
			if qF != nil {
				qF[t].Quantize(h)
			}
		})
		kernels.MatMul(s.pool, l.down, xb2, hb, T, qF)
		kernels.Add(x, xb2)
	}
	if hidden {
		s.rows(T, func(t int) { kernels.RMSNorm(xb[t*D:(t+1)*D], x[t*D:(t+1)*D], m.outNorm, m.Eps) })
	}
	if logits {
		kernels.RMSNorm(s.xb, x[(T-1)*D:], m.outNorm, m.Eps)
		s.quantize(s.qDim, s.xb)
		s.matVec(m.output, s.logits, s.xb, s.qDim)
	}
	return nil
}
