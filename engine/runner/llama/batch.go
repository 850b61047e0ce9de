package llama

import (
	"context"
	"errors"
	"fmt"

	"meshd/engine/runner/kernels"
)

// batch is the scratch space of rows that go through the layers together
// (a prompt chunk's tokens, or one token of each of a Decoder's states):
// every activation as a matrix of n rows.
type batch struct {
	n                  int
	x, xb, xb2, q, att []float32       // n·Dim
	hb, hb2            []float32       // n·FF
	qDim, qFF          []*kernels.QVec // per row; nil where no reader is quantised
	cos, sin           []float32       // n·NRot/2
	attn               batchAttention
}

// batchAttention is one layer's causal attention for T new positions
// pos0… over the pool, a loop over heads; row t sees positions ≤ pos0+t.
type batchAttention struct {
	s       *State
	k, v    []float32
	li      int // layer
	pos0, T int
}

func (a *batchAttention) Range(lo, hi int) {
	s, b, m := a.s, a.s.b, a.s.m
	hd := m.HeadDim
	for h := lo; h < hi; h++ {
		scores := s.scores[h*s.nCtx:]
		for t := range a.T {
			o := t*m.Dim + h*hd
			s.attend(a.li, h, b.att[o:o+hd], b.q[o:o+hd], a.pos0+t+1, scores)
		}
	}
}

// newBatch allocates the scratch of n rows.
func (m *Model) newBatch(n int) *batch {
	b := &batch{n: n,
		x: make([]float32, n*m.Dim), xb: make([]float32, n*m.Dim), xb2: make([]float32, n*m.Dim),
		q: make([]float32, n*m.Dim), att: make([]float32, n*m.Dim),
		hb: make([]float32, n*m.FF), hb2: make([]float32, n*m.FF),
		cos: make([]float32, n*m.NRot/2), sin: make([]float32, n*m.NRot/2),
	}
	for range n {
		d, f := m.newActivations()
		if d != nil {
			b.qDim = append(b.qDim, d)
		}
		if f != nil {
			b.qFF = append(b.qFF, f)
		}
	}
	return b
}

func (s *State) batchScratch() *batch {
	if s.b == nil {
		s.b = s.m.newBatch(max(1, min(s.chunk, s.nCtx)))
		s.b.attn.s = s
	}
	return s.b
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
func rows(p *kernels.Pool, T int, fn func(t int)) {
	p.For(T, 1, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			fn(t)
		}
	})
}

// The layer steps below are shared by a prompt chunk and a Decoder's
// step, which differ only in where each row's keys and values go and
// which cached positions each row attends to. Each works on the first T
// rows and applies, row by row, the operations Eval applies to its one
// token, so that a row's arithmetic is Eval's.

// embed sets row t of x to token toks[t]'s embedding and of cos and sin
// to the rope angles of position pos(t).
func (b *batch) embed(m *Model, toks []int, pos func(t int) int) error {
	D, half := m.Dim, m.NRot/2
	for t, tok := range toks {
		if err := m.embd.Row(tok, b.x[t*D:(t+1)*D]); err != nil {
			return fmt.Errorf("llama: embedding of token %d: %w", tok, err)
		}
		m.ropeAngles(pos(t), b.cos[t*half:(t+1)*half], b.sin[t*half:(t+1)*half])
	}
	return nil
}

// normQ sets row t of xb to rms(x_t)·w and quantises it.
func (b *batch) normQ(p *kernels.Pool, m *Model, T int, w []float32) {
	D := m.Dim
	rows(p, T, func(t int) {
		kernels.RMSNorm(b.xb[t*D:(t+1)*D], b.x[t*D:(t+1)*D], w, m.Eps)
		if b.qDim != nil {
			b.qDim[t].Quantize(b.xb[t*D : (t+1)*D])
		}
	})
}

