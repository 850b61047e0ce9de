package llama

import (
	"context"
	"errors"
	"fmt"
	"math"

	"meshd/engine/runner/kernels"
)

// Speculative decoding: a small draft model proposes the next tokens
// greedily, the target model evaluates the last accepted token and all the
// proposals in one batched pass (the rows of one matrix product per
// projection, as a prompt chunk runs), and keeps the longest prefix of the
// proposals its own greedy choice agrees with, plus its own next token.
// Both caches are then cut back to what was kept.
//
// Every row of the verifying pass goes through the kernels Eval runs for
// its one token (the multi-token products add each row's blocks in the
// one-token order, as Decoder relies on), so each row's logits are those
// a plain decode step at that position would give, bit for bit: at
// temperature 0 the tokens are plain greedy decoding's, whatever the
// draft proposes. With temperature > 0 Generate decodes plainly and the
// draft is not used.

// The draft-length defaults, as llama.cpp's common parameters set them.
const (
	DefaultDraftMax  = 16
	DefaultDraftMin  = 0
	DefaultDraftPMin = 0.75
)

// SpecParams are the draft-length settings, with llama-server's meanings.
type SpecParams struct {
	// Max is the most tokens drafted for one verifying pass
	// (--draft-max), at least 1.
	Max int
	// Min is the fewest drafted tokens worth a verifying pass
	// (--draft-min): a shorter draft is dropped and the step decodes one
	// token plainly.
	Min int
	// PMin ends a draft at the first token whose probability under the
	// draft model is below it (--draft-p-min), in [0, 1]: an unsure draft
	// is likely rejected, and each rejected token costs a row of the
	// verifying pass.
	PMin float64
	// Fixed drafts up to Max tokens every pass. Otherwise the length
	// adapts to how much of the drafts the target accepts: it grows by 2
	// after a draft accepted whole, and after one cut short after a
	// accepted tokens it shrinks by 1 and to at most a+2, within
	// [max(Min, 1), Max]; and after two drafts in a row of which
	// nothing was accepted, drafting pauses for 1, then 2, 4, … up to 16
	// plain decode steps between further failed tries, so a draft that
	// does not agree with the target costs little more than none.
	Fixed bool
}

// DefaultSpecParams are llama-server's defaults with an adaptive length.
func DefaultSpecParams() SpecParams {
	return SpecParams{Max: DefaultDraftMax, Min: DefaultDraftMin, PMin: DefaultDraftPMin}
}

func (p SpecParams) validate() error {
	switch {
	case p.Max < 1 || p.Max > 256:
		return fmt.Errorf("llama: draft max %d: must be in [1, 256]", p.Max)
	case p.Min < 0 || p.Min > p.Max:
		return fmt.Errorf("llama: draft min %d: must be in [0, draft max %d]", p.Min, p.Max)
	case !(p.PMin >= 0 && p.PMin <= 1):
		return fmt.Errorf("llama: draft p-min %v: must be in [0, 1]", p.PMin)
	}
	return nil
}

// CheckDraft reports whether draft can propose tokens for target: the
// two must share one vocabulary (the same tokenizer model, the same
// tokens in the same order with the same types, the same BOS and EOS,
// and as many output logits), since a proposal is a token id the target
// checks against its own choice. The error names the first difference.
func CheckDraft(target, draft *Model) error {
	if target == nil || draft == nil {
		return errors.New("llama: no draft model")
	}
	a, b := target.Tok, draft.Tok
	switch {
	case target.Vocab != draft.Vocab:
		return fmt.Errorf("llama: the draft model's vocabulary has %d tokens, the target's %d: a draft must share the target's vocabulary", draft.Vocab, target.Vocab)
	case a.Model != b.Model:
		return fmt.Errorf("llama: the draft model's tokenizer is %q, the target's %q: a draft must share the target's vocabulary", b.Model, a.Model)
	case a.Len() != b.Len():
		return fmt.Errorf("llama: the draft model's tokenizer has %d tokens, the target's %d: a draft must share the target's vocabulary", b.Len(), a.Len())
	case a.BOS != b.BOS || a.EOS != b.EOS:
		return fmt.Errorf("llama: the draft model's BOS/EOS are %d/%d, the target's %d/%d: a draft must share the target's vocabulary", b.BOS, b.EOS, a.BOS, a.EOS)
	}
	for i := range a.Tokens {
		if a.Tokens[i] != b.Tokens[i] {
			return fmt.Errorf("llama: token %d is %q in the draft model, %q in the target: a draft must share the target's vocabulary", i, b.Tokens[i], a.Tokens[i])
		}
		if i < len(a.Types) && i < len(b.Types) && a.Types[i] != b.Types[i] {
			return fmt.Errorf("llama: token %d (%q) has type %d in the draft model, %d in the target: a draft must share the target's vocabulary", i, a.Tokens[i], b.Types[i], a.Types[i])
		}
	}
	return nil
}

