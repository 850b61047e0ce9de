package llama

import (
	"math"
	"math/rand/v2"
	"sort"
)

// Sampling chooses the next token. Temperature ≤ 0 is greedy; otherwise
// logits are filtered by TopK, TopP and MinP (0 disables each) and a
// token is drawn from the tempered distribution with a seeded generator.
type Sampling struct {
	Temperature float64
	TopK        int
	TopP        float64
	MinP        float64
	Seed        uint64
}

// Sampler draws tokens for one request.
type Sampler struct {
	p     Sampling
	rng   *rand.Rand
	cands []cand
}

type cand struct {
	id int
	p  float64
}

// NewSampler starts a sampler; equal settings give equal draws.
func NewSampler(p Sampling) *Sampler {
	return &Sampler{p: p, rng: rand.New(rand.NewPCG(p.Seed, p.Seed^0xda3e39cb94b95bdb))}
}

// Argmax is the index of the largest logit, the lowest index on ties.
func Argmax(logits []float32) int {
	best := 0
	for i, v := range logits {
		if v > logits[best] {
			best = i
		}
	}
	return best
}

// Sample picks a token from logits.
func (s *Sampler) Sample(logits []float32) int {
	if s.p.Temperature <= 0 {
		return Argmax(logits)
	}
	c := s.cands[:0]
	for i, v := range logits {
		c = append(c, cand{i, float64(v)})
	}
	sort.Slice(c, func(a, b int) bool {
		if c[a].p != c[b].p {
			return c[a].p > c[b].p
		}
		return c[a].id < c[b].id
	})
	if k := s.p.TopK; k > 0 && k < len(c) {
		c = c[:k]
	}
	mx := c[0].p
	var sum float64
	for i := range c {
		c[i].p = math.Exp((c[i].p - mx) / s.p.Temperature)
		sum += c[i].p
	}
	for i := range c {
		c[i].p /= sum
	}
	if mp := s.p.MinP; mp > 0 {
		n := 1
		for n < len(c) && c[n].p >= mp*c[0].p {
			n++
		}
		c = c[:n]
	}
	if tp := s.p.TopP; tp > 0 && tp < 1 {
		var cum float64
		for i := range c {
			cum += c[i].p
			if cum >= tp {
				c = c[:i+1]
				break
			}
		}
	}
	sum = 0
	for _, x := range c {
		sum += x.p
	}
	r := s.rng.Float64() * sum
	s.cands = c
	for _, x := range c {
		r -= x.p
		if r < 0 {
			return x.id
		}
	}
	return c[len(c)-1].id
}
