package llama

import (
	"context"
	"errors"
	"fmt"

	"meshd/engine/runner/kernels"
)

// Decoder runs decode steps for several states of one model together:
// one token for each state, the tokens going through every projection as
// the rows of one matrix product (kernels.MatMul, as a prompt chunk's
// tokens do), so that a step reads each weight once for all its states
// rather than once per state. A decode step is bound by reading the
// weights, so a step for a few states costs little more than a step for
// one.
//
// Each state's logits are those Eval would return, bit for bit: a row
// goes through the kernels Eval runs for its one token (the multi-token
// products add each row's blocks in the one-token order), with its own
// position, cache and attention, so what a state generates never depends
// on what it was batched with.
//
// A Decoder is not safe for concurrent use, and the states of a call must
// not be used elsewhere during it.
type Decoder struct {
	m    *Model
	pool *kernels.Pool
	b    *batch // rows for b.n states, grown as needed

	// The step's new keys and values, row t for states[t], before they
	// are copied to each state's cache: a MatMul writes its rows
	// contiguously, and the states' cache rows are not.
	k, v   []float32
	logits []float32 // rows of Vocab
	out    [][]float32
	attn   multiAttention
}

// NewDecoder returns a Decoder for m's states whose products run on pool.
func (m *Model) NewDecoder(pool *kernels.Pool) *Decoder {
	return &Decoder{m: m, pool: pool}
}

// Pool is the pool that runs the state's products.
func (s *State) Pool() *kernels.Pool { return s.pool }

// multiAttention is one layer's attention for a decode step over the
// pool, a loop over (state, head) pairs: row t attends over the cached
// positions of states[t] up to its new one, with that state's scores.
type multiAttention struct {
	d      *Decoder
	states []*State
	li     int
}

func (a *multiAttention) Range(lo, hi int) {
	m, b := a.d.m, a.d.b
	hd := m.HeadDim
	for i := lo; i < hi; i++ {
		t, h := i/m.Heads, i%m.Heads
		s := a.states[t]
		o := t*m.Dim + h*hd
		s.attend(a.li, h, b.att[o:o+hd], b.q[o:o+hd], len(s.tokens)+1, s.scores[h*s.nCtx:])
	}
}

// Eval runs toks[i] at the next position of states[i], for every i, and
// returns the states' logits: out[i] is states[i]'s own buffer, as its
// Eval returns it, valid until that state is next evaluated; out itself
// is valid until the next call. A single state runs as its Eval does.
//
// The inputs are checked first: as many tokens as states, all of them
// states of the Decoder's model, none twice, none with a full context
// (ErrContextExceeded), every token in the vocabulary. ctx is checked
// between layers. On any error no state changes: its cached tokens and
// its logits are as they were.
func (d *Decoder) Eval(ctx context.Context, states []*State, toks []int) ([][]float32, error) {
	if err := d.check(states, toks); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	T := len(states)
	if T == 1 {
		// Eval's fused loops are the faster way to run one token.
		l, err := states[0].Eval(toks[0])
		if err != nil {
			return nil, err
		}
		d.out = append(d.out[:0], l)
		return d.out, nil
	}
	m, p := d.m, d.pool
	D, kvDim := m.Dim, m.KVHeads*m.HeadDim
	b := d.scratch(T)
	if err := b.embed(m, toks, func(t int) int { return len(states[t].tokens) }); err != nil {
		return nil, err
	}
	d.attn.states = states
	// Every layer writes each state's cache row at its new position, a
	// row no cached token uses, so a step abandoned between layers leaves
	// the states as they were.
	for li := range m.layers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		l := &m.layers[li]
		k, v := d.k[:T*kvDim], d.v[:T*kvDim]
		b.qkv(p, m, l, T, k, v)
		for t, s := range states {
			s.putKV(li, len(s.tokens), k[t*kvDim:(t+1)*kvDim], v[t*kvDim:(t+1)*kvDim])
		}
		d.attn.li = li
		p.Run(T*m.Heads, 1, &d.attn)
		b.rest(p, m, l, T)
	}
	b.normQ(p, m, T, m.outNorm)
	logits := d.logits[:T*m.Vocab]
	kernels.MatMul(p, m.output, logits, b.xb[:T*D], T, b.qD(T))
	d.attn.states = nil
	d.out = d.out[:0]
	for t, s := range states {
		copy(s.logits, logits[t*m.Vocab:(t+1)*m.Vocab])
		s.tokens = append(s.tokens, toks[t])
		d.out = append(d.out, s.logits)
	}
	return d.out, nil
}

// check validates a step's inputs; the error names the offending entry.
func (d *Decoder) check(states []*State, toks []int) error {
	switch {
	case len(states) == 0:
		return errors.New("llama: no states to evaluate")
	case len(states) != len(toks):
		return fmt.Errorf("llama: %d states but %d tokens", len(states), len(toks))
	}
	for i, s := range states {
		switch {
		case s == nil:
			return fmt.Errorf("llama: state %d is nil", i)
		case s.m != d.m:
			return fmt.Errorf("llama: state %d belongs to another model", i)
		case len(s.tokens) >= s.nCtx:
			return fmt.Errorf("llama: state %d: context of %d tokens is full: %w", i, s.nCtx, ErrContextExceeded)
		case toks[i] < 0 || toks[i] >= d.m.Vocab:
			return fmt.Errorf("llama: state %d: token %d outside the %d-token vocabulary", i, toks[i], d.m.Vocab)
		}
		for j := range i {
			if states[j] == s {
				return fmt.Errorf("llama: states %d and %d are the same state", j, i)
			}
		}
	}
	return nil
}

// scratch returns rows for at least T states, reallocated only when T
// exceeds every earlier step's.
func (d *Decoder) scratch(T int) *batch {
	if d.b == nil || d.b.n < T {
		m := d.m
		d.b = m.newBatch(T)
		kvDim := m.KVHeads * m.HeadDim
		d.k, d.v = make([]float32, T*kvDim), make([]float32, T*kvDim)
		d.logits = make([]float32, T*m.Vocab)
		d.attn.d = d
	}
	return d.b
}