// Drafter is a draft model's state paired with one target state (a slot):
// it keeps its own KV cache in step with the target's sequence. It is not
// safe for concurrent use; a server holds one per slot.
type Drafter struct {
	st   *State
	p    SpecParams
	cur  int       // the adaptive draft length
	miss int       // drafts in a row of which nothing was accepted
	skip int       // plain decode steps left before drafting again
	rows []float32 // the verifying pass's logits, rows of the target's Vocab
	buf  []int     // the draft
	toks []int     // the verifying pass's tokens
	pend []int     // tokens the draft's cache lacks
}

// NewDrafter pairs draft, a state of a draft model, with states of
// target. The models must share a vocabulary (CheckDraft).
func NewDrafter(target *Model, draft *State, p SpecParams) (*Drafter, error) {
	if draft == nil {
		return nil, errors.New("llama: no draft state")
	}
	if err := CheckDraft(target, draft.m); err != nil {
		return nil, err
	}
	if err := p.validate(); err != nil {
		return nil, err
	}
	return &Drafter{st: draft, p: p, cur: p.Max}, nil
}

// Params are the drafter's settings.
func (d *Drafter) Params() SpecParams { return d.p }

// Model is the draft model.
func (d *Drafter) Model() *Model { return d.st.m }

// speculate is Generate's decode loop with a draft: logits are the
// prompt's last, and res holds the prompt's counts.
func (s *State) speculate(ctx context.Context, req Request, logits []float32, res *Result) error {
	d := req.Draft
	if d.st.m.Vocab != s.m.Vocab {
		return fmt.Errorf("llama: draft vocabulary of %d tokens, target %d", d.st.m.Vocab, s.m.Vocab)
	}
	if need := (d.p.Max + 1) * s.m.Vocab; len(d.rows) < need {
		d.rows = make([]float32, need)
	}
	// Each request adapts from the longest draft, so its counters depend
	// on it alone, not on the requests before it.
	d.cur, d.miss, d.skip = d.p.Max, 0, 0
	sampler := NewSampler(req.Sampling)
	res.Stop = StopLimit
	// emit delivers tok and says whether the completion ends with it, by
	// Generate's rules and in its order.
	emit := func(tok int) bool {
		res.Tokens = append(res.Tokens, tok)
		switch {
		case !req.IgnoreEOS && s.m.Tok.IsEOG(tok):
			res.Stop = StopEOS
			return true
		case req.StopAt != nil && req.StopAt(res.Tokens):
			res.Stop = StopWord
			return true
		}
		return req.NPredict >= 0 && len(res.Tokens) >= req.NPredict
	}
	if req.NPredict == 0 {
		return nil
	}
	last := sampler.Sample(logits)
	if emit(last) {
		return nil
	}
	for len(s.tokens) < s.nCtx {
		if err := ctx.Err(); err != nil {
			return err
		}
		// At most k proposals: the pass evaluates last and them, and
		// delivers up to k+1 tokens.
		k := min(d.cur, s.nCtx-len(s.tokens)-1)
		if req.NPredict >= 0 {
			k = min(k, req.NPredict-len(res.Tokens)-1)
		}
		if d.skip > 0 {
			d.skip--
			k = 0
		}
		draft, err := d.propose(ctx, s.tokens, last, k)
		if err != nil {
			return err
		}
		if len(draft) < max(d.p.Min, 1) {
			draft = nil
		}
		n0 := len(s.tokens)
		toks := append(append(d.toks[:0], last), draft...)
		d.toks = toks
		rows, err := s.evalRows(ctx, toks, d.rows)
		if err != nil {
			return err
		}
		res.DraftN += len(draft)
		// Row i is the target's prediction after toks[i]. Keep toks[:i+1]
		// in the cache once row i's choice is delivered and either ends
		// the completion or disagrees with the draft (or is the one past
		// the draft); the delivered token itself is not yet evaluated, as
		// after a plain decode step.
		V, keep, done, accepted := s.m.Vocab, len(toks), false, 0
		for i := range toks {
			t := sampler.Sample(rows[i*V : (i+1)*V])
			hit := i < len(draft) && t == draft[i]
			if hit {
				accepted++
			}
			if emit(t) {
				keep, done = i+1, true
				break
			}
			if !hit {
				keep, last = i+1, t
				break
			}
		}
		res.DraftAccepted += accepted
		s.Truncate(n0 + keep)
		if done {
			return nil
		}
		d.adapt(len(draft), accepted)
	}
	return nil
}

