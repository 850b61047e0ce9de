package llama

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrContextExceeded is returned when a prompt does not fit the context.
var ErrContextExceeded = errors.New("the request exceeds the available context size")

// Request is one completion.
type Request struct {
	Prompt []int
	// NPredict caps generated tokens; negative means until EOS or a full
	// context.
	NPredict int
	// CachePrompt reuses the cached keys and values of the longest common
	// prefix with the previous sequence.
	CachePrompt bool
	IgnoreEOS   bool
	Sampling    Sampling
	// StopAt, if set, is asked after each generated token whether the
	// output so far ends the completion (a stop word).
	StopAt func(generated []int) bool
	// Decode, if set, runs each decode step in place of the state's Eval:
	// it must evaluate tok at the state's next position and return the
	// state's logits as Eval does. A server whose states share decode
	// steps (Decoder) routes them through it.
	Decode func(ctx context.Context, tok int) ([]float32, error)
	// Draft, if set, decodes speculatively with its draft model when
	// sampling is greedy (spec.go): the tokens are those of plain greedy
	// decoding, bit for bit. Decode is then not used. With temperature
	// > 0 the draft is not used.
	Draft *Drafter
}

// StopType says why generation ended, in llama-server's words.
type StopType string

// The stop types a completion can end with.
const (
	StopNone  StopType = "none"
	StopEOS   StopType = "eos"
	StopLimit StopType = "limit"
	StopWord  StopType = "word"
)

// Result is a finished completion.
type Result struct {
	Tokens     []int // generated, including a final EOS
	PromptN    int   // prompt tokens evaluated
	CacheN     int   // prompt tokens reused from the cache
	Stop       StopType
	PromptDur  time.Duration
	PredictDur time.Duration
	// DraftN is the number of tokens the draft model proposed for
	// verification, DraftAccepted those of them the target agreed with
	// and delivered (llama-server's draft_n and draft_n_accepted); both
	// 0 without a draft.
	DraftN, DraftAccepted int
}

// Generate runs a completion on the state.
func (s *State) Generate(ctx context.Context, req Request) (Result, error) {
	var res Result
	if len(req.Prompt) == 0 {
		return res, errors.New("llama: empty prompt")
	}
	if len(req.Prompt) >= s.nCtx {
		return res, fmt.Errorf("llama: prompt of %d tokens, context %d: %w", len(req.Prompt), s.nCtx, ErrContextExceeded)
	}
	for _, t := range req.Prompt {
		if t < 0 || t >= s.m.Vocab {
			return res, fmt.Errorf("llama: prompt token %d outside the %d-token vocabulary", t, s.m.Vocab)
		}
	}
	n := 0
	if req.CachePrompt {
		for n < len(s.tokens) && n < len(req.Prompt) && s.tokens[n] == req.Prompt[n] {
			n++
		}
		// The last prompt token is always evaluated: its logits start
		// generation.
		if n == len(req.Prompt) {
			n--
		}
	}
	s.Truncate(n)
	res.CacheN = n
	start := time.Now()
	// The prompt runs batched (EvalBatch); a cancelled or failed prompt
	// leaves the cache empty, as if the request had not come.
	logits, err := s.EvalBatch(ctx, req.Prompt[n:])
	if err != nil {
		s.Truncate(0)
		return res, err
	}
	res.PromptN = len(req.Prompt) - n
	res.PromptDur = time.Since(start)
	start = time.Now()
	if req.Draft != nil && req.Sampling.Temperature <= 0 {
		err := s.speculate(ctx, req, logits, &res)
		res.PredictDur = time.Since(start)
		return res, err
	}
	decode := req.Decode
	if decode == nil {
		decode = func(_ context.Context, tok int) ([]float32, error) { return s.Eval(tok) }
	}
	sampler := NewSampler(req.Sampling)
	res.Stop = StopLimit
	for req.NPredict < 0 || len(res.Tokens) < req.NPredict {
		tok := sampler.Sample(logits)
		res.Tokens = append(res.Tokens, tok)
		if !req.IgnoreEOS && s.m.Tok.IsEOG(tok) {
			res.Stop = StopEOS
			break
		}
		if req.StopAt != nil && req.StopAt(res.Tokens) {
			res.Stop = StopWord
			break
		}
		if req.NPredict >= 0 && len(res.Tokens) >= req.NPredict {
			break
		}
		if len(s.tokens) >= s.nCtx {
			break
		}
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if logits, err = decode(ctx, tok); err != nil {
			return res, err
		}
	}
	res.PredictDur = time.Since(start)
	return res, nil
}
