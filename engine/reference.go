package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"lukechampine.com/blake3"

	"meshd/wire"
)

// ReferenceConfig describes a reference backend.
type ReferenceConfig struct {
	Name       string
	Fidelity   wire.Fidelity
	UJPerToken uint64
	// Work is the number of BLAKE3 compressions per token: the knob that
	// makes a "bigger" reference model burn proportionally more energy.
	Work int
}

// Reference is the deterministic, weights-free engine of §5. Each token is
// the result of Work chained BLAKE3 hashes of a state seeded by the prompt,
// so the work done (and the energy a meter sees) is proportional to the
// tokens served, and the same prompt always yields the same tokens.
type Reference struct {
	cfg ReferenceConfig
}

// NewReference validates cfg and returns the engine.
func NewReference(cfg ReferenceConfig) (*Reference, error) {
	switch {
	case cfg.Name == "":
		return nil, errors.New("reference engine: name is empty")
	case !cfg.Fidelity.Valid():
		return nil, fmt.Errorf("reference engine %s: fidelity %v outside F0..F4", cfg.Name, cfg.Fidelity)
	case cfg.UJPerToken == 0:
		return nil, fmt.Errorf("reference engine %s: uj_per_token must be positive", cfg.Name)
	case cfg.Work <= 0:
		return nil, fmt.Errorf("reference engine %s: work must be positive", cfg.Name)
	}
	return &Reference{cfg: cfg}, nil
}

// Name implements Backend.
func (r *Reference) Name() string { return r.cfg.Name }

// Recipe implements Backend: the algorithm version and its only parameter.
func (r *Reference) Recipe() string { return fmt.Sprintf("reference/v1:work=%d", r.cfg.Work) }

// Fidelity implements Backend.
func (r *Reference) Fidelity() wire.Fidelity { return r.cfg.Fidelity }

// UJPerToken implements Backend.
func (r *Reference) UJPerToken() uint64 { return r.cfg.UJPerToken }

// referenceWords is the reference engine's output vocabulary.
var referenceWords = [16]string{"mesh", "joule", "token", "meter", "shunt", "route", "seal", "chain",
	"receipt", "steward", "grant", "floor", "ceiling", "recipe", "watt", "answer"}

// Serve implements Backend. tokens_in is the number of whitespace-separated
// words in the prompt; max_tokens tokens are produced; greedy, so every
// token is accepted.
func (r *Reference) Serve(ctx context.Context, req wire.ServeRequest, prompt []byte) (Result, error) {
	if err := req.Validate(); err != nil {
		return Result{}, fmt.Errorf("reference engine %s: %w", r.cfg.Name, err)
	}
	in := len(bytes.Fields(prompt))
	state := blake3.Sum256(prompt)
	var out bytes.Buffer
	for t := uint32(0); t < req.MaxTokens; t++ {
		if err := ctx.Err(); err != nil {
			return Result{}, fmt.Errorf("reference engine %s: interrupted after %d tokens: %w", r.cfg.Name, t, err)
		}
		for i := 0; i < r.cfg.Work; i++ {
			state = blake3.Sum256(state[:])
		}
		if t > 0 {
			out.WriteByte(' ')
		}
		out.WriteString(referenceWords[state[0]&15])
	}
	o := wire.ServeOutcome{TokensIn: uint32(in), TokensOut: req.MaxTokens, TokensAccepted: req.MaxTokens}
	return Result{Outcome: o, Output: out.Bytes()}, nil
}
