package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"unicode/utf8"

	"lukechampine.com/blake3"

	"meshd/wire"
)

// Embedder is a Backend that can embed (Options.Embed): an embedding
// model's engine. Embeds says whether this one was configured to; the
// agent routes embedding serves only to backends that do, and other
// serves only to backends that do not.
type Embedder interface {
	Embeds() bool
}

// Embeds reports whether b is an embedding backend.
func Embeds(b Backend) bool {
	e, ok := b.(Embedder)
	return ok && e.Embeds()
}

// ErrNoEmbed is wrapped when an embedding serve reaches a backend that
// does not embed, or another serve reaches one that only embeds.
var ErrNoEmbed = errors.New("backend does not embed")

// MaxEmbedInputs bounds the texts of one embedding serve (OpenAI's bound
// on an input array).
const MaxEmbedInputs = 2048

// ParseEmbedInput reads an embedding serve's prompt: a JSON array of 1 to
// MaxEmbedInputs non-empty UTF-8 strings, the texts in order. Errors wrap
// wire.ErrBadRequest.
func ParseEmbedInput(prompt []byte) ([]string, error) {
	if !utf8.Valid(prompt) {
		return nil, fmt.Errorf("%w: embedding input: not valid UTF-8", wire.ErrBadRequest)
	}
	var texts []string
	if err := json.Unmarshal(prompt, &texts); err != nil {
		return nil, fmt.Errorf("%w: embedding input: want a JSON array of strings: %v", wire.ErrBadRequest, err)
	}
	if len(texts) == 0 || len(texts) > MaxEmbedInputs {
		return nil, fmt.Errorf("%w: embedding input: %d texts, want 1..%d", wire.ErrBadRequest, len(texts), MaxEmbedInputs)
	}
	for i, t := range texts {
		if t == "" {
			return nil, fmt.Errorf("%w: embedding input: text %d is empty", wire.ErrBadRequest, i)
		}
	}
	return texts, nil
}

// EmbedResult is an embedding serve's Result: Output is the vectors as a
// JSON array of arrays, in the texts' order; tokens_in is what the engine
// read, and tokens_out (all accepted) the vectors delivered, one per text.
func EmbedResult(vecs [][]float32, tokensIn int) (Result, error) {
	if tokensIn < 0 || uint64(tokensIn) > math.MaxUint32 {
		return Result{}, fmt.Errorf("embedding: %d tokens read is out of range", tokensIn)
	}
	out, err := json.Marshal(vecs)
	if err != nil {
		return Result{}, fmt.Errorf("embedding: %w", err)
	}
	n := uint32(len(vecs))
	return Result{Outcome: wire.ServeOutcome{TokensIn: uint32(tokensIn), TokensOut: n, TokensAccepted: n}, Output: out}, nil
}

// ReferenceEmbedDim is the length of a reference embedding.
const ReferenceEmbedDim = 32

// referenceEmbed is the reference engine's embedding of text: Work
// BLAKE3 rounds per word (so energy grows with the text, as a model's
// does) seeding ReferenceEmbedDim values, L2-normalised. Deterministic:
// the same text is always the same vector. It returns the words read.
func (r *Reference) referenceEmbed(text string) ([]float32, int) {
	words := len(splitWords(text))
	state := blake3.Sum256([]byte(text))
	for i := 0; i < r.cfg.Work*max(words, 1); i++ {
		state = blake3.Sum256(state[:])
	}
	v := make([]float32, ReferenceEmbedDim)
	var norm float64
	for i := range v {
		x := float64(int(state[i])-128) + 0.5 // never all zero
		v[i] = float32(x)
		norm += x * x
	}
	norm = math.Sqrt(norm)
	for i := range v {
		v[i] = float32(float64(v[i]) / norm)
	}
	return v, words
}

func splitWords(s string) [][]byte { return bytes.Fields([]byte(s)) }
