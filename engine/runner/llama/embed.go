package llama

import (
	"context"
	"errors"
	"fmt"
	"math"
)

// Embed runs tokens as a fresh sequence (the cache is reset and then
// holds them) and returns their embedding: the hidden states after the
// final norm (llama.cpp's result_norm), pooled per the model's Pooling
// and L2-normalised, as llama-server returns them.
//
// PoolMean averages the tokens' states, PoolCLS takes the first token's,
// PoolLast the last token's; each gives Dim values. PoolNone gives one
// L2-normalised row of Dim values per token, len(tokens)·Dim in all.
// A model whose file has no <arch>.pooling_type is pooled by mean.
// Attention is causal, as for generation.
func (s *State) Embed(ctx context.Context, tokens []int) ([]float32, error) {
	m := s.m
	switch m.Pooling {
	case PoolNone, PoolMean, PoolCLS, PoolLast:
	default:
		return nil, fmt.Errorf("llama: embeddings with pooling %s are not supported", m.Pooling)
	}
	if len(tokens) == 0 {
		return nil, errors.New("llama: no tokens to embed")
	}
	s.Truncate(0)
	if err := s.checkBatch(tokens); err != nil {
		return nil, err
	}
	D := m.Dim
	var out []float32
	var sum []float64
	switch m.Pooling {
	case PoolNone:
		out = make([]float32, len(tokens)*D)
	case PoolMean:
		sum = make([]float64, D)
		fallthrough
	default:
		out = make([]float32, D)
	}
	err := s.run(ctx, tokens, false, func(t0 int, rows []float32) {
		n := len(rows) / D
		switch m.Pooling {
		case PoolNone:
			copy(out[t0*D:], rows)
		case PoolMean:
			for i, v := range rows {
				sum[i%D] += float64(v)
			}
		case PoolCLS:
			if t0 == 0 {
				copy(out, rows[:D])
			}
		case PoolLast:
			if t0+n == len(tokens) {
				copy(out, rows[(n-1)*D:])
			}
		}
	})
	if err != nil {
		return nil, err
	}
	if sum != nil {
		for i, v := range sum {
			out[i] = float32(v / float64(len(tokens)))
		}
	}
	for r := 0; r < len(out); r += D {
		normalize(out[r : r+D])
	}
	return out, nil
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
