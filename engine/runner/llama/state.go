package llama

import (
	"fmt"
	"math"
	"sync/atomic"

	"meshd/engine/runner/kernels"
)

// DefaultPromptChunk is how many prompt tokens EvalBatch runs through the
// layers at once: enough to read each weight tile once for many tokens,
// few enough that the batch's activations (chunk × (4·dim + 2·ff) floats)
// stay small.
const DefaultPromptChunk = 128

// State is one sequence's KV cache and scratch space. It is not safe for
// concurrent use.
type State struct {
	m      *Model
	pool   *kernels.Pool
	nCtx   int
	k, v   [][]float32 // per layer, nCtx rows of KVHeads·HeadDim
	tokens []int       // tokens whose keys and values are in the cache
	kvq    *kvQuant    // nil: float32 keys and values (kvcache.go)

	x, xb, xb2, q, att, hb, hb2, logits []float32
	cos, sin                            []float32
	scores                              []float32
	qDim, qFF                           *kernels.QVec

	// Reused each step so the hot loop neither allocates nor dispatches
	// more than once per group of products reading one activation.
	qkv, one kernels.MatVecs
	attn     attention
	ffn      ffnUp

	chunk int    // prompt tokens per batch
	b     *batch // batch scratch, allocated on the first batch
}

// attention is one layer's attention over the pool, a loop over heads.
// Each range also quantises the blocks of the output it completes, for
// attn_output to read, so that no core quantises all of it alone after
// the loop.
type attention struct {
	s         *State
	k, v      []float32
	li        int // layer
	n, stride int
	group, hd int
	scale     float32
	quant     *blockQuant // nil: no quantised reader
}

func (a *attention) Range(lo, hi int) {
	s := a.s
	for h := lo; h < hi; h++ {
		if s.kvq != nil {
			s.attend(a.li, h, s.att[h*a.hd:(h+1)*a.hd], s.q[h*a.hd:(h+1)*a.hd], a.n, s.scores[h*s.nCtx:])
			continue
		}
		kernels.Attend(s.att[h*a.hd:(h+1)*a.hd], s.q[h*a.hd:(h+1)*a.hd], a.k, a.v, a.n, a.stride, (h/a.group)*a.hd, a.scale, s.scores[h*s.nCtx:])
	}
	a.quant.filled(lo*a.hd, hi*a.hd)
}

// ffnUp is a decode step's gate and up projections as one pool loop over
// FF rows: each range computes its rows of both, applies SiLU and the
// product to them, and quantises the blocks it completes for the down
// projection. One dispatch does what took three loops and a serial
// quantisation, and each range's values are still in cache for SiLU.
type ffnUp struct {
	s        *State
	gate, up *kernels.Matrix
	quant    *blockQuant // nil: no quantised reader
}

func (f *ffnUp) Range(lo, hi int) {
	s := f.s
	h, h2 := s.hb[lo:hi], s.hb2[lo:hi]
	f.gate.DotRows(lo, hi, h, s.xb, s.qDim)
	f.up.DotRows(lo, hi, h2, s.xb, s.qDim)
	kernels.SiLUMul(h, h, h2)
	f.quant.filled(lo, hi)
}

// grain is the rows per chunk unit of the loop: as MatVecs sizes them,
// about 16 KiB of one matrix's weights, a multiple of four rows.
func (f *ffnUp) grain() int {
	rb := max(f.gate.Bytes()/f.gate.Rows, f.up.Bytes()/f.up.Rows)
	return max(4, (16<<10)/rb&^3)
}

// blockQuant quantises an activation x into q block by block while a
// pool loop fills x in ranges that need not line up with the blocks: each
// block counts the values still to come, and whichever range completes
// it quantises it (the atomic count orders the other ranges' writes
// before that). Every block is quantised on its own, so the result is
// Quantize(x) bit for bit.
type blockQuant struct {
	q    *kernels.QVec
	x    []float32
	bl   int
	left []atomic.Int32 // values of each block not yet filled
}

// newBlockQuant returns nil when q is nil (no quantised reader).
func newBlockQuant(q *kernels.QVec, x []float32) *blockQuant {
	if q == nil {
		return nil
	}
	b := &blockQuant{q: q, x: x, bl: q.BlockLen()}
	b.left = make([]atomic.Int32, (len(x)+b.bl-1)/b.bl)
	for i := range b.left {
		b.left[i].Store(int32(b.size(i)))
	}
	return b
}