// adapt sets the next draft length from how the last draft fared.
func (d *Drafter) adapt(drafted, accepted int) {
	if d.p.Fixed || drafted == 0 {
		return
	}
	if accepted == drafted {
		d.cur = min(d.p.Max, d.cur+2)
	} else {
		d.cur = max(d.p.Min, 1, min(d.cur-1, accepted+2))
	}
	if accepted > 0 {
		d.miss = 0
		return
	}
	if d.miss++; d.miss >= 2 {
		d.skip = 1 << min(d.miss-2, 4)
	}
}

// propose brings the draft's cache to seq followed by last (reusing the
// longest common prefix it holds) and drafts up to k tokens greedily,
// stopping early at a token less likely than PMin. The draft is valid
// until the next call.
func (d *Drafter) propose(ctx context.Context, seq []int, last, k int) ([]int, error) {
	ds := d.st
	draft := d.buf[:0]
	n := len(seq) + 1 // the sequence the draft continues: seq, last
	// The draft holds seq, last and k-1 proposals; one it cannot hold is
	// not drafted.
	k = min(k, ds.nCtx-n+1)
	if k <= 0 {
		return draft, nil
	}
	c := 0
	for c < len(ds.tokens) && c < len(seq) && ds.tokens[c] == seq[c] {
		c++
	}
	if c == len(seq) && c < len(ds.tokens) && ds.tokens[c] == last {
		c++
	}
	if c == n {
		c-- // evaluate last again: its logits start the draft
	}
	ds.Truncate(c)
	d.pend = append(append(d.pend[:0], seq[c:]...), last)
	logits, err := ds.EvalBatch(ctx, d.pend)
	if err != nil {
		ds.Truncate(0)
		return nil, fmt.Errorf("llama: draft model: %w", err)
	}
	for {
		tok := Argmax(logits)
		if d.p.PMin > 0 && topProb(logits, tok) < d.p.PMin {
			break
		}
		draft = append(draft, tok)
		if len(draft) == k {
			break
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if logits, err = ds.Eval(tok); err != nil {
			ds.Truncate(0)
			return nil, fmt.Errorf("llama: draft model: %w", err)
		}
	}
	d.buf = draft
	return draft, nil
}

// topProb is the softmax probability of logits[tok], the largest.
func topProb(logits []float32, tok int) float64 {
	mx := float64(logits[tok])
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v) - mx)
	}
	return 1 / sum
}

// evalRows runs toks at the next positions as batched rows and returns
// every row's logits in out (rows of Vocab): row i is what Eval of toks[i]
// would return after toks[:i], bit for bit. On an error the cache is as
// it was.
func (s *State) evalRows(ctx context.Context, toks []int, out []float32) ([]float32, error) {
	if err := s.checkBatch(toks); err != nil {
		return nil, err
	}
	m := s.m
	V, D := m.Vocab, m.Dim
	out = out[:len(toks)*V]
	if len(toks) == 1 {
		// Eval's fused loops are the faster way to run one token.
		l, err := s.Eval(toks[0])
		if err != nil {
			return nil, err
		}
		copy(out, l)
		return out, nil
	}
	n0 := len(s.tokens)
	b := s.batchScratch()
	for c0 := 0; c0 < len(toks); c0 += b.n {
		chunk := toks[c0:min(c0+b.n, len(toks))]
		T := len(chunk)
		if err := s.forward(ctx, chunk, false, false); err != nil {
			s.Truncate(n0)
			return nil, err
		}
		// The output head as the Decoder runs it: the final norm of each
		// row, quantised, through one product over the rows.
		b.normQ(s.pool, m, T, m.outNorm)
		kernels.MatMul(s.pool, m.output, out[c0*V:(c0+T)*V], b.xb[:T*D], T, b.qD(T))
		s.tokens = append(s.tokens, chunk...)
	}
	return out, nil
}
