package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

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
	// MaxTokens caps a serve's max_tokens; 0 is
	// DefaultReferenceMaxTokens. The reference engine has no context to
	// run out of, so the cap is what bounds its work.
	MaxTokens uint32
	// Embedding makes this an embedding backend: it serves only
	// embedding serves (Options.Embed), with deterministic vectors of
	// ReferenceEmbedDim values.
	Embedding bool
}

// DefaultReferenceMaxTokens is a reference backend's max_tokens cap when
// its configuration names none: 4096, a common context length, so that
// a reference node refuses what a small GGUF node would.
const DefaultReferenceMaxTokens = 4096

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
	case cfg.MaxTokens > MaxEngineTokens:
		return nil, fmt.Errorf("reference engine %s: max_tokens %d over %d", cfg.Name, cfg.MaxTokens, MaxEngineTokens)
	}
	if cfg.MaxTokens == 0 {
		cfg.MaxTokens = DefaultReferenceMaxTokens
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

// Embeds implements Embedder.
func (r *Reference) Embeds() bool { return r.cfg.Embedding }

// TokenCap implements TokenCapped.
func (r *Reference) TokenCap() uint32 { return r.cfg.MaxTokens }

// referenceWords is the reference engine's output vocabulary.
var referenceWords = [16]string{"mesh", "joule", "token", "meter", "shunt", "route", "seal", "chain",
	"receipt", "steward", "grant", "floor", "ceiling", "recipe", "watt", "answer"}

// Serve implements Backend: ServeWith with zero Options.
func (r *Reference) Serve(ctx context.Context, req wire.ServeRequest, prompt []byte) (Result, error) {
	return r.ServeWith(ctx, req, prompt, Options{})
}

var _ OptionBackend = (*Reference)(nil)

// ServeWith implements OptionBackend. tokens_in is the number of
// whitespace-separated words of the text the engine reads (the prompt, or
// for a chat serve the rendered conversation, see RenderReferenceChat);
// max_tokens tokens are produced from a state seeded by that text; greedy,
// so every token is accepted. A chat serve therefore answers exactly as a
// plain serve of its rendered text does.
//
// With opts.Emit, each token's text is emitted as soon as it is made: the
// first token bare, every later one with a leading space, so that the
// pieces concatenate to Output. An Emit error abandons the serve at once
// and is returned wrapped.
//
// With opts.Stop, generation ends at the first stop string: the output is
// cut before it, a streamed piece holds back any tail that may begin one,
// and tokens_out (and accepted) count only the tokens with text delivered.
func (r *Reference) ServeWith(ctx context.Context, req wire.ServeRequest, prompt []byte, opts Options) (Result, error) {
	if err := req.Validate(); err != nil {
		return Result{}, fmt.Errorf("reference engine %s: %w", r.cfg.Name, err)
	}
	if req.MaxTokens > r.cfg.MaxTokens {
		return Result{}, fmt.Errorf("reference engine %s: %w: %w: %d > %d", r.cfg.Name, wire.ErrBadRequest, ErrTooManyTokens, req.MaxTokens, r.cfg.MaxTokens)
	}
	if opts.Embed != r.cfg.Embedding {
		if r.cfg.Embedding {
			return Result{}, fmt.Errorf("reference engine %s: %w: it is an embedding backend, and serves only embeddings", r.cfg.Name, ErrNoEmbed)
		}
		return Result{}, fmt.Errorf("reference engine %s: %w", r.cfg.Name, ErrNoEmbed)
	}
	if opts.Embed {
		texts, err := ParseEmbedInput(prompt)
		if err != nil {
			return Result{}, fmt.Errorf("reference engine %s: %w", r.cfg.Name, err)
		}
		vecs := make([][]float32, len(texts))
		in := 0
		for i, t := range texts {
			if err := ctx.Err(); err != nil {
				return Result{}, fmt.Errorf("reference engine %s: interrupted after %d embeddings: %w", r.cfg.Name, i, err)
			}
			var n int
			vecs[i], n = r.referenceEmbed(t)
			in += n
		}
		return EmbedResult(vecs, in)
	}
	text := prompt
	if opts.Chat {
		msgs, err := ParseChat(prompt)
		if err != nil {
			return Result{}, fmt.Errorf("reference engine %s: %w", r.cfg.Name, err)
		}
		text = []byte(RenderReferenceChat(msgs))
	}
	if err := CheckStop(opts.Stop); err != nil {
		return Result{}, fmt.Errorf("reference engine %s: %w", r.cfg.Name, err)
	}
	in := len(bytes.Fields(text))
	state := blake3.Sum256(text)
	// The output passes through the stop cutter: with no stop strings it
	// releases every piece whole, as it is made.
	cut := NewStopCutter(opts.Stop)
	emit := func(t uint32, piece []byte) error {
		if opts.Emit == nil || len(piece) == 0 {
			return nil
		}
		if err := opts.Emit(piece); err != nil {
			return fmt.Errorf("reference engine %s: output abandoned after %d tokens: %w", r.cfg.Name, t+1, err)
		}
		return nil
	}
	var starts []int // each token's first byte in the generated text
	made, stopped := 0, false
	for t := uint32(0); t < req.MaxTokens && !stopped; t++ {
		if err := ctx.Err(); err != nil {
			return Result{}, fmt.Errorf("reference engine %s: interrupted after %d tokens: %w", r.cfg.Name, t, err)
		}
		for i := 0; i < r.cfg.Work; i++ {
			state = blake3.Sum256(state[:])
		}
		piece := referenceWords[state[0]&15]
		if t > 0 {
			piece = " " + piece
		}
		starts = append(starts, made)
		made += len(piece)
		var ready []byte
		ready, stopped = cut.Add([]byte(piece))
		if err := emit(t, ready); err != nil {
			return Result{}, err
		}
	}
	if err := emit(uint32(len(starts)-1), cut.Flush()); err != nil {
		return Result{}, err
	}
	out := cut.Output()
	// The tokens delivered: those with at least one byte before the cut.
	// A token wholly inside (or after) the stop string was made but never
	// delivered, and the outcome claims only what was.
	n := uint32(0)
	for _, s := range starts {
		if s < len(out) {
			n++
		}
	}
	o := wire.ServeOutcome{TokensIn: uint32(in), TokensOut: n, TokensAccepted: n}
	return Result{Outcome: o, Output: bytes.Clone(out), Stopped: stopped}, nil
}

// ChatMessage is one message of a chat prompt (Options.Chat).
type ChatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ParseChat reads a chat prompt: UTF-8 JSON that is a non-empty array of
// objects, each with exactly a non-empty string "role" and a string
// "content". Anything else (another field, a duplicate key, trailing data)
// is refused, so that the bytes the receipt's prompt_hash addresses say
// nothing the engine does not render. Errors wrap wire.ErrBadRequest and
// name the problem.
func ParseChat(prompt []byte) ([]ChatMessage, error) {
	bad := func(format string, a ...any) ([]ChatMessage, error) {
		return nil, fmt.Errorf("%w: chat prompt: "+format, append([]any{wire.ErrBadRequest}, a...)...)
	}
	if !utf8.Valid(prompt) {
		// JSON decoding would replace the invalid bytes silently.
		return bad("not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(prompt))
	if tok, err := dec.Token(); err != nil {
		return bad("not JSON: %v", err)
	} else if tok != json.Delim('[') {
		return bad("want a JSON array of messages")
	}
	var msgs []ChatMessage
	for i := 0; dec.More(); i++ {
		if tok, err := dec.Token(); err != nil {
			return bad("message %d: %v", i, err)
		} else if tok != json.Delim('{') {
			return bad("message %d is not an object", i)
		}
		var m ChatMessage
		var seen [2]bool
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return bad("message %d: %v", i, err)
			}
			key, _ := tok.(string)
			var dst *string
			var k int
			switch key {
			case "role":
				dst, k = &m.Role, 0
			case "content":
				dst, k = &m.Content, 1
			default:
				return bad("message %d has the field %q; only role and content are rendered", i, key)
			}
			if seen[k] {
				return bad("message %d repeats %q", i, key)
			}
			seen[k] = true
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return bad("message %d: %v", i, err)
			}
			if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, dst) != nil {
				return bad("message %d: %s must be a string", i, key)
			}
		}
		if _, err := dec.Token(); err != nil { // the closing brace
			return bad("message %d: %v", i, err)
		}
		switch {
		case !seen[0]:
			return bad("message %d has no role", i)
		case !seen[1]:
			return bad("message %d has no content", i)
		case m.Role == "":
			return bad("message %d has an empty role", i)
		}
		msgs = append(msgs, m)
	}
	if _, err := dec.Token(); err != nil { // the closing bracket
		return bad("%v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return bad("trailing data after the array")
	}
	if len(msgs) == 0 {
		return bad("no messages")
	}
	return msgs, nil
}

// RenderReferenceChat is the reference engine's fixed chat template: each
// message as "<role>: <content>\n", then "assistant:".
func RenderReferenceChat(msgs []ChatMessage) string {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString(m.Role)
		b.WriteString(": ")
		b.WriteString(m.Content)
		b.WriteByte('\n')
	}
	b.WriteString("assistant:")
	return b.String()
}