func (b *blockQuant) size(i int) int { return min(len(b.x), (i+1)*b.bl) - i*b.bl }

// filled records that x[lo:hi] holds its final values, quantising every
// block that completes; the count is reset for the next loop.
func (b *blockQuant) filled(lo, hi int) {
	if b == nil || lo >= hi {
		return
	}
	for i := lo / b.bl; i*b.bl < hi; i++ {
		a, e := max(lo, i*b.bl), min(hi, (i+1)*b.bl)
		if b.left[i].Add(-int32(e-a)) == 0 {
			n := b.size(i)
			b.left[i].Store(int32(n))
			b.q.QuantizeRange(b.x, i*b.bl, i*b.bl+n)
		}
	}
}

// NewState allocates a cache for exactly nCtx positions, which must not
// exceed the model's trained context (TrainedContext). The pool runs the
// matrix products; it may be shared by states used one at a time.
func (m *Model) NewState(nCtx int, pool *kernels.Pool) (*State, error) {
	return m.newState(nCtx, pool, StateOptions{})
}

// newState is NewState with float32 caches only for the sides o keeps
// in float32 (NewStateWith allocates the others).
func (m *Model) newState(nCtx int, pool *kernels.Pool, o StateOptions) (*State, error) {
	if nCtx < 1 || nCtx > 1<<20 {
		return nil, fmt.Errorf("llama: context size %d out of range", nCtx)
	}
	if nCtx > m.CtxTrain {
		return nil, fmt.Errorf("llama: context size %d exceeds the model's trained context of %d", nCtx, m.CtxTrain)
	}
	kvDim := m.KVHeads * m.HeadDim
	s := &State{m: m, pool: pool, nCtx: nCtx, chunk: DefaultPromptChunk,
		k: make([][]float32, m.Layers), v: make([][]float32, m.Layers),
		x: make([]float32, m.Dim), xb: make([]float32, m.Dim), xb2: make([]float32, m.Dim),
		q: make([]float32, m.Dim), att: make([]float32, m.Dim),
		hb: make([]float32, m.FF), hb2: make([]float32, m.FF), logits: make([]float32, m.Vocab),
		cos: make([]float32, m.NRot/2), sin: make([]float32, m.NRot/2),
		scores: make([]float32, m.Heads*nCtx),
	}
	s.qDim, s.qFF = m.newActivations()
	s.qkv = kernels.MatVecs{X: s.xb, QX: s.qDim, Prods: make([]kernels.Product, 3)}
	s.one = kernels.MatVecs{Prods: make([]kernels.Product, 1)}
	s.attn = attention{s: s, stride: kvDim, group: m.Heads / m.KVHeads, hd: m.HeadDim,
		scale: float32(1 / math.Sqrt(float64(m.HeadDim))), quant: newBlockQuant(s.qDim, s.att)}
	s.ffn = ffnUp{s: s, quant: newBlockQuant(s.qFF, s.hb)}
	for l := range s.k {
		if o.CacheK == KVF32 {
			s.k[l] = make([]float32, nCtx*kvDim)
		}
		if o.CacheV == KVF32 {
			s.v[l] = make([]float32, nCtx*kvDim)
		}
	}
	return s, nil
}

// newActivations allocates the quantised forms of a Dim-long and an
// FF-long activation, each with only the forms its readers need (the
// K-quants read the 256-value form, the other quantised types the
// 32-value one): quantising a form no matrix reads would cost a decode
// step time for nothing. Either is nil where no reader is quantised or
// the length does not split into blocks.
func (m *Model) newActivations() (dim, ff *kernels.QVec) {
	if m.Dim%32 == 0 {
		dim = kernels.NewActivation(m.Dim, m.dimReaders...)
	}
	if m.FF%32 == 0 {
		ff = kernels.NewActivation(m.FF, m.ffReaders...)
	}
	return dim, ff
}

// Ctx is the number of positions the cache holds.
func (s *State) Ctx() int { return s.nCtx }

// Tokens are the tokens whose keys and values are cached, in order.
func (s *State) Tokens() []int { return s.tokens }

// Truncate forgets cached positions from n on.
func (s *State) Truncate(n int) {
	if n < len(s.tokens) {
		s.tokens = s.tokens[:n]
	}
}