// qkv normalises the rows for attention and projects them: queries into
// q, keys and values into k and v (T rows of KVHeads·HeadDim each), with
// the layer's biases and rope applied.
func (b *batch) qkv(p *kernels.Pool, m *Model, l *layer, T int, k, v []float32) {
	D, kvDim, half := m.Dim, m.KVHeads*m.HeadDim, m.NRot/2
	b.normQ(p, m, T, l.attnNorm)
	qD := b.qD(T)
	kernels.MatMul(p, l.q, b.q[:T*D], b.xb[:T*D], T, qD)
	kernels.MatMul(p, l.k, k, b.xb[:T*D], T, qD)
	kernels.MatMul(p, l.v, v, b.xb[:T*D], T, qD)
	rows(p, T, func(t int) {
		qt, kt, vt := b.q[t*D:(t+1)*D], k[t*kvDim:(t+1)*kvDim], v[t*kvDim:(t+1)*kvDim]
		addBias(qt, l.bq)
		addBias(kt, l.bk)
		addBias(vt, l.bv)
		cs, sn := b.cos[t*half:(t+1)*half], b.sin[t*half:(t+1)*half]
		m.rope(qt, cs, sn)
		m.rope(kt, cs, sn)
	})
}

// rest is the layer after attention has filled att: the output
// projection with its bias added to x, then the feed-forward block,
// x += down(silu(gate(rms(x))) · up(rms(x))).
func (b *batch) rest(p *kernels.Pool, m *Model, l *layer, T int) {
	D, F := m.Dim, m.FF
	x, xb, xb2, att := b.x[:T*D], b.xb[:T*D], b.xb2[:T*D], b.att[:T*D]
	hb, hb2 := b.hb[:T*F], b.hb2[:T*F]
	qD := b.qD(T)
	if qD != nil {
		rows(p, T, func(t int) { qD[t].Quantize(att[t*D : (t+1)*D]) })
	}
	kernels.MatMul(p, l.o, xb2, att, T, qD)
	rows(p, T, func(t int) {
		addBias(xb2[t*D:(t+1)*D], l.bo)
		kernels.Add(x[t*D:(t+1)*D], xb2[t*D:(t+1)*D])
	})

	b.normQ(p, m, T, l.ffnNorm)
	kernels.MatMul(p, l.gate, hb, xb, T, qD)
	kernels.MatMul(p, l.up, hb2, xb, T, qD)
	var qF []*kernels.QVec
	if b.qFF != nil {
		qF = b.qFF[:T]
	}
	rows(p, T, func(t int) {
		h := hb[t*F : (t+1)*F]
		kernels.SiLUMul(h, h, hb2[t*F:(t+1)*F])
		if qF != nil {
			qF[t].Quantize(h)
		}
	})
	kernels.MatMul(p, l.down, xb2, hb, T, qF)
	kernels.Add(x, xb2)
}

// qD is the quantised Dim-long activations of the first T rows (nil: none).
func (b *batch) qD(T int) []*kernels.QVec {
	if b.qDim == nil {
		return nil
	}
	return b.qDim[:T]
}

// forward runs one chunk at positions len(s.tokens)… through the layers,
// filling its cache rows. It leaves the final-normed hidden states in
// b.xb when hidden is set and the last row's logits in s.logits when
// logits is set.
func (s *State) forward(ctx context.Context, toks []int, logits, hidden bool) error {
	m, b, p := s.m, s.b, s.pool
	T, D := len(toks), m.Dim
	pos0 := len(s.tokens)
	if err := b.embed(m, toks, func(t int) int { return pos0 + t }); err != nil {
		return err
	}
	for li := range m.layers {
		if err := ctx.Err(); err != nil {
			return err
		}
		l := &m.layers[li]
		// The chunk's keys and values go straight to their cache rows.
		kr, vr := s.kvRows(li, pos0, T)
		b.qkv(p, m, l, T, kr, vr)
		s.storeKV(li, pos0, T)
		b.attn.k, b.attn.v, b.attn.pos0, b.attn.T, b.attn.li = s.k[li], s.v[li], pos0, T, li
		p.Run(m.Heads, 1, &b.attn)
		b.rest(p, m, l, T)
	}
	if hidden {
		rows(p, T, func(t int) { kernels.RMSNorm(b.xb[t*D:(t+1)*D], b.x[t*D:(t+1)*D], m.outNorm, m.Eps) })
	}
	if logits {
		kernels.RMSNorm(s.xb, b.x[(T-1)*D:T*D], m.outNorm, m.Eps)
		s.quantize(s.qDim, s.xb)
		s.matVec(m.output, s.logits, s.xb, s.qDim)
	}
	return nil
}