// Eval runs one token at the next position and returns the logits, which
// stay valid until the next call. It is the decode step; EvalBatch runs
// many tokens faster.
func (s *State) Eval(tok int) ([]float32, error) {
	m := s.m
	pos := len(s.tokens)
	if pos >= s.nCtx {
		return nil, fmt.Errorf("llama: context of %d tokens is full", s.nCtx)
	}
	if tok < 0 || tok >= m.Vocab {
		return nil, fmt.Errorf("llama: token %d outside the %d-token vocabulary", tok, m.Vocab)
	}
	if err := m.embd.Row(tok, s.x); err != nil {
		return nil, fmt.Errorf("llama: embedding of token %d: %w", tok, err)
	}
	m.ropeAngles(pos, s.cos, s.sin)
	for li := range m.layers {
		l := &m.layers[li]
		kernels.RMSNorm(s.xb, s.x, l.attnNorm, m.Eps)
		s.quantize(s.qDim, s.xb)
		kc, vc := s.kvRows(li, pos, 1)
		s.qkv.Prods[0] = kernels.Product{M: l.q, Out: s.q}
		s.qkv.Prods[1] = kernels.Product{M: l.k, Out: kc}
		s.qkv.Prods[2] = kernels.Product{M: l.v, Out: vc}
		s.qkv.Run(s.pool)
		addBias(s.q, l.bq)
		addBias(kc, l.bk)
		addBias(vc, l.bv)
		m.rope(s.q, s.cos, s.sin)
		m.rope(kc, s.cos, s.sin)
		s.storeKV(li, pos, 1)
		s.attn.k, s.attn.v, s.attn.n, s.attn.li = s.k[li], s.v[li], pos+1, li
		s.pool.Run(m.Heads, 1, &s.attn) // quantises s.att into s.qDim
		s.matVec(l.o, s.xb2, s.att, s.qDim)
		addBias(s.xb2, l.bo)
		kernels.Add(s.x, s.xb2)

		kernels.RMSNorm(s.xb, s.x, l.ffnNorm, m.Eps)
		s.quantize(s.qDim, s.xb)
		s.ffn.gate, s.ffn.up = l.gate, l.up
		s.pool.Run(m.FF, s.ffn.grain(), &s.ffn) // hb = silu(gate)·up, quantised into s.qFF
		s.matVec(l.down, s.xb2, s.hb, s.qFF)
		kernels.Add(s.x, s.xb2)
	}
	kernels.RMSNorm(s.xb, s.x, m.outNorm, m.Eps)
	s.quantize(s.qDim, s.xb)
	s.matVec(m.output, s.logits, s.xb, s.qDim)
	s.tokens = append(s.tokens, tok)
	return s.logits, nil
}

// matVec is kernels.MatVec through the state's reusable batch.
func (s *State) matVec(w *kernels.Matrix, out, x []float32, qx *kernels.QVec) {
	s.one.X, s.one.QX = x, qx
	s.one.Prods[0] = kernels.Product{M: w, Out: out}
	s.one.Run(s.pool)
}

func (s *State) quantize(q *kernels.QVec, x []float32) {
	if q != nil {
		q.Quantize(x)
	}
}

// addBias does x += b for a bias b (nil: none).
func addBias(x, b []float32) {
	if b != nil {
		kernels.Add(x, b)
	}
}

// ropeAngles fills cos and sin (len NRot/2) for position pos.
func (m *Model) ropeAngles(pos int, cos, sin []float32) {
	for i, f := range m.invFreq {
		sn, cs := math.Sincos(float64(pos) * f)
		cos[i], sin[i] = float32(cs), float32(sn)
	}
}

// rope rotates every head of x (heads of HeadDim values) by the angles
// in cos and sin, in the model's layout: NORM rotates (x[2i], x[2i+1]),
// NEOX rotates (x[i], x[i+NRot/2]); values past NRot are left alone.
func (m *Model) rope(x, cos, sin []float32) {
	if !m.RopeNeox {
		kernels.RopeNorm(x, m.HeadDim, cos, sin)
		return
	}
	half := len(cos)
	for h := 0; h+m.HeadDim <= len(x); h += m.HeadDim {
		v := x[h : h+m.HeadDim]
		for i := range half {
			a, b := v[i], v[i+half]
			v[i] = a*cos[i] - b*sin[i]
			v[i+half] = a*sin[i] + b*cos[i]
		}
	}
}
